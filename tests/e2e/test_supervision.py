"""Supervision: failures stop the group, exit codes, summary, restarts, signals, no survivors."""
import os
import pathlib
import signal
import subprocess
import time

import pytest

from conftest import (TRAINRUN, alive, cgroup_directory, read_envs, read_pids, run, start,
                      wait_for, wait_for_pids)


def test_success_exits_zero_at_once(worker):
    r = run(["--nproc-per-node=4", worker, "sleep", "0.1"], timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""


def test_failure_stops_the_group_and_exits_with_the_workers_code(worker, tmp_path):
    pids = tmp_path / "pids"
    r = run(["--nproc-per-node=4", worker, "pidfile", str(pids), "rank-exit", "2", "7",
             "sleep", "60"], timeout=30)
    assert r.returncode == 7, r.stderr
    assert "FAILED" in r.stderr
    assert "rank      : 2 (local_rank: 2)" in r.stderr
    assert "exitcode  : 7" in r.stderr
    assert "<NO_OTHER_FAILURES>" in r.stderr
    for pid in read_pids(pids):
        assert not alive(pid)


def test_death_by_signal_exits_128_plus_n_and_names_the_signal(worker):
    r = run(["--nproc-per-node=2", worker, "rank-exit", "0", "0", "signal", "11"], timeout=30)
    assert r.returncode == 128 + 11, r.stderr
    assert "Signal 11 (SIGSEGV) received by PID" in r.stderr
    assert "exitcode  : -11" in r.stderr


def test_sigkill_of_a_worker_like_the_oom_killer(worker, tmp_path):
    pids = tmp_path / "pids"
    p = start(["--nproc-per-node=3", worker, "pidfile", str(pids), "sleep", "60"],
              stderr=open(tmp_path / "err", "w"))
    victims = wait_for_pids(pids, 3)
    os.kill(victims[1], signal.SIGKILL)
    assert p.wait(timeout=20) == 128 + 9
    assert "SIGKILL" in (tmp_path / "err").read_text()
    for pid in victims:
        assert not alive(pid)


def test_sigterm_ignorer_gets_sigkill_after_the_shutdown_timeout(worker, tmp_path):
    pids = tmp_path / "pids"
    # Bounded by the run's timeout, far below the worker's own 600 s.
    r = run(["--nproc-per-node=2", "--shutdown-timeout=1", worker, "ignore-term", "pidfile",
             str(pids), "wait-lines", str(pids), "2", "rank-exit", "1", "5", "sleep", "600"],
            timeout=120)
    assert r.returncode == 5, r.stderr
    assert "sending SIGKILL" in r.stderr
    for pid in read_pids(pids):
        assert not alive(pid)


def test_error_file_sets_root_cause_and_traceback(worker):
    r = run(["--nproc-per-node=2", worker, "rank-exit", "0", "0", "error-file", "ValueError: bad",
             "exit", "3"], timeout=30)
    assert r.returncode == 3
    assert "Traceback: ValueError: bad" in r.stderr
    assert "error.json" in r.stderr


@pytest.mark.parametrize("content", ["{not json", "[1,2]", '{"message": 5}'])
def test_malformed_error_file_is_reported_not_fatal(tmp_path, content):
    script = tmp_path / "w.sh"
    script.write_text(f"#!/bin/sh\nprintf '%s' '{content}' > \"$TORCHELASTIC_ERROR_FILE\"\nexit 4\n")
    script.chmod(0o755)
    r = run([str(script)], timeout=30)
    assert r.returncode == 4
    assert "malformed" in r.stderr
    assert "FAILED" in r.stderr


def test_huge_error_file_is_reported_not_read(tmp_path):
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nhead -c 6000000 /dev/zero > \"$TORCHELASTIC_ERROR_FILE\"\nexit 4\n")
    script.chmod(0o755)
    r = run([str(script)], timeout=30)
    assert r.returncode == 4
    assert "too large" in r.stderr


def test_plain_error_file_form(tmp_path):
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\necho '{\"message\": \"plain text\", \"timestamp\": 1764468103}'"
                      " > \"$TORCHELASTIC_ERROR_FILE\"\nexit 4\n")
    script.chmod(0o755)
    r = run([str(script)], timeout=30)
    assert r.returncode == 4 and "plain text" in r.stderr


def test_restarts_count_up_and_log_per_attempt(worker, tmp_path):
    logs = tmp_path / "logs"
    marker = tmp_path / "marker"
    script = tmp_path / "w.sh"
    # Both ranks print, meet at a barrier of files, then fail on the first two attempts.
    script.write_text("#!/bin/sh\necho \"attempt $TORCHELASTIC_RESTART_COUNT rank $RANK\"\n"
                      f"touch {marker}.$TORCHELASTIC_RESTART_COUNT.$RANK\n"
                      f"for i in $(seq 200); do [ -e {marker}.$TORCHELASTIC_RESTART_COUNT.0 ] && "
                      f"[ -e {marker}.$TORCHELASTIC_RESTART_COUNT.1 ] && break; sleep 0.05; done\n"
                      "[ \"$TORCHELASTIC_RESTART_COUNT\" -ge 2 ] || exit 9\n")
    script.chmod(0o755)
    r = run(["--nproc-per-node=2", "--max-restarts=3", "--redirects=1", f"--log-dir={logs}",
             "--rdzv-id=job1", str(script)], timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("restarting the worker group") == 2
    (run_dir,) = os.listdir(logs)
    assert run_dir.startswith("job1_")
    for attempt in range(3):
        for rank in range(2):
            text = (logs / run_dir / f"attempt_{attempt}" / str(rank) / "stdout.log").read_text()
            assert text == f"attempt {attempt} rank {rank}\n"


def test_restarts_exhausted_fail_with_summary(tmp_path):
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\nexit 6\n")
    script.chmod(0o755)
    r = run(["--max-restarts=2", "--nproc-per-node=2", str(script)], timeout=60)
    assert r.returncode == 6
    assert r.stderr.count("restarting the worker group") == 2
    assert "(2 of 2 restarts)" in r.stderr
    assert "FAILED" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT])
def test_stop_signals_reach_workers_and_exit_128_plus_n(worker, tmp_path, sig):
    pids = tmp_path / "pids"
    p = start(["--nproc-per-node=3", "--shutdown-timeout=5", worker, "pidfile", str(pids),
               "sleep", "60"], stderr=open(tmp_path / "err", "w"))
    victims = wait_for_pids(pids, 3)
    os.kill(p.pid, sig)
    assert p.wait(timeout=20) == 128 + sig
    for pid in victims:
        assert not alive(pid)


def test_second_ctrl_c_kills_at_once(worker, tmp_path):
    # SIGTERM twice, to workers that ignore it (a SIGINT would end them at once: the second one
    # would then find trainrun already exiting, not in its grace period).
    pids = tmp_path / "pids"
    err = tmp_path / "err"
    p = start(["--nproc-per-node=2", "--shutdown-timeout=600", worker, "ignore-term", "pidfile",
               str(pids), "sleep", "600"], stderr=open(err, "w"))
    victims = wait_for_pids(pids, 2)
    os.kill(p.pid, signal.SIGTERM)
    assert wait_for(lambda: "received SIGTERM;" in err.read_text(), 30)
    os.kill(p.pid, signal.SIGTERM)
    # Bounded far below the 600 s grace period the first signal started.
    assert p.wait(timeout=120) == 128 + signal.SIGTERM
    assert "received SIGTERM again; killing the workers now" in err.read_text()
    for pid in victims:
        assert not alive(pid)


def test_sigusr1_is_forwarded_without_stopping(worker, tmp_path):
    pids = tmp_path / "pids"
    got = tmp_path / "usr1"
    p = start(["--nproc-per-node=2", worker, "on-usr1", str(got), "pidfile", str(pids),
               "sleep", "2"])
    wait_for_pids(pids, 2)
    os.kill(p.pid, signal.SIGUSR1)
    assert wait_for(lambda: got.exists() and got.read_text().count("usr1") == 2, 5)
    assert p.wait(timeout=20) == 0


def test_signals_to_handle_chooses_the_set(worker, tmp_path):
    pids = tmp_path / "pids"
    got = tmp_path / "usr1"
    # SIGUSR1 not in the set: it is not forwarded, and kills trainrun by its default action.
    p = start(["--nproc-per-node=1", "--signals-to-handle=SIGTERM", worker, "on-usr1", str(got),
               "pidfile", str(pids), "sleep", "60"])
    victims = wait_for_pids(pids, 1)
    os.kill(p.pid, signal.SIGUSR1)
    assert p.wait(timeout=10) == -signal.SIGUSR1
    assert not got.exists()
    assert wait_for(lambda: not alive(victims[0]), 5)


def test_kill_9_of_trainrun_leaves_no_empty_log_tree(worker, tmp_path):
    # Without --log-dir, trainrun makes its own tree (under $TMPDIR, else /tmp); with
    # only error files in it, nothing was written there by the time trainrun is killed.
    pids = tmp_path / "pids"
    envs = tmp_path / "envs"
    envs.mkdir()
    p = start(["--nproc-per-node=2", worker, "env", str(envs / "e"), "pidfile", str(pids),
               "sleep", "60"])
    workers = wait_for_pids(pids, 2)
    tree = pathlib.Path(read_envs(envs)[0]["TORCHELASTIC_ERROR_FILE"]).parents[3]
    assert tree.name.startswith("trainrun_") and tree.is_dir(), tree
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert wait_for(lambda: not any(alive(x) for x in workers), 5)
    assert wait_for(lambda: not tree.exists(), 5), sorted(str(x) for x in tree.rglob("*"))


def test_an_exec_failure_leaves_nothing_to_wait_for(tmp_path):
    # The workers' children between fork and exec are copies of trainrun; after one exec fails
    # they are killed, and must be gone before the attempt's sweep looks for leftovers. A race:
    # each run of 16 workers showed it about once in eight before it was fixed.
    script = tmp_path / "no-interpreter"
    script.write_text("#!/nonexistent/interpreter\n")
    script.chmod(0o755)
    for _ in range(40):
        r = run(["--nproc-per-node=16", "--no-python", str(script)], timeout=60)
        assert r.returncode == 127, r.stderr
        assert r.stderr == f"trainrun: {script}: no such file\n", r.stderr


def test_kill_9_of_trainrun_leaves_no_survivors(worker, tmp_path):
    pids = tmp_path / "pids"
    grand = tmp_path / "grand"
    p = start(["--nproc-per-node=3", worker, "pidfile", str(pids), "grandchild", str(grand),
               "ignore-term", "grandchild", str(grand), "plain", "sleep", "60"])
    workers = wait_for_pids(pids, 3)
    grandchildren = wait_for_pids(grand, 6)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    everyone = workers + grandchildren
    assert wait_for(lambda: not any(alive(x) for x in everyone), 1.0), \
        [x for x in everyone if alive(x)]


def _kill_9_leaves_no_escaped_descendant(tmp_path, launch, worker_args):
    """Starts `launch + worker_args` (two workers that each start one escaping child), SIGKILLs
    trainrun, and checks every worker and child is gone within 5 s."""
    pids = tmp_path / "pids"
    grand = tmp_path / "grand"
    p = start(launch + ["pidfile", str(pids), "grandchild", str(grand), *worker_args])
    everyone = wait_for_pids(pids, 2) + wait_for_pids(grand, 2)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    try:
        assert wait_for(lambda: not any(alive(x) for x in everyone), 5.0), \
            [x for x in everyone if alive(x)]
    finally:
        for pid in everyone:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["setsid", "daemon"])
def test_kill_9_of_trainrun_also_stops_descendants_in_their_own_session(worker, tmp_path, mode):
    # setsid: a child that left its worker's process group and session; daemon: a grandchild
    # whose parent exited, so that it was adopted by trainrun (the subreaper), not the worker.
    _kill_9_leaves_no_escaped_descendant(tmp_path, ["--nproc-per-node=2", worker],
                                         [mode, "sleep", "60"])


def test_kill_9_of_trainrun_running_trainrun_leaves_no_survivors(worker, tmp_path):
    # The inner trainrun's watchdog inherits the outer job's marker; the outer watchdog must not
    # kill it, or the inner job's setsid child would be left behind.
    _kill_9_leaves_no_escaped_descendant(
        tmp_path, ["--nproc-per-node=1", "--no-python", TRAINRUN, "--nproc-per-node=2", worker],
        ["setsid", "sleep", "60"])


def test_daemonized_grandchild_is_stopped_when_the_job_ends(worker, tmp_path):
    grand = tmp_path / "grand"
    r = run(["--nproc-per-node=2", "--shutdown-timeout=1", worker, "grandchild", str(grand),
             "daemon", "wait-lines", str(grand), "2", "exit", "0"], timeout=30)
    assert r.returncode == 0, r.stderr
    pids = read_pids(grand)
    assert len(pids) == 2
    for pid in pids:
        assert not alive(pid)


def test_grandchild_ignoring_sigterm_is_stopped_when_the_job_ends(worker, tmp_path):
    grand = tmp_path / "grand"
    r = run(["--nproc-per-node=2", "--shutdown-timeout=1", worker, "grandchild", str(grand),
             "ignore-term", "grandchild", str(grand), "setsid", "exit", "0"], timeout=30)
    assert r.returncode == 0, r.stderr
    for pid in read_pids(grand):
        assert not alive(pid)


def test_grandchildren_stopped_after_failure(worker, tmp_path):
    grand = tmp_path / "grand"
    r = run(["--nproc-per-node=2", "--shutdown-timeout=1", worker, "grandchild", str(grand),
             "ignore-term", "rank-exit", "1", "3", "sleep", "60"], timeout=30)
    assert r.returncode == 3
    for pid in read_pids(grand):
        assert not alive(pid)


def test_workers_inherit_cwd_and_stdin(tmp_path):
    script = tmp_path / "w.sh"
    script.write_text("#!/bin/sh\npwd\nread line\necho \"got $line\"\n")
    script.chmod(0o755)
    r = run([str(script)], input="hello\n", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [str(tmp_path), "got hello"]


# --- Workers and descendants that leave everything behind ----------------------------------

ESCAPE = """
import os, signal, sys, time
mode, pidfile = sys.argv[1:3]
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ["LOCAL_RANK"] == "0":
    try:
        if mode == "launcher-group":
            os.setpgid(0, os.getpgid(os.getppid()))
        else:
            # Into the group of a child of its own (which ignores SIGTERM too).
            r, w = os.pipe()
            child = os.fork()
            if child == 0:
                os.setpgid(0, 0)
                os.write(w, b"x")
                time.sleep(60)
                os._exit(0)
            os.read(r, 1)
            os.setpgid(0, child)
        outcome = "left"
    except PermissionError:  # a session leader cannot change its process group
        outcome = "refused"
    with open(pidfile + ".outcome", "w") as f:
        f.write(outcome)
    with open(pidfile, "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(60)
else:
    while not (os.path.exists(pidfile) and open(pidfile).read().endswith("\\n")):
        time.sleep(0.02)
    sys.exit(5)
"""

# A worker whose child forks a grandchild and exits; the grandchild starts a session of its own
# and execs with an empty environment, ignoring SIGTERM: no process group, parent or job marker
# leads to it, only the job's cgroup.
DOUBLE_FORK = """
import os, sys, time
pidfile = sys.argv[1]
with open(pidfile + ".cgroup", "w") as f:
    f.write(open("/proc/self/cgroup").read())
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid()
        with open(pidfile, "a") as f:
            f.write(f"{os.getpid()}\\n")
        code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
        os.execve(sys.executable, [sys.executable, "-c", code, pidfile], {})
    os._exit(0)
time.sleep(float(sys.argv[2]))
"""


def processes_naming(text):
    """Live processes whose command line holds `text` (a path unique to the test)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if text.encode() not in f.read():
                    continue
        except OSError:
            continue
        if alive(int(entry)):
            found.append(int(entry))
    return found


def no_process_naming(text):
    """Whether every process naming `text` is gone within a few seconds (trainrun's watchdog,
    whose command line is trainrun's, ends just after trainrun)."""
    return wait_for(lambda: processes_naming(text) == [], 10.0)


def kill_processes_naming(text):
    for pid in processes_naming(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("cgroup", ["1", "0"])
@pytest.mark.parametrize("mode", ["launcher-group", "other-group"])
def test_worker_that_tries_to_leave_its_process_group_is_still_stopped(tmp_path, mode, cgroup):
    # Rank 0 tries to move into trainrun's own process group (or its child's) and ignores SIGTERM;
    # rank 1 fails. A worker leads a session of its own, so the kernel refuses the move; the
    # SIGTERM and, after the shutdown timeout, the SIGKILL reach rank 0 and what it started:
    # trainrun must not say "sending SIGKILL" and then wait forever.
    script = tmp_path / "escape.py"
    script.write_text(ESCAPE)
    pids = tmp_path / "pids"
    try:
        r = run(["--nproc-per-node=2", "--shutdown-timeout=1", str(script), mode, str(pids)],
                timeout=60, env={"TRAINRUN_CGROUP": cgroup})
        assert r.returncode == 5, r.stderr
        assert "sending SIGKILL" in r.stderr
        assert (tmp_path / "pids.outcome").read_text() == "refused"
        assert no_process_naming(str(pids))
    finally:
        kill_processes_naming(str(pids))


def cgroup_v2_writable():
    """Whether a cgroup can be made under this process's own cgroup v2, as trainrun does."""
    with open("/proc/self/cgroup") as f:
        own = cgroup_directory(f.read())
    if own is None:
        return False
    probe = os.path.join(own, f"trainrun-test-probe-{os.getpid()}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    os.rmdir(probe)
    return True


@pytest.fixture
def writable_cgroup():
    if not cgroup_v2_writable():
        pytest.skip("no writable cgroup v2 here: trainrun runs its workers without one")


def _cgroup_of_the_job(pids):
    """The job's cgroup directory, as the worker read it: one trainrun made for the job."""
    directory = cgroup_directory((pids.parent / (pids.name + ".cgroup")).read_text())
    assert directory is not None and "/trainrun-" in directory, directory
    return directory


def test_kill_9_of_trainrun_kills_a_descendant_that_left_everything_through_the_cgroup(
        tmp_path, writable_cgroup):
    script = tmp_path / "double_fork.py"
    script.write_text(DOUBLE_FORK)
    pids = tmp_path / "pids"
    try:
        p = start(["--nproc-per-node=2", str(script), str(pids), "60"])
        wait_for_pids(pids, 2, timeout=30)
        directory = _cgroup_of_the_job(pids)
        assert os.path.isdir(directory)
        assert processes_naming(str(pids)) != []
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        assert wait_for(lambda: processes_naming(str(pids)) == [], 10.0), \
            processes_naming(str(pids))
        assert wait_for(lambda: not os.path.exists(directory), 10.0), directory
    finally:
        kill_processes_naming(str(pids))


def test_job_cgroup_is_removed_when_the_job_ends(tmp_path, writable_cgroup):
    script = tmp_path / "double_fork.py"
    script.write_text(DOUBLE_FORK)
    pids = tmp_path / "pids"
    try:
        r = run(["--nproc-per-node=2", "--shutdown-timeout=1", str(script), str(pids), "0"],
                timeout=60)
        assert r.returncode == 0, r.stderr
        directory = _cgroup_of_the_job(pids)
        assert not os.path.exists(directory)
        assert no_process_naming(str(pids))
    finally:
        kill_processes_naming(str(pids))


def test_without_a_cgroup_workers_stay_in_trainruns(tmp_path):
    script = tmp_path / "double_fork.py"
    script.write_text(DOUBLE_FORK)
    pids = tmp_path / "pids"
    try:
        r = run(["--nproc-per-node=1", "--shutdown-timeout=1", str(script), str(pids), "0"],
                timeout=60, env={"TRAINRUN_CGROUP": "0"})
        assert r.returncode == 0, r.stderr
        with open("/proc/self/cgroup") as f:
            ours = f.read()
        assert (pids.parent / "pids.cgroup").read_text() == ours
        assert no_process_naming(str(pids))
    finally:
        kill_processes_naming(str(pids))


def _read_pty(fd, until, timeout=20.0):
    """What the terminal shows, read from its master side until `until` appears (or the timeout,
    or the terminal closes)."""
    import select
    seen = b""
    deadline = time.monotonic() + timeout
    while until not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO: every process holding the terminal has closed it
            break
        if not chunk:
            break
        seen += chunk
    return seen


def test_a_worker_reads_the_terminal_trainrun_was_started_from(tmp_path):
    """input() (and so breakpoint()) in a worker works from a terminal, as under torchrun: the
    worker runs in a session of its own, so a read does not stop it with SIGTTIN."""
    import pty
    script = tmp_path / "ask.py"
    script.write_text("print('answer:', input('question? '), flush=True)\n")
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session whose controlling terminal is the pty, as in a shell
        os.execv(TRAINRUN, [TRAINRUN, "--nproc-per-node=1", "--no-python", "/usr/bin/python3",
                            str(script)])
    try:
        assert b"question? " in _read_pty(fd, b"question? ")
        os.write(fd, b"forty-two\n")
        assert b"answer: forty-two" in _read_pty(fd, b"answer: forty-two")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        if alive(pid):
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)


def test_a_stopped_worker_is_named_once_and_the_job_goes_on_when_continued(tmp_path):
    pids = tmp_path / "pids"
    err = tmp_path / "err"
    script = tmp_path / "stop.py"
    script.write_text(
        "import os, signal, sys\n"
        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')\n"
        "os.kill(os.getpid(), signal.SIGSTOP)\n"
        "print('continued', flush=True)\n")
    p = start(["--nproc-per-node=1", "--no-python", "/usr/bin/python3", str(script)],
              stdout=subprocess.PIPE, stderr=open(err, "w"), text=True)
    try:
        victim = wait_for_pids(pids, 1)[0]
        assert wait_for(lambda: "is stopped by SIGSTOP" in err.read_text(), timeout=20), \
            err.read_text()
        os.kill(victim, signal.SIGCONT)
        out, _ = p.communicate(timeout=30)
        assert p.returncode == 0, err.read_text()
        assert "continued" in out
        text = err.read_text()
        assert text.count("is stopped by SIGSTOP") == 1, text
        assert f"worker 0 (local rank 0, pid {victim}) is stopped by SIGSTOP" in text
        assert f"kill -CONT {victim}" in text
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
