"""Output: direct by default, redirects, tee, prefixes, filters, odd lines, closed and paused
pipes."""
import os
import signal
import subprocess
import time

import pytest

from conftest import TRAINRUN, run, start, wait_for


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


def test_tee_shows_a_prompt_without_its_newline_at_once(tmp_path):
    # A prompt waits for its answer with no newline: --tee shows it after a short quiet, as a
    # terminal would, prefixed once; the rest of its line follows without a second prefix.
    script = tmp_path / "prompt.py"
    script.write_text("import sys, time\n"
                      "sys.stdout.write('type a word> ')\nsys.stdout.flush()\n"
                      "time.sleep(5)\n"
                      "sys.stdout.write('answer\\n')\n")
    p = start(["--nproc-per-node=1", "--tee=3", str(script)], stdout=subprocess.PIPE,
              stderr=subprocess.PIPE, env={"PYTHON_EXEC": os.environ.get("PYTHON_EXEC",
                                                                          "python3")})
    began = time.monotonic()
    shown = b""
    os.set_blocking(p.stdout.fileno(), False)
    while b"> " not in shown and p.poll() is None and time.monotonic() - began < 60:
        shown += p.stdout.read() or b""
        time.sleep(0.02)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    # Seen while the worker still waited for its answer, 5 s long.
    assert shown.startswith(b"[default0]:type a word> ") and b"answer" not in shown, shown
    assert shown + out == b"[default0]:type a word> answer\n", shown + out


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


@pytest.mark.parametrize("run_id", ["../x", "team/job7", "j" * 255],
                         ids=["parent", "slash", "255-bytes"])
def test_any_run_id_keeps_the_log_tree_inside_the_log_dir(worker, tmp_path, run_id):
    logs = tmp_path / "logs"
    r = run(["--redirects=3", f"--rdzv-id={run_id}", f"--log-dir={logs}", worker, "env",
             str(tmp_path / "env")])
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["env.0", "logs"]
    assert f"TORCHELASTIC_RUN_ID={run_id}\n" in (tmp_path / "env.0").read_text()
    assert sorted(os.listdir(rank_dirs(logs) / "attempt_0" / "0")) == ["stderr.log", "stdout.log"]


def test_temporary_log_dir_is_removed_when_empty(worker, tmp_path):
    r = run(["--nproc-per-node=2", worker, "exit", "0"], env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0
    assert os.listdir(tmp_path) == []


# What the C++ runtime leaves beside a rank's error file at its first report(), written as it
# writes it; the rank's error file's directory printed.
FIRST_REPORT = """
import os, sys, time
rank_dir = os.path.dirname(os.environ["TORCHELASTIC_ERROR_FILE"])
with open(os.path.join(rank_dir, "first_report"), "w") as f:
    f.write(f"{time.time()}\\n")
print(rank_dir, flush=True)
"""


def test_a_successful_job_leaves_no_log_directory_on_disk_or_in_memory(tmp_path):
    """A job that succeeded leaves nothing of its temporary tree: not the runtime's first-report
    marks, not --hang-timeout's heartbeat; the tree is on disk under $TMPDIR, else /tmp, never
    /dev/shm."""
    script = tmp_path / "job.py"
    script.write_text(FIRST_REPORT)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    r = run(["--nproc-per-node=2", "--hang-timeout=60", str(script)], env={"TMPDIR": str(tmp)})
    assert r.returncode == 0, r.stderr
    assert all(line.startswith(f"{tmp}/trainrun_") for line in r.stdout.split()), r.stdout
    assert os.listdir(tmp) == [], sorted(str(p) for p in tmp.rglob("*"))
    assert "log directory kept" not in r.stderr, r.stderr
    env = {k: v for k, v in os.environ.items() if k != "TMPDIR"}
    r = subprocess.run([TRAINRUN, "--nproc-per-node=1", str(script)], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    [rank_dir] = r.stdout.split()
    assert rank_dir.startswith("/tmp/trainrun_"), rank_dir
    assert not os.path.exists("/".join(rank_dir.split("/")[:3]))  # /tmp/trainrun_*, removed


def log_sizes(logs, name="stdout.log"):
    d = rank_dirs(logs) / "attempt_0"
    return [(d / rank / name).stat().st_size for rank in sorted(os.listdir(d))]


def logged(logs):
    """The bytes in the workers' stdout logs so far (0 before they exist)."""
    try:
        return sum(log_sizes(logs))
    except (OSError, ValueError):
        return 0


def test_paused_reader_gets_every_line_and_supervision_goes_on(worker, tmp_path):
    """`trainrun ... | less`, paused for 8 s: the workers wait for the reader, nothing is dropped,
    and the launcher still handles signals meanwhile."""
    logs = tmp_path / "logs"
    usr1 = tmp_path / "usr1"
    lines = 40000  # 4 MB a worker: twice what the console queues
    # stderr is the same pipe (2>&1): trainrun's own lines and the workers' share one queue.
    p = start(["--nproc-per-node=2", "--tee=3", f"--log-dir={logs}", worker, "on-usr1", str(usr1),
               "spew", str(lines), "99", "stderr", "done"],
              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        t0 = time.monotonic()
        # The console fills, then the workers block: they cannot have written everything.
        assert wait_for(lambda: logged(logs) > 0, 10)
        time.sleep(3)
        assert p.poll() is None
        assert logged(logs) < 2 * lines * 100, "nothing held the workers back"
        # The event loop is not stuck on the console: a forwarded signal reaches both workers.
        p.send_signal(signal.SIGUSR1)
        assert wait_for(lambda: usr1.exists() and usr1.read_text() == "usr1\n" * 2, 5), \
            "SIGUSR1 was not forwarded while the console was paused"
        time.sleep(max(0.0, 8 - (time.monotonic() - t0)))
        out, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, out[-2000:]
    got = out.split(b"\n")
    assert got.pop() == b""
    for rank in range(2):
        prefix = f"[default{rank}]:".encode()
        mine = [line for line in got if line.startswith(prefix)]
        # stdout and stderr are two pipes: "done" may come before the last stdout lines.
        assert mine.count(prefix + b"done") == 1
        assert [line for line in mine if line != prefix + b"done"] == [prefix + b"x" * 99] * lines
    assert len(got) == 2 * (lines + 1), [line[:80] for line in got if not line.startswith(b"[")]
    assert log_sizes(logs) == [lines * 100] * 2


@pytest.mark.parametrize("fails", [False, True])
def test_reader_that_never_reads_costs_the_console_not_the_exit(worker, tmp_path, fails):
    """Nobody ever reads trainrun's stdout. A job whose output fits the queue ends, and so does a
    job that fails while its other worker is blocked on the console: with the right code, after
    a bounded wait, saying what was not written."""
    logs = tmp_path / "logs"
    script = tmp_path / "w.sh"
    if fails:
        body = f'[ "$LOCAL_RANK" = 1 ] && {{ sleep 3; exit 3; }}\nexec "{worker}" spew 100000 99 sleep 60\n'
    else:
        body = f'exec "{worker}" spew 10000 99\n'  # 1 MB a worker: the queue holds it all
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    r, w = os.pipe()
    try:
        with open(tmp_path / "err", "w") as err:
            p = start(["--nproc-per-node=2", "--tee=1", f"--log-dir={logs}", "--shutdown-timeout=2",
                       str(script)], stdout=w, stderr=err)
        os.close(w)
        w = -1
        try:
            code = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            pytest.fail("trainrun did not exit while its console was not read")
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    err = (tmp_path / "err").read_text()
    assert code == (3 if fails else 0), err
    assert "the console has taken no output for 5 s" in err, err
    assert "bytes of console output were not written" in err
    if fails:
        assert "exitcode  : 3" in err
        assert log_sizes(logs)[0] < 100000 * 100  # rank 0 was blocked when the job stopped
    else:
        assert log_sizes(logs) == [10000 * 100] * 2
