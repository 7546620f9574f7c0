"""One job across real network interfaces: two network namespaces joined by a veth pair, one
trainrun agent in each, talking only through that pair (needs root and `ip netns`)."""
import os
import shutil
import subprocess

import pytest

from conftest import read_envs

# A /30 that exists only inside the two namespaces this module creates: nothing else is reached.
SUBNET = f"10.213.{os.getpid() % 250}"
JOIN = "--rdzv-conf=join_timeout=60"


def ip_binary():
    return shutil.which("ip") or next(
        (p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if os.access(p, os.X_OK)), None)


class Namespace:
    def __init__(self, name, veth, addr):
        self.name, self.veth, self.addr = name, veth, addr


class NamespacePair:
    """Two namespaces ns[0], ns[1], each with lo up and one end of a veth pair."""

    def __init__(self, ip):
        self.ip = ip
        tag = os.getpid()
        # Interface names hold at most 15 bytes: "trv" + pid (≤ 7 digits) + "a".
        self.ns = [Namespace(f"trainrun-{tag}-{side}", f"trv{tag}{side}", f"{SUBNET}.{i + 1}")
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


@pytest.fixture(scope="module")
def pair(request):
    ip = ip_binary()
    if ip is None:
        pytest.skip("the `ip` command (iproute2) is not installed: cannot create network namespaces")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root (run the test as root)")
    p = NamespacePair(ip)
    request.addfinalizer(p.destroy)
    try:
        p.sh("netns", "add", p.ns[0].name)
    except RuntimeError as e:
        pytest.skip(f"`ip netns add` is not permitted here: {e}")
    p.created.append(p.ns[0].name)
    p.create()
    return p


@pytest.fixture
def agents(agents):
    """Agents started inside a namespace: agents(ns, args, env=None)."""

    def make(ns, args, env=None):
        return agents(ns.name, args, env, prefix=[ip_binary(), "netns", "exec", ns.name])

    return make


def check_two_nodes(envs, pair, master_port=None):
    assert sorted(envs) == [0, 1, 2, 3]
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"4"}
    assert {e["GROUP_WORLD_SIZE"] for e in envs.values()} == {"2"}
    assert sorted(e["GROUP_RANK"] for e in envs.values()) == ["0", "0", "1", "1"]
    masters = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs.values()}
    assert len(masters) == 1, masters
    assert next(iter(masters))[0] == pair.ns[0].addr
    if master_port is not None:
        assert next(iter(masters))[1] == str(master_port)
    for e in envs.values():
        assert int(e["RANK"]) == 2 * int(e["GROUP_RANK"]) + int(e["LOCAL_RANK"])


def dynamic(pair, port, *extra):
    return ["--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={pair.ns[0].addr}:{port}", "--rdzv-id=netns", JOIN, *extra]


def test_agents_in_two_namespaces_form_one_job(pair, agents, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    a, b = pair.ns
    ra = agents(a, dynamic(pair, 29400, f"--local-addr={a.addr}") + [worker, "env", str(out / "e")])
    rb = agents(b, dynamic(pair, 29400, f"--local-addr={b.addr}") + [worker, "env", str(out / "e")])
    assert ra.wait() == 0, ra.err
    assert rb.wait() == 0, rb.err
    envs = read_envs(out)
    check_two_nodes(envs, pair)
    # Group rank follows the address here (same host name): ns a's workers are ranks 0 and 1.
    assert {envs[r]["GROUP_RANK"] for r in (0, 1)} == {"0"}
    assert "hosting the rendezvous" in ra.err
    assert "hosting the rendezvous" not in rb.err


def test_advertised_address_is_derived_from_the_connection(pair, agents, worker, tmp_path):
    # Without --local-addr each agent advertises the address it reaches the server from; the
    # host name (the same in both namespaces) must not be used.
    out = tmp_path / "env"
    out.mkdir()
    a, b = pair.ns
    ra = agents(a, dynamic(pair, 29401) + [worker, "env", str(out / "e")])
    rb = agents(b, dynamic(pair, 29401) + [worker, "env", str(out / "e")])
    assert ra.wait() == 0, ra.err
    assert rb.wait() == 0, rb.err
    check_two_nodes(read_envs(out), pair)


def test_static_backend_across_namespaces(pair, agents, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    a, b = pair.ns
    common = ["--nnodes=2", "--nproc-per-node=2", f"--master-addr={a.addr}", "--master-port=29500",
              JOIN]
    rb = agents(b, common + ["--node-rank=1", worker, "env", str(out / "e")])
    ra = agents(a, common + ["--node-rank=0", worker, "env", str(out / "e")])
    assert ra.wait() == 0, ra.err
    assert rb.wait() == 0, rb.err
    check_two_nodes(read_envs(out), pair, master_port=29500)


def test_failure_in_one_namespace_stops_the_other(pair, agents, worker):
    a, b = pair.ns
    args = [worker, "sleep", "0.5", "rank-exit", "3", "9", "sleep", "60"]
    ra = agents(a, dynamic(pair, 29402, f"--local-addr={a.addr}", "--shutdown-timeout=5") + args)
    rb = agents(b, dynamic(pair, 29402, f"--local-addr={b.addr}", "--shutdown-timeout=5") + args)
    assert rb.wait() == 9, rb.err
    assert ra.wait() == 9, ra.err
    assert "rank      : 3 (local_rank: 1)" in ra.err, ra.err


def test_cxx_all_reduce_across_namespaces(pair, agents):
    demo = os.environ.get("ALLREDUCE_DEMO_BIN")
    if not demo:
        pytest.skip("allreduce_demo not built (LibTorch missing): set ALLREDUCE_DEMO_BIN")
    a, b = pair.ns
    # Gloo picks its interface from the host name otherwise, whose address is not in here.
    ra = agents(a, dynamic(pair, 29403, f"--local-addr={a.addr}") + [demo],
                env={"GLOO_SOCKET_IFNAME": a.veth})
    rb = agents(b, dynamic(pair, 29403, f"--local-addr={b.addr}") + [demo],
                env={"GLOO_SOCKET_IFNAME": b.veth})
    assert ra.wait(120) == 0, ra.err
    assert rb.wait(120) == 0, rb.err
    lines = sorted((ra.out + rb.out).splitlines())
    assert lines == [f"rank {r}/4: all_reduce sum=10 (expected 10) ok" for r in range(4)]
