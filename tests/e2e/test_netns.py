"""One job across real network interfaces: two network namespaces joined by a veth pair, one
trainrun agent in each, talking only through that pair (needs root and `ip netns`)."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import dynamic, read_envs, torch2_stub, wait_for

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


# A worker whose interpreter finds a stub torch 2.5.0, so that the agent of group rank 0 serves
# the job's store: it says where the store is, waits for the test, then sets and gets its key
# there as torch 2.x's client does (VALIDATE, SET, GET).
STORE_WORKER = """
import os, socket, struct, sys, time
out, go = sys.argv[1], sys.argv[2]
rank = os.environ["RANK"]
with open(out + rank + ".tmp", "w") as f:
    f.write(os.environ["MASTER_PORT"] + " " + os.environ["TORCHELASTIC_USE_AGENT_STORE"])
os.rename(out + rank + ".tmp", out + rank)
while not os.path.exists(go):
    time.sleep(0.05)
s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
def text(b): return struct.pack("<Q", len(b)) + b
key = ("rank" + rank).encode()
s.sendall(b"\\x00" + struct.pack("<I", 0x3C85F7CE) + b"\\x01" + text(key) + text(b"value")
          + b"\\x03" + text(key))
want = struct.pack("<Q", 5) + b"value"
got = b""
while len(got) < len(want):
    got += s.recv(64)
print("store ok" if got == want else "store wrong: %r" % got, flush=True)
"""

# A client from `source` that reaches the store and asks it for its key count: "closed" when
# the store closes the connection instead of answering.
OUTSIDER = """
import socket, struct, sys
source, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.create_connection((addr, port), timeout=60, source_address=(source, 0))
try:
    s.sendall(b"\\x00" + struct.pack("<I", 0x3C85F7CE) + b"\\x07")
    print("closed" if s.recv(8) == b"" else "served", flush=True)
except ConnectionResetError:
    print("closed", flush=True)
"""


def test_the_jobs_store_refuses_an_address_outside_the_round(netns_pair, agents, tmp_path):
    a, b = netns_pair.ns
    # A second address on b's side that no agent uses: a client outside the round, from a
    # machine that reaches the store's node.
    outsider = "10.214." + a.addr.split(".")[2] + ".2"
    netns_pair.sh("-n", b.name, "addr", "add", f"{outsider}/32", "dev", b.veth)
    netns_pair.sh("-n", a.name, "route", "add", f"{outsider}/32", "dev", a.veth)
    script = tmp_path / "worker.py"
    script.write_text(STORE_WORKER)
    env = {"PYTHONPATH": torch2_stub(tmp_path)}
    out, go, summary = tmp_path / "port", tmp_path / "go", tmp_path / "summary.json"
    cmd = [str(script), str(out), str(go)]
    endpoint = f"{a.addr}:29405"
    ra = agents("a", dynamic(endpoint, 2, 1, JOIN, f"--local-addr={a.addr}",
                             f"--summary-file={summary}", run_id="netns") + cmd,
                env=env, netns=a.name)
    rb = agents("b", dynamic(endpoint, 2, 1, JOIN, f"--local-addr={b.addr}", run_id="netns") + cmd,
                env=env, netns=b.name)
    ports = [tmp_path / "port0", tmp_path / "port1"]
    assert wait_for(lambda: all(p.exists() for p in ports) or ra.proc.poll() is not None
                    or rb.proc.poll() is not None, 60)
    assert all(p.exists() for p in ports), ra.err + rb.err
    port, shared = ports[0].read_text().split()
    assert shared == "True", "the agent must serve the store to torch 2.x workers"

    knock = subprocess.run([netns_pair.ip, "netns", "exec", b.name, sys.executable, "-c", OUTSIDER,
                            outsider, a.addr, port], capture_output=True, text=True, timeout=90)
    assert knock.stdout.strip() == "closed", (knock.stdout, knock.stderr, ra.err)
    line = f"c10d store: refused a connection from {outsider}:"
    assert wait_for(lambda: line in ra.err, 30), ra.err
    assert f"not a node of this job (the round's nodes: {a.addr}, {b.addr})" in ra.err, ra.err

    # The job's own ranks, on both nodes of the round, are served.
    go.write_text("")
    assert ra.wait() == 0, ra.err
    assert rb.wait() == 0, rb.err
    assert ra.out.count("store ok") == 1 and rb.out.count("store ok") == 1, (ra.out, rb.out)
    assert json.loads(summary.read_text())["store_refused_connections"] == 1
