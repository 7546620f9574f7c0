"""What trainrun says about itself: loopback warnings, the node line, -q/-v, --log-timestamps,
--summary-file, and counts in words."""
import json
import os
import pty
import re
import shutil
import subprocess

import pytest

from conftest import TRAINRUN, run
from job_failures import planned_command, stderr_lines
from ports import free_port

STAMPED = re.compile(r"^trainrun: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (ERROR|WARNING|INFO|DEBUG) ")


def launcher_lines(stderr):
    return [line for line in stderr.splitlines() if line.startswith("trainrun: ")]


# -- loopback addresses on a multi-node job -------------------------------------------------

def test_a_multi_node_job_on_one_machine_is_not_warned_of_loopback(agents, worker):
    port = free_port()
    common = ["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
              "--rdzv-id=loop", worker, "exit", "0"]
    nodes = [agents(name, common) for name in ("a", "b")]
    for node in nodes:
        assert node.wait() == 0, node.err
        assert "loopback" not in node.err, node.err


def test_a_node_that_cannot_reach_a_loopback_endpoint_is_told_why(worker):
    # As a node on another machine than the host would be: nothing listens there.
    port = free_port()
    r = run(["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
             "--rdzv-conf=join_timeout=2,is_host=0", worker, "exit", "0"], timeout=60)
    assert r.returncode == 1, r.stderr
    assert (f"rendezvous endpoint 127.0.0.1:{port} not reachable yet (Connection refused), "
            "retrying; 127.0.0.1 is a loopback address: only an agent on this machine can host "
            "it" in r.stderr), r.stderr


def test_no_loopback_warning_on_one_node(worker):
    r = run(["--nnodes=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
             worker, "exit", "0"])
    assert r.returncode == 0, r.stderr
    assert "loopback" not in r.stderr
    r = run(["--standalone", "--nproc-per-node=2", worker, "exit", "0"])
    assert r.returncode == 0 and "loopback" not in r.stderr


# -- the node line --------------------------------------------------------------------------

def test_each_agent_says_once_which_node_it_is(agents, worker):
    port = free_port()
    common = ["--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=nodeline", "--max-restarts=1"]
    a = agents("a", common + [worker, "exit", "0"])
    b = agents("b", common + [worker, "exit", "0"])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    seen = []
    for agent in (a, b):
        lines = [l for l in agent.err.splitlines() if l.startswith("trainrun: node rank ")]
        assert len(lines) == 1, agent.err
        m = re.match(r"trainrun: node rank (\d) of 2 nodes \(host (\S+), advertising 127\.0\.0\.1; "
                     r"ranks (\d)\.\.(\d)\)$", lines[0])
        assert m, lines[0]
        seen.append(int(m.group(1)))
        assert int(m.group(4)) - int(m.group(3)) == 1
    assert sorted(seen) == [0, 1]


def test_a_single_node_job_has_no_node_line(worker):
    r = run(["--standalone", worker, "exit", "0"])
    assert r.returncode == 0 and "node rank" not in r.stderr


# -- -q, -v, --log-timestamps ---------------------------------------------------------------

def test_quiet_keeps_only_errors(worker, tmp_path):
    r = run(["-q", "--numa-binding=node", "--nproc-per-node=2", worker, "exit", "0"],
            env={"TRAINRUN_SYSFS_ROOT": str(tmp_path)})  # no GPU there: a warning, not shown
    assert r.returncode == 0 and r.stderr == ""
    r = run(["--quiet", "--max-restarts=1", worker, "exit", "3"])
    assert r.returncode == 3
    assert "restarting" not in r.stderr  # a warning
    assert "FAILED" in r.stderr  # the failure summary is an error


def test_verbose_adds_debug_lines(worker):
    r = run(["-v", "--nproc-per-node=2", worker, "exit", "0"])
    assert r.returncode == 0, r.stderr
    assert "trainrun: attempt 0: starting 2 workers (ranks 0..1 of 2)" in r.stderr
    assert len(re.findall(r"trainrun: worker \d \(local rank \d, pid \d+\) exited with code 0",
                          r.stderr)) == 2
    plain = run(["--nproc-per-node=2", worker, "exit", "0"])
    assert plain.returncode == 0 and plain.stderr == ""


def test_quiet_and_verbose_together_are_refused():
    r = run(["-q", "-v", "/bin/true"])
    assert r.returncode == 2
    assert r.stderr == "trainrun: -q/--quiet and -v/--verbose cannot be used together\n"


def test_q_and_v_after_the_entrypoint_belong_to_it(tmp_path):
    out = tmp_path / "argv"
    r = run(["--no-python", "/bin/sh", "-c", f'printf "%s\\n" "$@" > {out}', "sh", "-q", "-v"])
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "-q\n-v\n"


@pytest.mark.parametrize("how", ["flag", "env"])
def test_timestamps_and_levels(worker, how, tmp_path):
    args = ["-v", worker, "exit", "0"]
    env = {"TRAINRUN_SYSFS_ROOT": str(tmp_path)}  # no GPU there: --numa-binding warns
    if how == "flag":
        args.insert(0, "--log-timestamps")
    else:
        env["TRAINRUN_LOG_FORMAT"] = "timestamps"
    r = run(["--numa-binding=node", *args], env=env)
    assert r.returncode == 0, r.stderr
    lines = launcher_lines(r.stderr)
    assert lines and all(STAMPED.match(line) for line in lines), r.stderr
    assert any(" WARNING warning: --numa-binding=node" in line for line in lines)
    assert any(" DEBUG attempt 0: starting 1 worker " in line for line in lines)


def test_bad_log_format_is_refused():
    r = run(["/bin/true"], env={"TRAINRUN_LOG_FORMAT": "fancy"})
    assert r.returncode == 2
    assert r.stderr == "trainrun: TRAINRUN_LOG_FORMAT=fancy: use timestamps or plain\n"


# -- counts in words ------------------------------------------------------------------------

def test_one_restart_and_one_worker_are_singular(worker):
    r = run(["--max-restarts=1", worker, "exit", "3"])
    assert r.returncode == 3
    assert "restarting the worker group (1 of 1 restart)" in r.stderr
    assert "restarts)" not in r.stderr and "(s)" not in r.stderr


# -- the failure summary's pointer ----------------------------------------------------------

def installed_copy(prefix, man_page):
    """trainrun as installed under `prefix` (bin/, with the guides in share/doc/trainrun and,
    with `man_page`, the page in share/man/man1)."""
    (prefix / "bin").mkdir(parents=True)
    exe = prefix / "bin" / "trainrun"
    try:
        os.link(TRAINRUN, exe)
    except OSError:
        shutil.copy(TRAINRUN, exe)
    (prefix / "share" / "doc" / "trainrun").mkdir(parents=True)
    (prefix / "share" / "doc" / "trainrun" / "cli.md").write_text("# trainrun\n")
    if man_page:
        (prefix / "share" / "man" / "man1").mkdir(parents=True)
        (prefix / "share" / "man" / "man1" / "trainrun.1").write_text(".TH TRAINRUN 1\n")
    return str(exe)


def test_a_bare_binary_points_at_no_manual_it_lacks(worker):
    # The binary of a build tree: no man page or guide beside it.
    r = run([worker, "exit", "3"])
    assert r.returncode == 3
    assert "error_file: <N/A>" in r.stderr
    assert "To enable traceback: decorate the worker's main function with @record" in r.stderr
    assert "man trainrun" not in r.stderr
    assert "man trainrun" not in run(["--help-all"]).stdout


@pytest.mark.skipif(not shutil.which("man"), reason="no man program to show the page")
@pytest.mark.parametrize("man_page", [True, False], ids=["man-page", "guides"])
def test_an_installed_trainrun_points_at_its_installed_manual(worker, tmp_path, man_page):
    exe = installed_copy(tmp_path / "prefix", man_page)
    r = subprocess.run([exe, worker, "exit", "3"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 3, r.stderr
    help_all = subprocess.run([exe, "--help-all"], capture_output=True, text=True).stdout
    guides = str(tmp_path / "prefix" / "share" / "doc" / "trainrun" / "cli.md")
    if man_page:
        assert "To enable traceback see: man trainrun, section ERROR FILES" in r.stderr
        assert "The manual: man trainrun (" in help_all
    else:
        assert f'To enable traceback see: {guides}, section "Error files"' in r.stderr
        assert "man trainrun" not in r.stderr + help_all
        assert f"The manual: {guides} (" in " ".join(help_all.split())


# -- --summary-file -------------------------------------------------------------------------

def read_summary(path):
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no temporary left
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_summary_of_a_successful_job(worker, tmp_path):
    path = tmp_path / "s" / "summary.json"
    path.parent.mkdir()
    r = run(["--nproc-per-node=2", f"--summary-file={path}", worker, "exit", "0"])
    assert r.returncode == 0, r.stderr
    s = read_summary(str(path))
    assert s["schema"] == "trainrun.job-summary/1"
    assert (s["status"], s["exit_code"], s["root_cause"], s["restarts"]) == ("succeeded", 0, None, 0)
    assert s["entrypoint"] == worker and s["args"] == ["exit", "0"]
    assert s["duration_s"] >= 0 and s["started_at"] <= s["ended_at"]
    [attempt] = s["attempts"]
    assert attempt["restart_count"] == 0 and attempt["world_size"] == 2
    assert attempt["started_at"] <= attempt["ended_at"]
    workers = sorted(attempt["workers"], key=lambda w: w["rank"])
    assert [(w["rank"], w["local_rank"], w["exit_code"], w["signal"]) for w in workers] == [
        (0, 0, 0, None), (1, 1, 0, None)]
    assert all(w["pid"] > 0 and w["error_file"] is None for w in workers)


def test_summary_of_a_failed_job(worker, tmp_path):
    path = tmp_path / "s" / "summary.json"
    path.parent.mkdir()
    r = run(["--nproc-per-node=2", f"--summary-file={path}", worker, "rank-exit", "1", "0",
             "error-file", "boom", "exit", "7"])
    assert r.returncode == 7, r.stderr
    s = read_summary(str(path))
    assert (s["status"], s["exit_code"]) == ("failed", 7)
    root = s["root_cause"]
    assert (root["rank"], root["local_rank"], root["exit_code"], root["message"]) == (0, 0, 7, "boom")
    assert root["error_file"].endswith("error.json")
    [attempt] = s["attempts"]
    assert attempt["root_cause"]["rank"] == 0
    by_rank = {w["rank"]: w for w in attempt["workers"]}
    assert by_rank[0]["exit_code"] == 7 and by_rank[0]["message"] == "boom"
    assert sorted(by_rank) == [0, 1]


def test_summary_of_a_restarted_job(worker, tmp_path):
    path = tmp_path / "s" / "summary.json"
    path.parent.mkdir()
    r = run(["--max-restarts=2", f"--summary-file={path}", worker, "signal", "15"])
    assert r.returncode == 128 + 15
    s = read_summary(str(path))
    assert (s["status"], s["exit_code"], s["restarts"]) == ("failed", 143, 2)
    assert [a["restart_count"] for a in s["attempts"]] == [0, 1, 2]
    for a in s["attempts"]:
        [w] = a["workers"]
        assert (w["exit_code"], w["signal"]) == (None, "SIGTERM")
        assert a["root_cause"]["signal"] == "SIGTERM"
    # Each restart's start-up counts from the last attempt's failing worker's exit.
    for last, a in zip(s["attempts"], s["attempts"][1:]):
        assert a["startup"]["counted_from"] == {
            "event": "worker exit", "rank": 0, "at": last["workers"][0]["ended_at"]}
    assert s["root_cause"]["signal"] == "SIGTERM"


def test_summary_that_cannot_be_written_is_an_error_line(worker, tmp_path):
    path = tmp_path / "missing" / "summary.json"
    r = run([f"--summary-file={path}", worker, "exit", "0"])
    assert r.returncode == 0
    assert launcher_lines(r.stderr) == [
        f"trainrun: cannot write {path}: No such file or directory (create)"]


def test_summary_of_a_job_that_could_not_start(tmp_path):
    path = tmp_path / "s" / "summary.json"
    path.parent.mkdir()
    r = run([f"--summary-file={path}", "--no-python", str(tmp_path / "no-such-program")])
    assert r.returncode == 127
    s = read_summary(str(path))
    assert (s["status"], s["exit_code"], s["attempts"]) == ("error", 127, [])
    assert "no-such-program" in s["reason"]


# Bytes that are not UTF-8 (a str's surrogate escapes are passed to the program as those bytes),
# in each text of the summary that comes from outside, and what the summary holds for them.
NOT_UTF8 = [
    ("argument", [], ["exit", "3", "x\udcff"], lambda s: s["args"] == ["exit", "3", "x\ufffd"]),
    ("stderr", [], ["stderr", "bad \udcff\udcc3(", "exit", "3"],
     lambda s: s["root_cause"]["stderr_tail"] == "bad \ufffd\ufffd("),
    ("error file", [], ["error-file", "boom \udcff", "exit", "3"],
     lambda s: "boom \ufffd" in s["root_cause"]["message"]),
    ("log dir", ["--redirects=3", "--log-dir={tmp}/logs\udcff"], ["exit", "3"],
     lambda s: "/logs\ufffd/" in s["log_dir"] and "/logs\ufffd/" in s["root_cause"]["stderr_log"]),
]


@pytest.mark.parametrize("what,options,actions,holds", NOT_UTF8, ids=[c[0] for c in NOT_UTF8])
def test_summary_of_a_job_whose_texts_are_not_utf8(worker, tmp_path, what, options, actions,
                                                   holds):
    path = tmp_path / "s" / "summary.json"
    path.parent.mkdir()
    options = [o.format(tmp=tmp_path) for o in options]
    r = run(["--standalone", *options, f"--summary-file={path}", worker, *actions],
            errors="replace")  # the failure summary shows the worker's bytes as they are
    assert r.returncode == 3, r.stderr
    assert "internal error" not in r.stderr
    s = read_summary(str(path))
    assert (s["status"], s["exit_code"]) == ("failed", 3)
    assert holds(s), s


def test_summary_on_both_nodes_names_the_failing_worker(agents, worker, tmp_path):
    port = free_port()
    common = ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=summaries"]
    paths = {name: tmp_path / name / "summary.json" for name in ("a", "b")}
    procs = {}
    for name, path in paths.items():
        path.parent.mkdir()
        procs[name] = agents(name, common + [f"--summary-file={path}", worker,
                                             "rank-exit", "1", "5", "sleep", "60"])
    for p in procs.values():
        assert p.wait() == 5, p.err
    summaries = [read_summary(str(path)) for path in paths.values()]
    for s in summaries:
        assert (s["status"], s["exit_code"]) == ("failed", 5)
        assert (s["root_cause"]["rank"], s["root_cause"]["exit_code"]) == (1, 5)
        [attempt] = s["attempts"]
        assert attempt["nnodes"] == 2 and attempt["world_size"] == 2
    # Both name the root cause the rendezvous decided, the same to the pid.
    assert summaries[0]["root_cause"] == summaries[1]["root_cause"]
    assert summaries[0]["root_cause"]["pid"] > 0


@pytest.mark.parametrize("error_file", [False, True], ids=["stderr", "error file"])
def test_a_failure_whose_texts_are_not_utf8_crosses_to_the_other_node(agents, worker, tmp_path,
                                                                      error_file):
    port = free_port()
    common = ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=notutf8"]
    # Rank 1 ends with bytes that are not UTF-8 at the end of its stderr, and in its error file.
    actions = ["stderr", "bad \udcff\udcc3("]
    if error_file:
        actions += ["error-file", "boom \udcff"]
    paths = {name: tmp_path / name / "summary.json" for name in ("a", "b")}
    procs = {}
    for name, path in paths.items():
        path.parent.mkdir()
        procs[name] = agents(name, common + [f"--summary-file={path}", worker, *actions,
                                             "rank-exit", "1", "5", "sleep", "60"])
    for p in procs.values():
        assert p.wait() == 5, p.err
        assert "internal error" not in p.err
    summaries = {name: read_summary(str(path)) for name, path in paths.items()}
    [failing] = [n for n, s in summaries.items() if s["attempts"][0]["base_rank"] == 1]
    [other] = [n for n in summaries if n != failing]
    for s in summaries.values():
        assert (s["status"], s["root_cause"]["rank"], s["root_cause"]["exit_code"]) == (
            "failed", 1, 5)
    # The failing node keeps the end of the worker's stderr, those bytes as U+FFFD.
    assert summaries[failing]["root_cause"]["stderr_tail"] == "bad \ufffd\ufffd(", summaries
    if error_file:
        # The error file's message crossed the rendezvous, as U+FFFD.
        assert "boom \ufffd" in summaries[other]["root_cause"]["message"], summaries[other]
    else:
        # Without an error file the tail crossed the rendezvous, as U+FFFD (UTF-8 EF BF BD); the
        # other node's own rank wrote the raw bytes.
        shown = procs[other].err_path.read_bytes()
        assert "bad \ufffd\ufffd(".encode() in shown, shown[-2000:]


# -- where the output is ----------------------------------------------------------------------

TRACEBACK_WITHOUT_ERROR_FILE = """\
import sys
print("starting", flush=True)
sys.stderr.write("noise\\n" * 30)
raise ValueError("the real reason\\x1b[31m")
"""


def test_a_worker_without_error_file_shows_its_last_stderr_lines(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(TRACEBACK_WITHOUT_ERROR_FILE)
    path = tmp_path / "summary.json"
    r = run([f"--summary-file={path}", str(script)], env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 1, r.stderr
    summary = r.stderr[r.stderr.index("Root Cause"):]
    assert "error_file: <N/A>" in summary
    assert "last 20 lines of its stderr (it wrote no error file):" in summary
    assert "  ValueError: the real reason\\x1b[31m\n" in summary  # escaped, as another node's text
    assert "\x1b" not in summary
    root = json.loads(path.read_text())["root_cause"]
    assert root["stderr_tail"].endswith("ValueError: the real reason\\x1b[31m")
    assert root["stderr_tail"].count("\n") == 19
    assert (root["stdout_log"], root["stderr_log"]) == (None, None)
    # Nothing was written to the log directory: it is gone, and not named.
    assert "log directory" not in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["fails.py", "summary.json"]


def test_a_later_failure_is_shown_whole_as_the_root_cause_is(tmp_path):
    """Two workers fail without an error file, each with 20 lines (about 2 KB) of stderr, the
    second while the first's failure stops the group: the summary shows both whole."""
    plan = {"a 0": {"after": None, "code": 3, "stderr": 20},
            "a 1": {"after": 0.3, "code": 4, "stderr": 20}}
    r = run(["--nproc-per-node=2", "--shutdown-timeout=5", "--no-python",
             *planned_command(tmp_path, plan)], env={"NODE": "a"})
    assert r.returncode == 3, r.stderr
    failures, root = r.stderr.split("Root Cause (first observed failure):")
    assert "not shown" not in r.stderr, r.stderr
    assert "\n  ".join(stderr_lines("a1", 20)) in failures, r.stderr
    assert "\n  ".join(stderr_lines("a0", 20)) in root, r.stderr


def test_on_a_terminal_the_workers_keep_writing_to_it_themselves(tmp_path):
    script = tmp_path / "tty.py"
    script.write_text("import os\nprint(os.isatty(2))\n")
    main, terminal = pty.openpty()
    try:
        r = subprocess.run([TRAINRUN, str(script)], stdout=subprocess.PIPE, stderr=terminal,
                           text=True, timeout=60)
    finally:
        os.close(terminal)
        os.close(main)
    assert (r.returncode, r.stdout) == (0, "True\n")

def test_redirected_failure_names_its_log_files_and_the_log_directory(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(TRACEBACK_WITHOUT_ERROR_FILE)
    logs, path = tmp_path / "logs", tmp_path / "summary.json"
    r = run(["--nproc-per-node=2", "--redirects=3", f"--log-dir={logs}", f"--summary-file={path}",
             str(script)])
    assert r.returncode == 1, r.stderr
    s = json.loads(path.read_text())
    [run_dir] = os.listdir(logs)
    assert s["log_dir"] == str(logs / run_dir)
    assert f"trainrun: log directory: {logs / run_dir}\n" in r.stderr
    for w in s["attempts"][0]["workers"]:
        rank_dir = logs / run_dir / "attempt_0" / str(w["local_rank"])
        assert (w["stdout_log"], w["stderr_log"]) == (str(rank_dir / "stdout.log"),
                                                      str(rank_dir / "stderr.log"))
    root = s["root_cause"]
    assert f"  stdout    : {root['stdout_log']}\n" in r.stderr
    assert f"  stderr    : {root['stderr_log']}\n" in r.stderr
    assert root["stderr_log"].endswith(f"/attempt_0/{root['local_rank']}/stderr.log")
    assert "ValueError: the real reason" in root["stderr_tail"]
    assert "ValueError: the real reason" not in r.stderr.split("Failures:")[0]  # not on the console


def test_a_successful_tee_run_leaves_no_directory_behind(worker, tmp_path):
    r = run(["--nproc-per-node=2", "--tee=3", worker, "spew", "1", "2"],
            env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "[default1]:" in r.stdout
    assert os.listdir(tmp_path) == []
    assert "log directory" not in r.stderr


def test_a_successful_redirected_run_says_where_its_logs_stay(worker, tmp_path):
    r = run(["--redirects=1", worker, "spew", "1", "2"], env={"TMPDIR": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    [base] = os.listdir(tmp_path)
    [run_dir] = os.listdir(tmp_path / base)
    assert f"trainrun: log directory kept: {tmp_path / base / run_dir} (" in r.stderr
    assert (tmp_path / base / run_dir / "attempt_0" / "0" / "stdout.log").stat().st_size > 0


def test_a_tee_run_whose_console_went_away_keeps_its_logs(worker, tmp_path):
    cmd = f"'{TRAINRUN}' --tee=1 '{worker}' spew 200000 100 | head -1"
    r = subprocess.run(["/bin/bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, TMPDIR=str(tmp_path)))
    assert r.returncode == 0, r.stderr
    [base] = os.listdir(tmp_path)
    [run_dir] = os.listdir(tmp_path / base)
    assert f"trainrun: log directory kept: {tmp_path / base / run_dir} (" in r.stderr
    log = tmp_path / base / run_dir / "attempt_0" / "0" / "stdout.log"
    assert log.stat().st_size == 200000 * 101


# -- which Python ran ---------------------------------------------------------------------------

def run_without_torch(tmp_path, source, *args):
    """Runs a script `source` under a `python3` that cannot import Debian's torch (site-packages
    off: -S), named by PYTHON_EXEC; returns the result, that python and its version."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python3"
    python.write_text("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")
    python.chmod(0o755)
    script = tmp_path / "train.py"
    script.write_text(source)
    version = subprocess.run(["/usr/bin/python3", "--version"], capture_output=True,
                             text=True).stdout.split()[1]
    r = run([*args, str(script)], env={"PYTHON_EXEC": str(python)})
    return r, python, version


def test_verbose_names_the_python_of_the_workers(tmp_path):
    r, python, version = run_without_torch(tmp_path, "pass\n", "-v")
    assert r.returncode == 0, r.stderr
    assert (f"trainrun: Python workers run {python} (Python {version}; from PYTHON_EXEC)\n"
            in r.stderr)
    quiet = run([str(tmp_path / "train.py")], env={"PYTHON_EXEC": str(python)})
    assert "Python workers run" not in quiet.stderr


def test_a_python_without_torch_gets_one_hint(tmp_path):
    r, python, version = run_without_torch(tmp_path, "import torch\n", "--nproc-per-node=2")
    assert r.returncode == 1, r.stderr
    hint = re.compile(f"^trainrun: rank [01]'s Python \\({re.escape(str(python))}, "
                      f"{re.escape(version)}, from PYTHON_EXEC\\) has no module torch: set "
                      "PYTHON_EXEC to the python of your environment, or activate it$", re.M)
    assert len(hint.findall(r.stderr)) == 1, r.stderr
    assert r.stderr.count("has no module torch") == 1


def test_a_python_that_does_not_say_its_version_is_not_waited_for(tmp_path):
    python = tmp_path / "python3"
    python.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exec sleep 100\n"
                      "exec /usr/bin/python3 \"$@\"\n")
    python.chmod(0o755)
    script = tmp_path / "ok.py"
    script.write_text("pass\n")
    r = run(["-v", str(script)], env={"PYTHON_EXEC": str(python)}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert f"trainrun: Python workers run {python} (version unknown; from PYTHON_EXEC)\n" in r.stderr
