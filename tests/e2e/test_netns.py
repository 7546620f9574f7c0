"""One job across real network interfaces: two network namespaces joined by a veth pair, one
trainrun agent in each, talking only through that pair (needs root and `ip netns`)."""
import os
import subprocess
import time

import pytest

from conftest import dynamic, read_envs

JOIN = "--rdzv-conf=join_timeout=60"


def check_two_nodes(envs, master_addr, master_port=None):
    assert sorted(envs) == [0, 1, 2, 3]
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"4"}
    assert {e["GROUP_WORLD_SIZE"] for e in envs.values()} == {"2"}
    assert sorted(e["GROUP_RANK"] for e in envs.values()) == ["0", "0", "1", "1"]
    masters = {(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs.values()}
    assert len(masters) == 1, masters
    assert next(iter(masters))[0] == master_addr
    if master_port is not None:
        assert next(iter(masters))[1] == str(master_port)
    for e in envs.values():
        assert int(e["RANK"]) == 2 * int(e["GROUP_RANK"]) + int(e["LOCAL_RANK"])


def test_agents_in_two_namespaces_form_one_job(netns_pair, agents, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    a, b = netns_pair.ns
    cmd = [worker, "env", str(out / "e")]
    endpoint = f"{a.addr}:29400"
    ra = agents("a", dynamic(endpoint, 2, 2, JOIN, f"--local-addr={a.addr}", run_id="netns") + cmd,
                netns=a.name)
    rb = agents("b", dynamic(endpoint, 2, 2, JOIN, f"--local-addr={b.addr}", run_id="netns") + cmd,
                netns=b.name)
    assert ra.wait() == 0, ra.err
    assert rb.wait() == 0, rb.err
    envs = read_envs(out)
    check_two_nodes(envs, a.addr)
    # Group rank follows the address here (same host name): ns a's workers are ranks 0 and 1.
    assert {envs[r]["GROUP_RANK"] for r in (0, 1)} == {"0"}
    assert "hosting the rendezvous" in ra.err
    assert "hosting the rendezvous" not in rb.err


def test_advertised_address_is_derived_from_the_connection(netns_pair, agents, worker, tmp_path):
    # Without --local-addr each agent advertises the address it reaches the server from; the
    # host name (the same in both namespaces) must not be used.
    out = tmp_path / "env"
    out.mkdir()
    a, b = netns_pair.ns
    cmd = dynamic(f"{a.addr}:29401", 2, 2, JOIN, run_id="netns") + [worker, "env", str(out / "e")]
    ra = agents("a", cmd, netns=a.name)
    rb = agents("b", cmd, netns=b.name)
    assert ra.wait() == 0, ra.err
    assert rb.wait() == 0, rb.err
    check_two_nodes(read_envs(out), a.addr)


def test_static_backend_across_namespaces(netns_pair, agents, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    a, b = netns_pair.ns
    common = ["--nnodes=2", "--nproc-per-node=2", f"--master-addr={a.addr}", "--master-port=29500",
              JOIN]
    rb = agents("b", common + ["--node-rank=1", worker, "env", str(out / "e")], netns=b.name)
    ra = agents("a", common + ["--node-rank=0", worker, "env", str(out / "e")], netns=a.name)
    assert ra.wait() == 0, ra.err
    assert rb.wait() == 0, rb.err
    check_two_nodes(read_envs(out), a.addr, master_port=29500)


def test_failure_in_one_namespace_stops_the_other(netns_pair, agents, worker):
    a, b = netns_pair.ns
    args = [worker, "sleep", "0.5", "rank-exit", "3", "9", "sleep", "60"]
    endpoint = f"{a.addr}:29402"
    ra = agents("a", dynamic(endpoint, 2, 2, JOIN, f"--local-addr={a.addr}", "--shutdown-timeout=5",
                             run_id="netns") + args,
                netns=a.name)
    rb = agents("b", dynamic(endpoint, 2, 2, JOIN, f"--local-addr={b.addr}", "--shutdown-timeout=5",
                             run_id="netns") + args,
                netns=b.name)
    assert rb.wait() == 9, rb.err
    assert ra.wait() == 9, ra.err
    assert "rank      : 3 (local_rank: 1)" in ra.err, ra.err


def test_cxx_all_reduce_across_namespaces(netns_pair, agents):
    demo = os.environ.get("ALLREDUCE_DEMO_BIN")
    if not demo:
        pytest.skip("allreduce_demo not built (LibTorch missing): set ALLREDUCE_DEMO_BIN")
    a, b = netns_pair.ns
    # Gloo picks its interface from the host name otherwise, whose address is not in here.
    endpoint = f"{a.addr}:29403"
    ra = agents("a", dynamic(endpoint, 2, 2, JOIN, f"--local-addr={a.addr}", run_id="netns")
                + [demo], env={"GLOO_SOCKET_IFNAME": a.veth}, netns=a.name)
    rb = agents("b", dynamic(endpoint, 2, 2, JOIN, f"--local-addr={b.addr}", run_id="netns")
                + [demo], env={"GLOO_SOCKET_IFNAME": b.veth}, netns=b.name)
    assert ra.wait(120) == 0, ra.err
    assert rb.wait(120) == 0, rb.err
    lines = sorted((ra.out + rb.out).splitlines())
    assert lines == [f"rank {r}/4: all_reduce sum=10 (expected 10) ok" for r in range(4)]


def listen_backlogs(netns_pair, ns):
    """Each listening TCP socket in the namespace: its local address and its backlog (ss's
    Send-Q for a listener)."""
    out = subprocess.run([netns_pair.ip, "netns", "exec", ns.name, "ss", "-ltnH"],
                         capture_output=True, text=True, check=True).stdout
    return [(f[3], int(f[2])) for f in (line.split() for line in out.splitlines()) if f]


def test_listeners_ask_for_the_kernels_whole_backlog(netns_pair, agents, worker):
    # A host of thousands of agents sees them connect at once. Every socket trainrun listens on
    # asks for a backlog as large as listen() takes, so that net.core.somaxconn, raised for a
    # large job, decides; glibc's SOMAXCONN (4,096) capped it below a raised somaxconn, and the
    # SYNs past it were dropped and retried a second later.
    a, _ = netns_pair.ns
    subprocess.run([netns_pair.ip, "netns", "exec", a.name, "sysctl", "-qw",
                    "net.core.somaxconn=30000"], check=True)
    ra = agents("a", dynamic(f"{a.addr}:29404", 1, 1, JOIN, f"--local-addr={a.addr}",
                             run_id="netns") + [worker, "sleep", "30"], netns=a.name)
    try:
        deadline = time.monotonic() + 30
        listeners = []
        while time.monotonic() < deadline and ra.proc.poll() is None:
            listeners = listen_backlogs(netns_pair, a)
            if any(addr.endswith(":29404") for addr, _ in listeners):
                break
            time.sleep(0.1)
        assert any(addr.endswith(":29404") for addr, _ in listeners), (listeners, ra.err)
        assert {backlog for _, backlog in listeners} == {30000}, listeners
    finally:
        ra.proc.terminate()
        ra.wait()
