"""TorchElastic's file timer under trainrun (TORCHELASTIC_ENABLE_FILE_TIMER=1): requests written
as torch's FileTimerClient writes them, without torch; a scope that expires, requests that are
not for this job. The comparison with torchrun 2.x itself is in tests/python/test_torchrun2.py.
Also the listing of NCCL flight recorder dumps after a failure summary."""
import glob
import os
import signal
import subprocess
import time

import pytest

from conftest import alive, run, start, wait_for

# Acquires scope "stuck" for 2 s, as FileTimerClient.acquire does, then stays in it (rank 1).
EXPIRES = r'''
import json, os, sys, time
def stuck_in_scope():
    time.sleep(600)
rank = int(os.environ["RANK"])
if rank == 1:
    fd = os.open(os.environ["TORCHELASTIC_TIMER_FILE"], os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, (json.dumps({"version": 1, "pid": os.getpid(), "scope_id": "stuck",
                              "expiration_time": time.time() + 2, "signal": 9}) + "\n").encode())
    os.close(fd)
    stuck_in_scope()
print(f"rank {rank} done", flush=True)
'''

# Lines that are not this job's requests, then a scope released in time.
BAD = r'''
import json, os, time
def send(line):
    fd = os.open(os.environ["TORCHELASTIC_TIMER_FILE"], os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, line.encode())
    os.close(fd)
def request(pid, expiration):
    return json.dumps({"version": 1, "pid": pid, "scope_id": "s", "expiration_time": expiration,
                       "signal": 9}) + "\n"
send("this is not json\n")
send('{"pid": "1", "scope_id": "s", "expiration_time": 0, "signal": 9}\n')
send("x" * 5000 + "\n")
send(request(os.getppid(), 0))  # trainrun's own pid: not a worker
send(request(os.getpid(), time.time() + 30))
time.sleep(1)
send(request(os.getpid(), -1))
print("released", flush=True)
'''

# Every rank acquires scope "stuck" to expire at the same moment (argv[1], the wall clock), then
# stays in it.
ALL_EXPIRE = r'''
import json, os, sys, time
fd = os.open(os.environ["TORCHELASTIC_TIMER_FILE"], os.O_WRONLY | os.O_NONBLOCK)
os.write(fd, (json.dumps({"version": 1, "pid": os.getpid(), "scope_id": "stuck",
                          "expiration_time": float(sys.argv[1]), "signal": 9}) + "\n").encode())
os.close(fd)
time.sleep(600)
'''

# A stack tool that hangs: it leaves a file named by its pid in $TOOL_STARTED, then sleeps until
# it is killed.
HANGING_TOOL = """#!/bin/sh
echo > "$TOOL_STARTED/$$"
exec /bin/sleep 600
"""

# Rank 0's scope expires; it ends by itself (exit 0) once the stack tool has started on it. Rank 1
# keeps the job going until the tool's 3 s are over.
ENDS_MEANWHILE = r'''
import json, os, sys, time
started = os.environ["TOOL_STARTED"]
if os.environ["RANK"] == "0":
    fd = os.open(os.environ["TORCHELASTIC_TIMER_FILE"], os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, (json.dumps({"version": 1, "pid": os.getpid(), "scope_id": "stuck",
                              "expiration_time": time.time() + 1, "signal": 9}) + "\n").encode())
    os.close(fd)
while not os.listdir(started):
    time.sleep(0.05)
if os.environ["RANK"] == "1":
    time.sleep(8)
print(f"rank {os.environ['RANK']} done", flush=True)
'''


def test_an_expired_scope_kills_the_worker_after_its_stack_is_written(tmp_path):
    (tmp_path / "expires.py").write_text(EXPIRES)
    logs = tmp_path / "logs"
    r = run(["--standalone", "--nproc-per-node=2", f"--log-dir={logs}", "expires.py"],
            cwd=tmp_path, env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1"}, timeout=120)
    # As torchrun 2.x: the worker is killed with the signal it asked for; its status is the job's.
    assert r.returncode == 137, r.stderr
    assert "rank 0 done" in r.stdout and "rank 1 done" not in r.stdout, r.stdout
    assert "file timer: scope 'stuck' of rank 1 (local rank 1, pid " in r.stderr, r.stderr
    assert "sending SIGKILL, as its request asked" in r.stderr, r.stderr
    dumps = glob.glob(str(logs / "*" / "attempt_0" / "timer_expired" / "rank_1.txt"))
    assert len(dumps) == 1, r.stderr
    assert open(dumps[0]).read().startswith("rank 1 on ")
    assert "Thread " in r.stderr  # its main thread on the terminal
    assert "Root Cause (first observed failure):\n[0]:" in r.stderr, r.stderr
    assert "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 " in r.stderr, r.stderr
    # The FIFO is removed with the job.
    assert not glob.glob(str(tmp_path / "watchdog_timer_*")), os.listdir(tmp_path)


def hanging_tool(tmp_path):
    """A directory holding a py-spy that hangs (HANGING_TOOL), for PATH, and the directory where
    each of its runs leaves its pid."""
    tools, started = tmp_path / "tools", tmp_path / "started"
    tools.mkdir()
    started.mkdir()
    (tools / "py-spy").write_text(HANGING_TOOL)
    (tools / "py-spy").chmod(0o755)
    return tools, started


def test_a_stop_is_not_held_up_by_the_stacks_of_expired_scopes(tmp_path):
    """Eight scopes expire at once while the stack tool hangs: each run of it is bounded to 3 s,
    24 s in all. The stacks are taken off the agent's event loop, so SIGTERM to the launcher
    stops the job at once, and the tools still running are killed with it."""
    nproc = 8
    tools, started = hanging_tool(tmp_path)
    (tmp_path / "all_expire.py").write_text(ALL_EXPIRE)
    err = open(tmp_path / "job.err", "w")
    # Late enough for every rank to have asked before: the scopes expire in one check.
    expiry = time.time() + 10
    job = start(["--standalone", f"--nproc-per-node={nproc}", "all_expire.py", str(expiry)],
                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1", "PATH": str(tools),
                     "TOOL_STARTED": str(started)})
    err.close()
    try:
        deadline = time.monotonic() + 60
        while not os.listdir(started):
            assert job.poll() is None, (tmp_path / "job.err").read_text()
            assert time.monotonic() < deadline, "no stack tool started"
            time.sleep(0.05)
        job.send_signal(signal.SIGTERM)
        try:
            job.wait(timeout=12)
        except subprocess.TimeoutExpired:
            pytest.fail("the launcher did not stop within 12 s of SIGTERM: its event loop waited "
                        "for the stack tools\n" + (tmp_path / "job.err").read_text())
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    # Said whether the stacks came before the end or not.
    said = (tmp_path / "job.err").read_text()
    for rank in range(nproc):
        assert f"file timer: scope 'stuck' of rank {rank} (local rank {rank}, pid " in said, said
    tool_pids = [int(p) for p in os.listdir(started)]
    assert wait_for(lambda: not any(alive(p) for p in tool_pids)), \
        f"stack tools left running: {tool_pids}"


def test_a_worker_that_ended_while_its_stack_was_taken_is_not_signalled(tmp_path):
    tools, started = hanging_tool(tmp_path)
    (tmp_path / "ends.py").write_text(ENDS_MEANWHILE)
    r = run(["--standalone", "--nproc-per-node=2", "ends.py"], cwd=tmp_path, timeout=120,
            env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1", "PATH": str(tools),
                 "TOOL_STARTED": str(started)})
    assert r.returncode == 0, r.stderr
    assert "rank 0 done" in r.stdout and "rank 1 done" in r.stdout, r.stdout
    assert ("file timer: scope 'stuck' of rank 0 (local rank 0, pid " in r.stderr
            and "it ended while its stack was taken: no signal was sent" in r.stderr), r.stderr
    assert "note: py-spy timed out after 3 s" in r.stderr, r.stderr


def test_requests_not_of_this_job_are_said_and_ignored(tmp_path):
    (tmp_path / "bad.py").write_text(BAD)
    r = run(["--standalone", "--nproc-per-node=1", "bad.py"], cwd=tmp_path,
            env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1", "TMPDIR": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "released\n"
    assert "file timer: ignored a line that is not a timer request (not a JSON object)" in r.stderr
    assert "(no positive integer \"pid\")" in r.stderr, r.stderr
    assert "file timer: ignored a request longer than 4096 bytes" in r.stderr, r.stderr
    assert "which is not a worker of this job" in r.stderr, r.stderr
    assert not glob.glob(str(tmp_path / "watchdog_timer_*")), os.listdir(tmp_path)


def test_a_timer_file_that_cannot_be_made_is_one_line(tmp_path):
    path = tmp_path / "missing" / "timer"
    r = run(["--standalone", "/bin/true"], env={"TORCHELASTIC_ENABLE_FILE_TIMER": "1",
                                                "TORCHELASTIC_TIMER_FILE": str(path)})
    assert r.returncode == 1, r.stderr
    assert r.stderr == (f"trainrun: TORCHELASTIC_TIMER_FILE={path}: cannot make the file timer's "
                        "FIFO: No such file or directory; name a path in a writable directory\n")


def test_flight_recorder_dumps_are_listed_after_the_summary(tmp_path):
    # A dump where NCCL's flight recorder would write it under trainrun (no GPU needed).
    script = tmp_path / "dump.py"
    script.write_text("import os, sys\n"
                      "d = os.path.dirname(os.environ['TORCHELASTIC_ERROR_FILE'])\n"
                      "open(os.path.join(d, 'nccl_trace_rank_' + os.environ['RANK']), 'w')\n"
                      "sys.exit(3)\n")
    logs = tmp_path / "logs"
    r = run(["--standalone", f"--log-dir={logs}", "dump.py"], cwd=tmp_path)
    assert r.returncode == 3, r.stderr
    dump = glob.glob(str(logs / "*" / "attempt_0" / "0" / "nccl_trace_rank_0"))
    assert len(dump) == 1
    summary_end = r.stderr.rindex("=" * 10)
    assert f"trainrun: NCCL flight recorder dumps (1): {dump[0]}\n" in r.stderr[summary_end:]
