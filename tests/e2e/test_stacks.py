"""`trainrun --stacks`: the stacks of a running job's workers, grouped, without stopping it."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import PY_SPY, TRAINRUN, run
from ports import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "stacks_job.py")
PY = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")


def job_env(tmp_path):
    """Each test its own runtime directory; py-spy on the agents' PATH."""
    env = {"TRAINRUN_RUNTIME_DIR": str(tmp_path / "rt")}
    if PY_SPY:
        env["PATH"] = os.path.dirname(PY_SPY) + os.pathsep + os.environ.get("PATH", "")
    return env


def start_job(tmp_path, name, nproc, *extra, env=None):
    release, ready = tmp_path / f"{name}.release", tmp_path / f"{name}.ready"
    ready.mkdir()
    out = open(tmp_path / f"{name}.out", "w")
    err = open(tmp_path / f"{name}.err", "w")
    proc = subprocess.Popen(
        [TRAINRUN, f"--nproc-per-node={nproc}", *extra, JOB, str(release), str(ready)],
        env=dict(os.environ, PYTHON_EXEC=PY, **(env or {})), stdout=out, stderr=err)
    return proc, release, ready


def wait_ready(ready, n, procs=()):
    deadline = time.monotonic() + 120
    while len(os.listdir(ready)) < n:
        for p in procs:
            assert p.poll() is None, f"the job ended early with {p.returncode}"
        assert time.monotonic() < deadline, f"only {os.listdir(ready)} of {n} ranks in place"
        time.sleep(0.1)


@pytest.mark.skipif(not PY_SPY, reason="py-spy is not installed (scripts/setup.sh --tests)")
def test_roll_call_of_a_local_job_leaves_it_running_to_its_end(tmp_path):
    env = job_env(tmp_path)
    logs = tmp_path / "logs"
    job, release, ready = start_job(tmp_path, "job", 3, "--standalone", f"--log-dir={logs}",
                                    env=env)
    try:
        wait_ready(ready, 3, [job])
        r = run(["--stacks"], env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        out = r.stdout
        assert re.search(r"^rank 1 \(1\): stuck_here <- <module>$", out, re.M), out
        assert re.search(r"^ranks 0,2 \(2\): wait_for_others <- <module>$", out, re.M), out
        # The odd rank, named with its host and its frame; the smaller group first.
        assert out.index("rank 1 (1)") < out.index("ranks 0,2 (2)"), out
        host = socket.gethostname()
        # The waiting ranks' place has its line too, as their dumps show it.
        assert re.search(rf"^rank 1 on {re.escape(host)} is in stuck_here\(\) \(stacks_job\.py:\d+\)"
                         r" while ranks 0,2 wait in wait_for_others \(stacks_job\.py:\d+\)$",
                         out, re.M), out
        # A job without a rendezvous is named by its entrypoint and its agent.
        assert re.search(rf"^stacks of stacks_job\.py \(trainrun pid {job.pid}\): 3 ranks on 1 "
                         r"node$", out, re.M), out
        dumps = re.search(r"^dumps of .*: (.*)$", out, re.M).group(1)
        assert dumps.startswith(str(logs)) and "/stacks/" in dumps, out
        assert sorted(os.listdir(dumps)) == ["rank_0.txt", "rank_1.txt", "rank_2.txt"]
        assert "stuck_here" in open(os.path.join(dumps, "rank_1.txt")).read()
    finally:
        release.touch()
        code = job.wait(timeout=120)
    # The workers carry on: the job ends as it would have, with all its output.
    assert code == 0, (tmp_path / "job.err").read_text()
    out = (tmp_path / "job.out").read_text()
    for rank in range(3):
        assert f"done rank {rank}" in out
    assert os.listdir(tmp_path / "rt") == [], "the job's registration is removed at its end"


def test_stacks_errors_say_which_job_and_why(tmp_path):
    env = job_env(tmp_path)
    r = run(["--stacks"], env=env)
    assert r.returncode == 1 and "no trainrun job of this user is running" in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1
    r = run(["--stacks", "one", "two"], env=env)
    assert r.returncode == 2 and "--stacks takes one run id or PID" in r.stderr, r.stderr
    # A runtime directory that others may write is not read, and the line says so.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    r = run(["--stacks"], env={"TRAINRUN_RUNTIME_DIR": str(shared)})
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r.stderr
    assert re.search(r"^trainrun: (error: )?no trainrun job of this user is running on this "
                     rf"machine \(none is registered in {shared}, which is not a private "
                     r"directory of user \S+ and was not read\)$", r.stderr), r.stderr

    a, a_release, a_ready = start_job(tmp_path, "a", 1, "--standalone", env=env)
    b, b_release, b_ready = start_job(tmp_path, "b", 1, "--standalone", env=env)
    stranger = subprocess.Popen(["sleep", "60"])
    ended = subprocess.Popen(["true"])
    ended.wait()
    try:
        wait_ready(a_ready, 1, [a])
        wait_ready(b_ready, 1, [b])
        # An agent killed with SIGKILL leaves its files: they are ignored and removed.
        (tmp_path / "rt" / f"{ended.pid}.json").write_text(json.dumps(
            {"pid": ended.pid, "run_id": "gone", "node_rank": 0, "host": "h", "log_dir": "/x",
             "socket": str(tmp_path / "rt" / f"{ended.pid}.sock")}))
        cases = [
            # Each job named as its user knows it: command, directory, start time.
            ([], rf"2 trainrun jobs are running on this machine: name one with --stacks=RUN_ID or "
                 rf"--stacks=PID \(run \S+ \(pid {min(a.pid, b.pid)}: {re.escape(JOB[:30])}[^,]* "
                 rf"in {re.escape(os.getcwd())}, started \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d\), "
                 rf"run \S+ \(pid {max(a.pid, b.pid)}: .* started [-\d: ]+\)\)"),
            (["--stacks=nosuch"], r"no trainrun job with run id nosuch is running on this machine"),
            ([f"--stacks={ended.pid}"], rf"no process {ended.pid} is running: the job has ended"),
            ([f"--stacks={stranger.pid}"],
             rf"process {stranger.pid} is not a trainrun agent nor one of its workers"),
        ]
        for args, expected in cases:
            r = run(args or ["--stacks"], env=env)
            assert r.returncode == 1, (args, r.stderr)
            assert len(r.stderr.splitlines()) == 1, (args, r.stderr)
            assert re.search(r"^trainrun: (error: )?" + expected, r.stderr), (args, r.stderr)
        assert not (tmp_path / "rt" / f"{ended.pid}.json").exists()
        # Another user's job: its PID is known, its registration is not theirs to read.
        if os.geteuid() == 0 and shutil.which("setpriv"):
            r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                                TRAINRUN, f"--stacks={a.pid}"], capture_output=True, text=True,
                               timeout=60, env=dict(os.environ, **env))
            assert r.returncode == 1, r.stderr
            assert re.search(rf"^trainrun: (error: )?process {a.pid} belongs to user root: run "
                             r"trainrun --stacks as that user$", r.stderr, re.M), r.stderr
    finally:
        a_release.touch(), b_release.touch()
        stranger.kill()
        stranger.wait()
        codes = a.wait(timeout=120), b.wait(timeout=120)
    assert codes == (0, 0)


@pytest.mark.skipif(not PY_SPY, reason="py-spy is not installed (scripts/setup.sh --tests)")
def test_roll_call_of_a_two_node_job_asks_the_other_node(agents, tmp_path):
    """Two agents (static ranks, node 0 hosts the rendezvous), two ranks each; rank 3, on node 1,
    is the odd one. Asked on either node, one report holds the four ranks."""
    env = dict(job_env(tmp_path), STUCK_RANK="3", PYTHON_EXEC=PY)
    release, ready = tmp_path / "release", tmp_path / "ready"
    ready.mkdir()
    common = ["--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=static",
              f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-id=stacks2",
              f"--log-dir={tmp_path / 'logs'}"]
    job = [JOB, str(release), str(ready)]
    first = agents("first", common + ["--node-rank=0"] + job, env=env)
    second = agents("second", common + ["--node-rank=1"] + job, env=env)
    try:
        wait_ready(ready, 4, [first.proc, second.proc])
        # Asked on the host (which asks the other), then on the other node (the host answers).
        for agent in (first, second):
            r = run([f"--stacks={agent.proc.pid}"], env=env, timeout=120)
            assert r.returncode == 0, r.stderr
            out = r.stdout
            assert re.search(r"^stacks of run stacks2: 4 ranks on 2 nodes$", out, re.M), out
            assert re.search(r"^rank 3 \(1\): stuck_here <- <module>$", out, re.M), out
            assert re.search(r"^ranks 0-2 \(3\): wait_for_others <- <module>$", out, re.M), out
            host = socket.gethostname()
            assert re.search(rf"^rank 3 on {re.escape(host)} \(node 1\) is in stuck_here\(\) "
                             r"\(stacks_job\.py:\d+\) while ranks 0-2 wait in wait_for_others",
                             out, re.M), out
            for node in (0, 1):
                assert re.search(rf"^dumps of {re.escape(host)} \(node {node}\): ", out, re.M), out
            assert "did not answer" not in out and "only this one" not in out, out
    finally:
        release.touch()
        codes = first.wait(timeout=120), second.wait(timeout=120)
    assert codes == (0, 0), first.err + second.err


def start_worker_job(tmp_path, worker, name, *actions, env):
    """One test_worker rank running ACTIONS under a standalone trainrun; its output in
    tmp_path/NAME.out and .err."""
    out = open(tmp_path / f"{name}.out", "w")
    err = open(tmp_path / f"{name}.err", "w")
    return subprocess.Popen([TRAINRUN, "--standalone", "--nproc-per-node=1", worker, *actions],
                            env=dict(os.environ, **env), stdout=out, stderr=err)


def wait_pid(path, job):
    """The pid the worker wrote to PATH (its `pidfile` action), waiting for it (bounded)."""
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text().endswith("\n")):
        assert job.poll() is None, f"the job ended early with {job.returncode}"
        assert time.monotonic() < deadline, "the worker did not start"
        time.sleep(0.05)
    return int(path.read_text().split()[0])


def ask_socket(path, request):
    """Sends REQUEST on the roll call's socket, then the end of the request; the bytes the agent
    answered before it closed the connection (a reset when it closed with bytes of the request
    unread)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(60)
        s.connect(str(path))
        s.sendall(request)
        s.shutdown(socket.SHUT_WR)
        reply = b""
        try:
            while chunk := s.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    return reply


def test_a_bad_stack_tool_timeout_is_said_at_the_start_and_the_job_runs(tmp_path, worker):
    env = dict(job_env(tmp_path), TRAINRUN_STACK_TOOL_TIMEOUT="ten")
    job = start_worker_job(tmp_path, worker, "job", "exit", "0", env=env)
    assert job.wait(timeout=120) == 0, (tmp_path / "job.err").read_text()
    err = (tmp_path / "job.err").read_text()
    assert re.search(r"^trainrun: (warning: )?trainrun --stacks cannot reach this job: "
                     r"TRAINRUN_STACK_TOOL_TIMEOUT=ten: not a number of seconds from 0\.1 to 600",
                     err, re.M), err


def test_a_request_that_is_not_utf8_gets_a_line_and_the_job_goes_on(tmp_path, worker):
    env = job_env(tmp_path)
    release = tmp_path / "release"
    job = start_worker_job(tmp_path, worker, "job", "pidfile", str(tmp_path / "pid"),
                           "wait-lines", str(release), "1", env=env)
    try:
        wait_pid(tmp_path / "pid", job)
        sock = tmp_path / "rt" / f"{job.pid}.sock"
        cases = [
            (b"\xff\n", "unknown request: \ufffd"),
            # The connection's end, not a newline, ends this one.
            (b"\xff", "unknown request: \ufffd"),
            (b"\xc3(\x1b[2J\n", "unknown request: \ufffd(\\x1b[2J"),
            (b"x" * 300, "a request is one line of at most 256 bytes"),
        ]
        for request, error in cases:
            reply = ask_socket(sock, request)
            assert reply.endswith(b"\n") and reply.count(b"\n") == 1, (request, reply)
            assert json.loads(reply) == {"error": error}, (request, reply)
        r = run(["--stacks"], env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert re.search(r"^stacks of test_worker \(trainrun pid \d+\): 1 rank on 1 node$",
                         r.stdout, re.M), r.stdout
    finally:
        release.write_text("go\n")
        code = job.wait(timeout=120)
    assert code == 0, (tmp_path / "job.err").read_text()


def test_a_thread_name_cut_inside_a_character_is_reported(tmp_path, worker):
    """Linux keeps 15 bytes of a thread's name: eight 'é' (16 bytes) lose half of the last one."""
    env = job_env(tmp_path)
    release = tmp_path / "release"
    name = "é" * 8
    job = start_worker_job(tmp_path, worker, "job", "thread-name", name, "pidfile",
                           str(tmp_path / "pid"), "wait-lines", str(release), "1", env=env)
    try:
        pid = wait_pid(tmp_path / "pid", job)
        names = [open(f"/proc/{pid}/task/{tid}/comm", "rb").read().rstrip(b"\n")
                 for tid in os.listdir(f"/proc/{pid}/task")]
        cut = name.encode()[:15]
        assert cut in names, names
        r = run(["--stacks"], env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        assert re.search(r"^stacks of test_worker \(trainrun pid \d+\): 1 rank on 1 node$",
                         r.stdout, re.M), r.stdout
        # The dump keeps the name's bytes as the kernel has them.
        dumps = re.search(r"^dumps of .*: (.*)$", r.stdout, re.M).group(1)
        assert cut in open(os.path.join(dumps, "rank_0.txt"), "rb").read()
    finally:
        release.write_text("go\n")
        code = job.wait(timeout=120)
    assert code == 0, (tmp_path / "job.err").read_text()


def process_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.mark.parametrize("tool", ["eu-stack", "gdb"])
def test_a_worker_in_uninterruptible_sleep_is_not_left_stopped(tmp_path, worker, tool):
    """A vfork parent waits in state D until its child ends: the tool's attach cannot stop it and
    the tool times out; the SIGSTOP of the attach stays pending, and must not stop the worker
    when the D state ends."""
    program = shutil.which(tool)
    if not program:
        pytest.skip(f"{tool} is not installed")
    tools = tmp_path / "tools"
    tools.mkdir()
    os.symlink(program, tools / tool)
    env = dict(job_env(tmp_path), PATH=str(tools), TRAINRUN_STACK_TOOL_TIMEOUT="1")
    job = start_worker_job(tmp_path, worker, "job", "pidfile", str(tmp_path / "pid"),
                           "vfork-sleep", "6", "stderr", "worker ran on", env=env)
    try:
        pid = wait_pid(tmp_path / "pid", job)
        deadline = time.monotonic() + 30
        while process_state(pid) != "D":
            assert time.monotonic() < deadline, f"the worker is in {process_state(pid)}, not D"
            time.sleep(0.02)
        r = run(["--stacks"], env=env, timeout=120)
        assert r.returncode == 0, r.stderr
        # Else the D state ended before the tool attached, and this test proved nothing.
        assert f"note: {tool} timed out after 1 s" in r.stdout, r.stdout
        try:
            code = job.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the job did not end: the worker is in state {process_state(pid)}")
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert code == 0, (tmp_path / "job.err").read_text()
    assert "worker ran on" in (tmp_path / "job.err").read_text()
    assert f"process {pid} (state D) could hold the stop of a tool" in r.stdout, r.stdout


YAMA = "/proc/sys/kernel/yama/ptrace_scope"


@pytest.mark.skipif(not PY_SPY, reason="py-spy is not installed (scripts/setup.sh --tests)")
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists(YAMA) or not os.access(YAMA, os.W_OK),
                    reason="needs root and a kernel with Yama whose ptrace_scope the test may set")
def test_a_user_who_is_not_root_gets_py_spy_stacks_under_ptrace_scope_1(tmp_path):
    # Ubuntu's default: only an ancestor may ptrace. The stack tools are the agent's children,
    # not the workers' ancestors: each worker names its agent its ptracer (PR_SET_PTRACER).
    user = "nobody"
    tmp_path.chmod(0o777)
    spy = tmp_path / "py-spy"
    shutil.copy(PY_SPY, spy)
    spy.chmod(0o755)
    before = open(YAMA).read().strip()
    with open(YAMA, "w") as f:
        f.write("1")
    env = dict(os.environ, TRAINRUN_RUNTIME_DIR=str(tmp_path / "rt"), PYTHON_EXEC=PY,
               PATH=f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    release, ready = tmp_path / "job.release", tmp_path / "job.ready"
    ready.mkdir()
    ready.chmod(0o777)
    as_user = ["runuser", "-u", user, "--"]
    job = subprocess.Popen([*as_user, TRAINRUN, "--nproc-per-node=2", JOB, str(release),
                            str(ready)], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        wait_ready(ready, 2, [job])
        r = subprocess.run([*as_user, TRAINRUN, "--stacks"], env=env, capture_output=True,
                           text=True, timeout=120, cwd=tmp_path)
    finally:
        release.touch()
        job.wait(timeout=120)
        with open(YAMA, "w") as f:
            f.write(before)
    assert r.returncode == 0, r.stderr
    assert re.search(r"^rank 1 \(1\): stuck_here <- <module>$", r.stdout, re.M), r.stdout
    assert "Permission Denied" not in r.stdout and "permission denied" not in r.stdout, r.stdout
