"""Output: direct by default, redirects, tee, prefixes, filters, odd lines, closed pipes."""
import os
import subprocess

from conftest import TRAINRUN, run


def rank_dirs(logs):
    (run_dir,) = os.listdir(logs)
    return logs / run_dir


def test_default_output_goes_straight_through(worker):
    r = run(["--nproc-per-node=2", worker, "spew", "3", "5", "stderr", "oops"])
    assert r.returncode == 0
    assert r.stdout == "xxxxx\n" * 6
    assert r.stderr == "oops\noops\n"


def test_redirects_write_files_only(worker, tmp_path):
    logs = tmp_path / "logs"
    r = run(["--nproc-per-node=2", "--redirects=3", f"--log-dir={logs}", worker, "spew", "2", "3",
             "stderr", "err"])
    assert r.returncode == 0
    assert r.stdout == "" and r.stderr == ""
    d = rank_dirs(logs)
    for rank in range(2):
        assert (d / "attempt_0" / str(rank) / "stdout.log").read_text() == "xxx\nxxx\n"
        assert (d / "attempt_0" / str(rank) / "stderr.log").read_text() == "err\n"


def test_per_rank_redirect_map(worker, tmp_path):
    logs = tmp_path / "logs"
    r = run(["--nproc-per-node=2", "-r", "0:1,1:2", f"--log-dir={logs}", worker, "spew", "1", "2",
             "stderr", "e"])
    assert r.returncode == 0
    d = rank_dirs(logs) / "attempt_0"
    assert (d / "0" / "stdout.log").read_text() == "xx\n"
    assert not (d / "0" / "stderr.log").exists()
    assert (d / "1" / "stderr.log").read_text() == "e\n"
    assert not (d / "1" / "stdout.log").exists()
    assert r.stdout == "xx\n" and r.stderr == "e\n"


def test_tee_prefixes_console_and_keeps_files_raw(worker, tmp_path):
    logs = tmp_path / "logs"
    r = run(["--nproc-per-node=2", "--tee=3", f"--log-dir={logs}", worker, "spew", "2", "3",
             "stderr", "err"])
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert sorted(lines) == ["[default0]:xxx"] * 2 + ["[default1]:xxx"] * 2
    assert sorted(r.stderr.splitlines()) == ["[default0]:err", "[default1]:err"]
    d = rank_dirs(logs) / "attempt_0"
    assert (d / "1" / "stdout.log").read_text() == "xxx\nxxx\n"


def test_role_and_prefix_template(worker):
    r = run(["--nproc-per-node=2", "--tee=1", "--role=trainer", worker, "spew", "1", "1"])
    assert sorted(r.stdout.splitlines()) == ["[trainer0]:x", "[trainer1]:x"]
    r = run(["--nproc-per-node=2", "--tee=1", worker, "spew", "1", "1"],
            env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "${role_name}-$rank/${local_rank}|$$ "})
    assert sorted(r.stdout.splitlines()) == ["default-0/0|$ x", "default-1/1|$ x"]


def test_local_ranks_filter_keeps_others_in_files(worker, tmp_path):
    logs = tmp_path / "logs"
    r = run(["--nproc-per-node=3", "--tee=3", "--local-ranks-filter=1", f"--log-dir={logs}",
             worker, "spew", "1", "2"])
    assert r.returncode == 0
    assert r.stdout == "[default1]:xx\n"
    d = rank_dirs(logs) / "attempt_0"
    for rank in range(3):
        assert (d / str(rank) / "stdout.log").read_text() == "xx\n"


def test_filter_without_tee_sends_others_to_files(worker, tmp_path):
    logs = tmp_path / "logs"
    r = run(["--nproc-per-node=2", "--local-ranks-filter=0", f"--log-dir={logs}", worker, "spew",
             "1", "2"])
    assert r.stdout == "xx\n"
    assert (rank_dirs(logs) / "attempt_0" / "1" / "stdout.log").read_text() == "xx\n"


def test_lines_never_mix_between_workers(worker):
    r = run(["--nproc-per-node=4", "--tee=1", worker, "spew", "20000", "200"], timeout=120)
    assert r.returncode == 0
    lines = r.stdout.split("\n")
    assert lines[-1] == ""
    lines = lines[:-1]
    assert len(lines) == 80000
    for line in lines:
        assert line[:9] in ("[default0", "[default1", "[default2", "[default3")
        assert line[11:] == "x" * 200


def test_partial_last_line_binary_and_a_1mib_line(worker, tmp_path):
    logs = tmp_path / "logs"
    r = subprocess.run([TRAINRUN, "--tee=1", f"--log-dir={logs}", worker, "binary", "spew", "1",
                        str(1 << 20), "partial", "tail"], capture_output=True, timeout=60)
    assert r.returncode == 0
    out = r.stdout
    assert out.startswith(b"[default0]:\xff\xfe\xc3\x28 raw\n")
    assert b"[default0]:" + b"x" * (1 << 20) + b"\n" in out
    assert out.endswith(b"[default0]:tail\n")
    raw = (rank_dirs(logs) / "attempt_0" / "0" / "stdout.log").read_bytes()
    assert raw == b"\xff\xfe\xc3\x28 raw\n" + b"x" * (1 << 20) + b"\ntail"


def test_pipe_to_head_does_not_stall_workers(worker, tmp_path):
    logs = tmp_path / "logs"
    cmd = (f"'{TRAINRUN}' --nproc-per-node=2 --tee=1 --log-dir='{logs}' '{worker}' "
           f"spew 200000 100 | head -1")
    r = subprocess.run(["/bin/bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True,
                       timeout=60)
    assert r.stdout.startswith("[default")
    assert r.returncode == 0, r.stderr
    for rank in range(2):
        size = (rank_dirs(logs) / "attempt_0" / str(rank) / "stdout.log").stat().st_size
        assert size == 200000 * 101


def test_worker_closing_stdout_is_fine(worker):
    r = run(["--nproc-per-node=2", "--tee=3", worker, "close-stdout", "stderr", "still here"])
    assert r.returncode == 0
    assert sorted(r.stderr.splitlines()) == ["[default0]:still here", "[default1]:still here"]


def test_unwritable_log_dir_is_a_clear_error(worker, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    if os.access(ro, os.W_OK):
        target = "/proc/trainrun-logs"  # root ignores permissions: use a filesystem that refuses
    else:
        target = str(ro / "logs")
    r = run(["--redirects=3", f"--log-dir={target}", worker, "exit", "0"], timeout=30)
    assert r.returncode == 1
    assert "cannot create log directory" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_temporary_log_dir_is_removed_when_empty(worker, tmp_path):
    r = run(["--nproc-per-node=2", worker, "exit", "0"], env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0
    assert os.listdir(tmp_path) == []
