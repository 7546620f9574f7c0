"""Hostile clients of the workers' c10d store that node rank 0's agent serves: the agent keeps to
its documented bounds (docs/protocol.md, "The workers' c10d store"), says so once on its stderr,
and its workers' job goes on."""
import os
import re
import shutil
import socket
import struct
import subprocess
import time

import pytest

from conftest import TRAINRUN, dynamic, sanitized, torch2_stub, wait_for
from ports import free_port

MiB = 1024 * 1024
# StoreLimits::max_held_bytes: everything the store holds (docs/protocol.md).
HELD_BOUND = 1024 * MiB

# A worker that is a well-behaved client: it says where the store is, waits for the test, then
# sets and gets a key through the store as torch 2.x's client does (VALIDATE, SET, GET).
WORKER = """
import os, socket, struct, sys, time
out, go = sys.argv[1], sys.argv[2]
with open(out + ".tmp", "w") as f:
    f.write(os.environ["MASTER_PORT"] + " " + os.environ["TORCHELASTIC_USE_AGENT_STORE"])
os.rename(out + ".tmp", out)
while not os.path.exists(go):
    time.sleep(0.05)
s = socket.create_connection(("127.0.0.1", int(os.environ["MASTER_PORT"])))
def text(b): return struct.pack("<Q", len(b)) + b
s.sendall(b"\\x00" + struct.pack("<I", 0x3C85F7CE) + b"\\x01" + text(b"k") + text(b"value")
          + b"\\x03" + text(b"k"))
want = struct.pack("<Q", 5) + b"value"
got = b""
while len(got) < len(want):
    got += s.recv(64)
print("store ok" if got == want else "store wrong: %r" % got, flush=True)
"""


def encoded(query, *parts):
    return bytes([query]) + b"".join(struct.pack("<Q", len(p)) + p for p in parts)


HELLO = b"\x00" + struct.pack("<I", 0x3C85F7CE)
SET, GET, MULTI_GET = 1, 3, 10  # MULTI_GET: a u64 count, then the keys


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for pid {pid}")


def closed_by_server(s, timeout):
    """True once the server closed `s` (it reads nothing of what `s` was sent meanwhile)."""
    s.setblocking(False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if s.recv(1, socket.MSG_PEEK) == b"":
                return True
        except BlockingIOError:
            pass
        except ConnectionResetError:
            return True
        time.sleep(0.05)
    return False


class Job:
    """trainrun with one worker (the script above), its store's port, and its stderr."""

    def __init__(self, tmp_path, prefix=()):
        script = tmp_path / "worker.py"
        script.write_text(WORKER)
        # The worker imports no torch, but the agent serves the store only to workers whose
        # interpreter has torch 2.x (docs/cli.md, "Workers"): it finds this one first.
        env = dict(os.environ, PYTHONPATH=torch2_stub(tmp_path))
        self.out, self.go = tmp_path / "port", tmp_path / "go"
        self.err_path = tmp_path / "err"
        self.proc = subprocess.Popen(
            [*prefix, TRAINRUN, "--standalone", "--nproc-per-node=1", str(script),
             str(self.out), str(self.go)],
            stdout=subprocess.PIPE, stderr=open(self.err_path, "w"), text=True, env=env)
        assert wait_for(self.out.exists, 30), self.err()
        port, shared = self.out.read_text().split()
        if shared != "True":
            self.kill()
            pytest.fail("the worker's torch says 2.5.0, yet TORCHELASTIC_USE_AGENT_STORE is "
                        f"{shared!r}: the agent must serve its store")
        self.port = int(port)

    def err(self):
        return self.err_path.read_text()

    def finish(self):
        self.go.write_text("")
        out, _ = self.proc.communicate(timeout=60)
        return self.proc.returncode, out

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def store_lines(err):
    return [line for line in err.splitlines() if "c10d store" in line]


def test_clients_that_do_not_read_neither_grow_the_agent_nor_stop_the_job(tmp_path):
    job = Job(tmp_path)
    try:
        # The agent itself serves the store (the launcher's process, one node).
        base = status_kib(job.proc.pid, "VmRSS")
        big = socket.create_connection(("127.0.0.1", job.port))
        big.sendall(HELLO + encoded(SET, b"big", b"v" * (8 * MiB)))
        # 4.4 KB asking for 400 copies of the 8 MiB value (3.2 GB), never read.
        big.sendall(bytes([MULTI_GET]) + struct.pack("<Q", 400) +
                    b"".join(struct.pack("<Q", 3) + b"big" for _ in range(400)))
        assert closed_by_server(big, 30), job.err()
        # 60 GETs of it, never read: served until 16 MiB wait to be sent, then not read.
        unread = socket.create_connection(("127.0.0.1", job.port))
        unread.sendall(HELLO + encoded(GET, b"big") * 60)
        time.sleep(2)
        grown_mib = (status_kib(job.proc.pid, "VmHWM") - base) / 1024
        assert not closed_by_server(unread, 0.1)
        code, out = job.finish()
    finally:
        job.kill()
    assert code == 0, job.err()
    assert out.splitlines() == ["store ok"]
    # The value, one connection's unsent replies (16 MiB and one more) and the refused reply's
    # count: far below the bound, which the refused reply alone passed.
    # (Under AddressSanitizer RSS is its allocator's: the closed connection and the line say it.)
    assert grown_mib < 96 or sanitized(), f"the agent grew by {grown_mib:.0f} MiB"
    lines = store_lines(job.err())
    assert len(lines) == 1, job.err()
    assert lines[0].startswith("trainrun: c10d store: closed the connection from 127.0.0.1:")
    assert f"more than its bound of {HELD_BOUND} bytes" in lines[0]


def test_a_store_out_of_descriptors_waits_for_them_and_says_so_once(tmp_path):
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    job = Job(tmp_path, prefix=(prlimit, "--nofile=1024:1024"))
    clients = []
    try:
        for _ in range(1500):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", job.port))
            clients.append(s)
        assert wait_for(lambda: "cannot accept a connection" in job.err(), 30), job.err()
        # Out of descriptors for a while: one line, however many accepts failed.
        time.sleep(1)
        for s in clients:
            s.close()
        code, out = job.finish()
    finally:
        for s in clients:
            s.close()
        job.kill()
    assert code == 0, job.err()
    assert out.splitlines() == ["store ok"]
    lines = store_lines(job.err())
    assert len(lines) == 1, job.err()
    assert lines[0].startswith("trainrun: c10d store: cannot accept a connection: Too many open "
                               "files (the agent has its limit of 1024 open files")



def test_a_descriptor_limit_that_cannot_hold_the_ranks_is_said_at_start(tmp_path):
    prlimit = shutil.which("prlimit")
    if prlimit is None:
        pytest.skip("prlimit (util-linux) is not installed")
    # 60 descriptors: enough for the agent and its one worker, not for what it keeps besides.
    job = Job(tmp_path, prefix=(prlimit, "--nofile=60:60"))
    try:
        code, out = job.finish()
    finally:
        job.kill()
    assert code == 0, job.err()
    assert out.splitlines() == ["store ok"]
    lines = [line for line in job.err().splitlines() if "RLIMIT_NOFILE" in line]
    assert lines == ["trainrun: the job's c10d store holds a connection from each of its 1 ranks, "
                     "and this agent may open 60 files (RLIMIT_NOFILE, hard limit 60): ranks past "
                     "that wait to connect until others close; `ulimit -n 73` before trainrun (as "
                     "root, or LimitNOFILE= for a service) gives it room"], job.err()


def somaxconn_lines(tmp_path, somaxconn):
    """trainrun --standalone with two ranks whose agent serves the store, in a network namespace
    of its own whose net.core.somaxconn is `somaxconn`: its lines that name somaxconn."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (a network namespace of the test's own)")
    script = tmp_path / "worker.py"
    script.write_text("import os\nassert os.environ['TORCHELASTIC_USE_AGENT_STORE'] == 'True'\n")
    env = dict(os.environ, PYTHONPATH=torch2_stub(tmp_path))
    inside = (f"ip link set lo up && echo {somaxconn} > /proc/sys/net/core/somaxconn && "
              'exec "$@"')
    r = subprocess.run(["unshare", "--net", "sh", "-c", inside, "sh", TRAINRUN, "--standalone",
                        "--nproc-per-node=2", str(script)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return [line for line in r.stderr.splitlines() if "somaxconn" in line]


def test_an_accept_queue_shorter_than_the_ranks_is_said_at_start(tmp_path):
    assert somaxconn_lines(tmp_path, 1) == [
        "trainrun: the job's c10d store takes a connection from each of its 2 ranks, all at once "
        "at each start, and this node's accept queue holds 1 (net.core.somaxconn): connects past "
        "it are dropped and tried again about 1 s later; `sysctl -w net.core.somaxconn=2` on "
        "this node avoids it"]
    assert somaxconn_lines(tmp_path, 2) == []


# Node 1's worker: each of the store's replies timed on its own clock, the connect included.
TIMED_CLIENT = """
import os, socket, struct, time
def text(b): return struct.pack("<Q", len(b)) + b
def read(s, n):
    got = b""
    while len(got) < n:
        chunk = s.recv(n - len(got))
        assert chunk, "the store closed the connection"
        got += chunk
    return got
# Where a test says so, the client asks while its store's agent is busy with something else.
time.sleep(float(os.environ.get("STORE_CLIENT_AFTER", "0")))
t0 = time.monotonic()
s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
t1 = time.monotonic()
s.sendall(b"\\x00" + struct.pack("<I", 0x3C85F7CE) + b"\\x01" + text(b"k") + text(b"value"))
s.sendall(b"\\x03" + text(b"k"))
value = read(s, 13)
t2 = time.monotonic()
assert value == struct.pack("<Q", 5) + b"value", value
print("store replies: connect %.3f s, set and get %.3f s" % (t1 - t0, t2 - t1), flush=True)
"""


def test_the_store_answers_while_its_agent_starts_a_slow_preload_template(agents, tmp_path):
    # Node 0 serves the job's store and preloads a module that imports for 8 s; meanwhile node
    # 1's worker connects, sets and gets a key: the store's loop does not wait for the import.
    client = tmp_path / "client.py"
    client.write_text(TIMED_CLIENT)
    modules = torch2_stub(tmp_path)
    (tmp_path / "stub" / "slow_import.py").write_text("import time\ntime.sleep(8)\n")
    env = {"PYTHONPATH": modules}
    port = free_port()
    node0 = agents("node0", dynamic(port, 2, 1, "--node-rank=0", "--preload=slow_import") +
                   [str(client)], env=env)
    # Node 0 hosts the rendezvous, and so is node rank 0 (the store's) before node 1 starts.
    assert wait_for(lambda: "hosting the rendezvous" in node0.err, 30), node0.err
    node1 = agents("node1", dynamic(port, 2, 1, "--node-rank=1") + [str(client)], env=env)
    assert node1.wait(120) == 0, node1.err
    assert node0.wait(120) == 0, node0.err
    times = re.search(r"connect ([0-9.]+) s, set and get ([0-9.]+) s", node1.out)
    assert times, node1.out + node1.err
    # Far below the template's 8 s, which the store once waited for.
    assert float(times.group(1)) < 0.5 and float(times.group(2)) < 0.5, node1.out
    assert "store replies" in node0.out, node0.out


# A helper that ptrace-seizes `pid` (from a session of its own, out of reach of a kill of the
# process group it came from), tells `ready` (a pipe's write end) and holds it for `seconds`:
# while it does, the end of `pid` goes to it, not to trainrun, which could reap `pid` only then.
# The one way to make a SIGKILLed process slow to reap: a loop that waited for it would wait.
TRACER = """
import ctypes, os, time
def hold(pid, ready, seconds):
    if os.fork() != 0:
        return
    os.setsid()
    # Nothing of its parent's held open (the template's socket to the agent, say) but `ready`.
    os.closerange(3, ready)
    os.closerange(ready + 1, 1 << 16)
    libc = ctypes.CDLL(None, use_errno=True)
    seized = libc.ptrace(0x4206, pid, 0, 0) == 0  # PTRACE_SEIZE
    os.write(ready, b"1" if seized else b"0")
    time.sleep(seconds)
    os._exit(0)
"""


def ptrace_allowed():
    """Whether a process may ptrace-seize a process of the same user here (Yama, seccomp)."""
    probe = subprocess.run(["python3", "-c", TRACER + """
import os, sys, time
child = os.fork()
if child == 0:
    time.sleep(5)
    os._exit(0)
r, w = os.pipe()
hold(child, w, 0)
ok = os.read(r, 1) == b"1"
os.kill(child, 9)
sys.exit(0 if ok else 1)
"""], capture_output=True, timeout=30, check=False)
    return probe.returncode == 0


def store_waits_measured(agents, tmp_path, node0_args, after):
    """A two-node job whose node 0 agent serves the store while it is busy with `node0_args`'s
    --preload; node 1's worker sets and gets a key `after` seconds in. Returns both agents once
    ended and node 1's connect and set-and-get seconds."""
    client = tmp_path / "client.py"
    client.write_text(TIMED_CLIENT)
    modules = torch2_stub(tmp_path)
    port = free_port()
    node0 = agents("node0", dynamic(port, 2, 1, "--node-rank=0", *node0_args) +
                   [str(client)], env={"PYTHONPATH": modules})
    # Node 0 hosts the rendezvous, and so is node rank 0 (the store's) before node 1 starts.
    assert wait_for(lambda: "hosting the rendezvous" in node0.err, 30), node0.err
    node1 = agents("node1", dynamic(port, 2, 1, "--node-rank=1") + [str(client)],
                   env={"PYTHONPATH": modules, "STORE_CLIENT_AFTER": str(after)})
    node1.wait(120)
    node0.wait(120)
    times = re.search(r"connect ([0-9.]+) s, set and get ([0-9.]+) s", node1.out)
    assert times, node1.out + node1.err + node0.err
    return node0, node1, float(times.group(1)), float(times.group(2))


def test_the_store_answers_while_its_agent_waits_for_the_templates_reply(agents, tmp_path):
    # Node 0's template takes 6 s to fork each worker (an at-fork hook of the preloaded module
    # sleeps in it): the reply that names the worker's pid is an event, so the store's loop goes
    # on meanwhile and node 1's worker, asking 1.5 s in, is answered at once.
    (tmp_path / "stub").mkdir(exist_ok=True)
    (tmp_path / "stub" / "slow_fork.py").write_text(
        "import os, time\nTEMPLATE = os.getpid()\n"
        "os.register_at_fork(after_in_parent=lambda: os.getpid() == TEMPLATE and time.sleep(6))\n")
    node0, node1, connect, set_get = store_waits_measured(agents, tmp_path,
                                                          ["--preload=slow_fork"], 1.5)
    assert node0.proc.returncode == 0 and node1.proc.returncode == 0, node0.err + node1.err
    # Far below the 4.5 s it once waited for the reply (the 6 s fork, less 1.5 s).
    assert connect < 0.5 and set_get < 0.5, node1.out
    # Node 0's worker was forked from the template, not started the ordinary way.
    assert "ordinary way" not in node0.err and "store replies" in node0.out, node0.err


def test_the_store_answers_while_its_agent_reaps_the_template_it_killed(agents, tmp_path):
    # Node 0's template ends 3 s into its imports, traced by a helper that holds its end until
    # 8 s: the template is killed and handed to the reaper, not waited for, while the store is
    # served (node 1's worker asks 4.5 s in, once it runs: a loop that waited would not even have
    # given node 1 its assignment before).
    if not ptrace_allowed():
        pytest.skip("ptrace is not allowed here")
    (tmp_path / "stub").mkdir(exist_ok=True)
    (tmp_path / "stub" / "traced_end.py").write_text(TRACER + """
r, w = os.pipe()
hold(os.getpid(), w, 8)
os.read(r, 1)
time.sleep(3)
os._exit(5)
""")
    node0, node1, connect, set_get = store_waits_measured(agents, tmp_path,
                                                          ["--preload=traced_end"], 4.5)
    assert node0.proc.returncode == 0 and node1.proc.returncode == 0, node0.err + node1.err
    assert connect < 0.5 and set_get < 0.5, node1.out
    # Reaped once the tracer let go: its status is said, and node 0's worker then started.
    assert ("the template interpreter exited with code 5 before its imports were done"
            in node0.err), node0.err
    assert "store replies" in node0.out, node0.out


def test_the_store_answers_while_its_agent_reaps_the_workers_of_a_failed_start(agents, tmp_path):
    # Node 0's template forks local rank 0, whose script has a helper trace it, then ends while
    # asked for local rank 1: the start fails, and local rank 0 is killed and handed to the
    # reaper (its end held by the tracer for 6 s), not waited for, while the store is served.
    if not ptrace_allowed():
        pytest.skip("ptrace is not allowed here")
    traced = tmp_path / "traced"
    (tmp_path / "stub").mkdir(exist_ok=True)
    (tmp_path / "stub" / "lost_template.py").write_text(f"""
import os, time
TEMPLATE = os.getpid()
forks = []
def before():
    if os.getpid() != TEMPLATE:
        return
    forks.append(1)
    if len(forks) == 2:
        # Local rank 1's request: once local rank 0 is traced, the template ends.
        while not os.path.exists({str(traced)!r}):
            time.sleep(0.01)
        os._exit(9)
os.register_at_fork(before=before)
""")
    # The same script on both nodes (the preflight checks it): node 0's local rank 0 tells its
    # pid and waits to be traced, the others are clients of the store.
    pid_file = tmp_path / "rank0.pid"
    script = tmp_path / "job.py"
    script.write_text(f"""
import os, time
if os.environ.get("TRACED_RANK_0") and os.environ["LOCAL_RANK"] == "0":
    open({str(pid_file)!r} + ".tmp", "w").write(str(os.getpid()))
    os.rename({str(pid_file)!r} + ".tmp", {str(pid_file)!r})
    time.sleep(60)
""" + TIMED_CLIENT)
    modules = torch2_stub(tmp_path)
    port = free_port()
    node0 = agents("node0", dynamic(port, 2, 2, "--node-rank=0", "--preload=lost_template") +
                   [str(script)], env={"PYTHONPATH": modules, "TRACED_RANK_0": "1"})
    assert wait_for(lambda: "hosting the rendezvous" in node0.err, 30), node0.err
    node1 = agents("node1", dynamic(port, 2, 2, "--node-rank=1") + [str(script)],
                   env={"PYTHONPATH": modules, "STORE_CLIENT_AFTER": "1.5"})
    # The tracer is this test's, outside the job's cgroup, which the failed start kills whole.
    assert wait_for(pid_file.exists, 60), node0.err
    seized = subprocess.run(["python3", "-c", TRACER + """
import sys
r, w = os.pipe()
hold(int(sys.argv[1]), w, 6)
sys.exit(0 if os.read(r, 1) == b"1" else 1)
""", pid_file.read_text()], timeout=30, check=False)
    assert seized.returncode == 0
    traced.touch()
    node0.wait(120)
    node1.wait(120)
    assert node0.proc.returncode != 0, node0.err
    assert "the template interpreter ended while starting local rank 1" in node0.err, node0.err
    found = re.findall(r"connect ([0-9.]+) s, set and get ([0-9.]+) s", node1.out)
    assert found, node1.out + node1.err + node0.err
    for connect, set_get in found:
        assert float(connect) < 0.5 and float(set_get) < 0.5, node1.out
