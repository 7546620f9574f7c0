"""A finished script ends (docs/cli.md, "A finished script"): a Python worker of PyTorch 2.x tells
the agent through its diagnosis channel when its script is over; one whose interpreter then does
not exit within --exit-grace is named with its stack and ended, and one whose interpreter crashes
in teardown is named; the job's status is the scripts'. Run with TRAINRUN_PYTHON (torch 2.x) and
TRAINRUN_BIN."""
import json
import os
import re
import subprocess
import textwrap

import pytest

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
PY = os.environ.get("TRAINRUN_PYTHON", "")


def trainrun(tmp_path, script, *options, timeout=300):
    (tmp_path / "job.py").write_text(textwrap.dedent(script))
    summary = tmp_path / "summary.json"
    r = subprocess.run([TRAINRUN, *options, f"--summary-file={summary}", "--nproc-per-node=2",
                        "job.py"], capture_output=True, text=True, cwd=tmp_path, timeout=timeout,
                       env=dict(os.environ, PYTHON_EXEC=PY))
    return r, json.loads(summary.read_text())


def workers(summary):
    return {w["rank"]: w for w in summary["attempts"][-1]["workers"]}


def test_a_worker_that_does_not_exit_after_its_script_is_named_and_ended(tmp_path):
    r, summary = trainrun(tmp_path, """\
        import atexit, os, time
        def wait_at_exit():
            time.sleep(3600)
        if os.environ["RANK"] == "1":
            atexit.register(wait_at_exit)
        print("trained", os.environ["RANK"])
        """, "--exit-grace=3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("trained") == 2
    line = [x for x in r.stderr.splitlines() if "finished its script" in x]
    assert len(line) == 1, r.stderr
    assert line[0].startswith("trainrun: rank 1 finished its script "), line
    assert "s ago and has not exited: it is in wait_at_exit() (job.py:3); ending it" in line[0]
    teardown = workers(summary)[1]["teardown"]
    assert teardown.startswith("rank 1's script returned; the process had not exited 3 s later "
                               "(it was in wait_at_exit() (job.py:3))"), teardown
    assert workers(summary)[1]["exit_code"] == 0 and workers(summary)[0]["teardown"] is None


@pytest.mark.parametrize("exit", ["sys.exit", "exit"])
def test_a_thread_that_is_no_daemon_holds_the_exit_of_a_script_that_exited(tmp_path, exit):
    # Python's main runs the script: its SystemExit is seen by sys.exit and by the site's exit().
    r, summary = trainrun(tmp_path, f"""\
        import os, sys, threading, time
        threading.Thread(target=time.sleep, args=(3600,), name="uploader").start()
        {exit}(3 if os.environ["RANK"] == "0" else 0)
        """, "--exit-grace=2")
    # Rank 0's script asked for 3: ended after the grace, it fails the job as its script would
    # have (rank 1 is stopped with the job, if the grace has not ended it first).
    assert r.returncode == 3, r.stderr
    # The seconds are the grace and however long its stack took: not compared.
    assert re.search(r"^trainrun: rank 0 finished its script \d+ s ago and has not exited: it is "
                     r"in _shutdown\(\) \(threading\.py:\d+\); ending it", r.stderr, re.M), r.stderr
    assert workers(summary)[0]["exit_code"] == 3
    assert workers(summary)[0]["teardown"].startswith(
        "rank 0's script exited with 3; the process had not exited 2 s later")
    # In the failure summary too, under the script's own exit code.
    assert "  exitcode  : 3" in r.stderr and "  teardown  : rank 0's script exited with 3" in \
        r.stderr, r.stderr


def test_an_abort_in_teardown_is_named_and_the_status_is_the_scripts(tmp_path):
    r, summary = trainrun(tmp_path, """\
        import atexit, os
        if os.environ["RANK"] == "1":
            atexit.register(os.abort)
        print("trained", os.environ["RANK"])
        """)
    assert r.returncode == 0, r.stderr
    assert ("trainrun: rank 1's script returned; the interpreter aborted in teardown (SIGABRT)\n"
            in r.stderr), r.stderr
    assert "FAILED" not in r.stderr
    assert workers(summary)[1]["teardown"] == (
        "rank 1's script returned; the interpreter aborted in teardown (SIGABRT)")
    assert workers(summary)[1]["exit_code"] == 0 and workers(summary)[1]["signal"] is None


def test_a_script_that_raised_keeps_its_failure(tmp_path):
    r, summary = trainrun(tmp_path, """\
        import atexit, os
        if os.environ["RANK"] == "1":
            atexit.register(os.abort)
            raise ValueError("bad batch")
        """)
    assert r.returncode == 1, r.stderr
    assert "ValueError: bad batch" in r.stderr
    assert ("  teardown  : rank 1's script raised an exception; the interpreter aborted in "
            "teardown (SIGABRT)\n") in r.stderr, r.stderr
    assert summary["root_cause"]["rank"] == 1 and summary["root_cause"]["exit_code"] == 1


def test_a_script_that_replaced_the_excepthook_and_raised_keeps_its_failure(tmp_path):
    # The script's own hook is the one in place when it raises: the exception is still seen.
    r, summary = trainrun(tmp_path, """\
        import atexit, os, sys
        sys.excepthook = lambda kind, value, tb: print("own hook:", value, file=sys.stderr)
        if os.environ["RANK"] == "1":
            atexit.register(os.abort)
            raise ValueError("bad batch")
        """)
    assert r.returncode == 1, r.stderr
    assert "own hook: bad batch" in r.stderr, r.stderr
    assert ("  teardown  : rank 1's script raised an exception; the interpreter aborted in "
            "teardown (SIGABRT)\n") in r.stderr, r.stderr


def test_a_keyboard_interrupt_is_the_scripts_sigint(tmp_path):
    r, summary = trainrun(tmp_path, """\
        import atexit, os
        if os.environ["RANK"] == "1":
            atexit.register(os.abort)
            raise KeyboardInterrupt
        """)
    assert r.returncode == 130, r.stderr
    assert workers(summary)[1]["signal"] == "SIGINT", workers(summary)[1]
    assert workers(summary)[1]["teardown"] == (
        "rank 1's script raised KeyboardInterrupt; the interpreter aborted in teardown (SIGABRT)")


def test_a_process_the_script_forked_does_not_end_the_script(tmp_path):
    # The child inherits the channel and the bootstrap's hooks; its own end says nothing of the
    # script's, which goes on for longer than the grace.
    r, summary = trainrun(tmp_path, """\
        import os, sys, time
        child = os.fork()
        if child == 0:
            sys.exit(0)
        os.waitpid(child, 0)
        time.sleep(4)
        print("trained", os.environ["RANK"])
        """, "--exit-grace=1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("trained") == 2, r.stdout
    assert "finished its script" not in r.stderr, r.stderr
    assert [w["teardown"] for w in workers(summary).values()] == [None, None]


def test_a_job_that_ends_as_it_should_is_unchanged(tmp_path):
    r, summary = trainrun(tmp_path, """\
        import os, sys
        print("trained", os.environ["RANK"])
        sys.exit(int(os.environ["RANK"]) * 4)
        """)
    assert r.returncode == 4, r.stderr
    assert "finished its script" not in r.stderr and "teardown" not in r.stderr, r.stderr
    assert [w["teardown"] for w in workers(summary).values()] == [None, None]
    assert workers(summary)[1]["exit_code"] == 4


def test_a_stopped_job_is_no_teardown_crash(tmp_path):
    # The agent's own stop of a worker whose script is over is the stop's, as for any worker.
    (tmp_path / "job.py").write_text(textwrap.dedent("""\
        import atexit, os, time
        atexit.register(time.sleep, 3600)
        open(os.environ["RANK"] + ".done", "w").close()
        """))
    p = subprocess.Popen([TRAINRUN, "--nproc-per-node=2", "job.py"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                         env=dict(os.environ, PYTHON_EXEC=PY))
    try:
        import time
        deadline = time.monotonic() + 300
        while not ((tmp_path / "0.done").exists() and (tmp_path / "1.done").exists()):
            assert p.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        p.terminate()
        _, err = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert "teardown" not in err and "finished its script" not in err, err
