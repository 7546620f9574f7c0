"""Shared helpers for the end-to-end tests: they run the real trainrun binary."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from agents import Agents, ip_binary  # noqa: E402

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
# py-spy for the stack tests: CMake passes TRAINRUN_PY_SPY-NOTFOUND where it found none, so
# only an executable counts; "" where there is none.
PY_SPY = next((p for p in (os.environ.get("TRAINRUN_PY_SPY", ""), shutil.which("py-spy") or "")
               if p and os.access(p, os.X_OK)), "")
WORKER = os.environ.get("TEST_WORKER_BIN", "")


def pytest_configure(config):
    if not TRAINRUN or not os.access(TRAINRUN, os.X_OK):
        raise pytest.UsageError("set TRAINRUN_BIN to the built trainrun binary (ctest does)")


def run(args, timeout=60, env=None, **kw):
    """Runs trainrun with `args`; returns the CompletedProcess (text output)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([TRAINRUN] + list(args), capture_output=True, text=True,
                          timeout=timeout, env=full_env, **kw)


def start(args, env=None, **kw):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.Popen([TRAINRUN] + list(args), env=full_env, **kw)


def dynamic(endpoint, nnodes, nproc, *extra, run_id="job"):
    """The options of one agent of a job with the c10d rendezvous at `endpoint` (a port on
    127.0.0.1, or "HOST:PORT"), followed by `extra`."""
    if not isinstance(endpoint, str):
        endpoint = f"127.0.0.1:{endpoint}"
    return [f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}", *extra]


def torch2_stub(directory):
    """A `torch` that says it is 2.x, so that the agent serves the job's store (docs/cli.md,
    "Workers") to workers that import nothing; the directory to put on PYTHONPATH."""
    stub = directory / "stub" / "torch"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "__init__.py").write_text("")
    (stub / "version.py").write_text("__version__ = '2.5.0'\n")
    return str(stub.parent)


def sanitized():
    """Whether the trainrun under test is built with AddressSanitizer (its memory use is then the
    sanitizer's, not the code's)."""
    with open(TRAINRUN, "rb") as f:
        return b"__asan_init" in f.read()


def cgroup_directory(proc_cgroup_text):
    """The directory of the cgroup v2 named by the "0::" line of a /proc/PID/cgroup text."""
    own = next(line[3:] for line in proc_cgroup_text.splitlines() if line.startswith("0::"))
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields, _, kind = line.partition(" - ")
            if kind.startswith("cgroup2 "):
                root, mount_point = fields.split()[3:5]
                return mount_point + (own if root == "/" else own[len(root):])
    return None


def alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def read_pids(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [int(x) for x in f.read().split()]


def recv_exactly(sock, n):
    """`n` bytes from `sock`, or None if the peer closes first (the rendezvous' frames: a 4-byte
    big-endian length, then the body)."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def wait_for(predicate, timeout=10.0, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def wait_for_pids(path, count, timeout=10.0):
    assert wait_for(lambda: len(read_pids(path)) >= count, timeout), \
        f"expected {count} pids in {path}, got {read_pids(path)}"
    return read_pids(path)


@pytest.fixture
def etcd(tmp_path):
    """A fresh etcd of the test's own (backends.Etcd), started; skips where etcd is missing."""
    from backends import ETCD, Etcd
    if not ETCD:
        pytest.skip("etcd is not installed (Debian package etcd-server; scripts/setup.sh)")
    server = Etcd(tmp_path)
    server.start()
    yield server
    server.stop(signal.SIGKILL)


@pytest.fixture(params=["builtin", "etcd"])
def rdzv(request):
    """Each rendezvous backend in turn (backends.py): the scenario that takes it runs on both."""
    from backends import Builtin, EtcdBackend
    if request.param == "builtin":
        return Builtin()
    return EtcdBackend(request.getfixturevalue("etcd"))


@pytest.fixture
def agents(tmp_path):
    """agents(name, args, env=None, netns=None) starts `trainrun ARGS` as one agent of a job, its
    output in tmp_path/NAME.out and .err (see agents.Agents); whatever is still running at the
    end of the test is killed."""
    with Agents(TRAINRUN, tmp_path) as started:
        yield started


class Namespace:
    def __init__(self, name, veth, addr):
        self.name, self.veth, self.addr = name, veth, addr


class NamespacePair:
    """Two network namespaces ns[0], ns[1], each with lo up and one end of a veth pair."""

    def __init__(self, ip):
        self.ip = ip
        tag = os.getpid()
        # A /30 that exists only inside the two namespaces: nothing else is reached.
        subnet = f"10.213.{tag % 250}"
        # Interface names hold at most 15 bytes: "trv" + pid (≤ 7 digits) + "a".
        self.ns = [Namespace(f"trainrun-{tag}-{side}", f"trv{tag}{side}", f"{subnet}.{i + 1}")
                   for i, side in enumerate("ab")]
        self.created = []

    def sh(self, *args):
        r = subprocess.run([self.ip, *args], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip() or r.returncode}")

    def create(self):
        """Creates what is missing (the first namespace may exist already)."""
        for ns in self.ns:
            if ns.name not in self.created:
                self.sh("netns", "add", ns.name)
                self.created.append(ns.name)
        a, b = self.ns
        # Both ends are created straight inside the namespaces: the host's own stack never
        # sees them.
        self.sh("link", "add", a.veth, "netns", a.name, "type", "veth", "peer", "name", b.veth,
                "netns", b.name)
        for ns in self.ns:
            self.sh("-n", ns.name, "addr", "add", f"{ns.addr}/30", "dev", ns.veth)
            self.sh("-n", ns.name, "link", "set", "lo", "up")
            self.sh("-n", ns.name, "link", "set", ns.veth, "up")

    def destroy(self):
        for name in self.created:
            # Processes still inside (a failed test's agents) would keep the namespace alive.
            r = subprocess.run([self.ip, "netns", "pids", name], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run([self.ip, "netns", "del", name], capture_output=True)
        self.created = []


@pytest.fixture
def netns_pair():
    """A NamespacePair for agents(..., netns=NAME), removed after the test; skips where network
    namespaces cannot be made (no iproute2, not root, not permitted)."""
    ip = ip_binary()
    if ip is None:
        pytest.skip("the `ip` command (iproute2) is not installed: cannot create network namespaces")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root (run the test as root)")
    pair = NamespacePair(ip)
    try:
        try:
            pair.sh("netns", "add", pair.ns[0].name)
        except RuntimeError as e:
            pytest.skip(f"`ip netns add` is not permitted here: {e}")
        pair.created.append(pair.ns[0].name)
        pair.create()
        yield pair
    finally:
        pair.destroy()


IPTABLES = shutil.which("iptables") or next(
    (p for p in ("/usr/sbin/iptables", "/sbin/iptables") if os.access(p, os.X_OK)), None)


def ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = f.read().split()
    return low, high


def drop_ephemeral_ports(netns_pair):
    """New connections from b to a's ephemeral range are dropped (the preflight's and the
    workers' ports): the rendezvous', etcd's and sshd's ports, outside that range, stay open, and
    so do a's connections to b. Returns the pair's two namespaces; skips where iptables cannot do
    that here."""
    if IPTABLES is None:
        pytest.skip("iptables is not installed (scripts/setup.sh)")
    a, b = netns_pair.ns
    low, high = ephemeral_range()
    rule = ["-p", "tcp", "--syn", "-d", a.addr, "--dport", f"{low}:{high}", "-j", "DROP"]
    r = subprocess.run(["ip", "netns", "exec", b.name, IPTABLES, "-A", "OUTPUT", *rule],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"iptables does not work in a network namespace here: {r.stderr.strip()}")
    return a, b


def ranks_by_restart(path):
    """{restart count: {ranks}} from lines "$TORCHELASTIC_RESTART_COUNT $RANK" that workers
    appended to `path`."""
    seen = {}
    for line in path.read_text().splitlines():
        if line:
            count, rank = line.split()
            seen.setdefault(int(count), set()).add(int(rank))
    return seen


def read_envs(directory):
    """The environments that test_worker's `env` action wrote, by RANK."""
    envs = {}
    for name in os.listdir(directory):
        with open(os.path.join(directory, name)) as f:
            env = dict(line.split("=", 1) for line in f.read().splitlines() if "=" in line)
        envs[int(env["RANK"])] = env
    return envs


@pytest.fixture
def worker():
    assert WORKER and os.access(WORKER, os.X_OK), "set TEST_WORKER_BIN (ctest does)"
    return WORKER


@pytest.fixture(autouse=True)
def _no_leftovers():
    """Every test must leave no process of its own behind."""
    yield
    me = os.getpid()
    leftovers = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            leftovers.append(int(entry))
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"processes left running: {leftovers}"
