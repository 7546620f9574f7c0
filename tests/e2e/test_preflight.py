"""The preflight: once a round has formed and before the workers start, every agent checks the
links to its peers, MASTER_ADDR and what every node runs; a failure names the nodes and stops the
job on every node (docs/multinode.md)."""
import os
import shutil
import subprocess

import pytest

from conftest import dynamic
from ports import free_port

JOIN = "--rdzv-conf=join_timeout=60"
IPTABLES = shutil.which("iptables") or next(
    (p for p in ("/usr/sbin/iptables", "/sbin/iptables") if os.access(p, os.X_OK)), None)


def ephemeral_range():
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = f.read().split()
    return low, high


def drop_ephemeral_ports(netns_pair):
    """New connections from b to a's ephemeral range are dropped: the rendezvous port (29403)
    stays open, and so do a's connections to b. Skips where iptables cannot do that here."""
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


def test_a_firewall_that_drops_the_ephemeral_ports_is_named_on_both_nodes(netns_pair, agents,
                                                                          worker):
    a, b = drop_ephemeral_ports(netns_pair)
    endpoint = f"{a.addr}:29403"
    cmd = [worker, "sleep", "60"]
    ra = agents("a", dynamic(endpoint, 2, 1, JOIN, f"--local-addr={a.addr}", run_id="pf") + cmd,
                netns=a.name)
    rb = agents("b", dynamic(endpoint, 2, 1, JOIN, f"--local-addr={b.addr}", run_id="pf") + cmd,
                netns=b.name)
    # Named in seconds (the check's bound is 5 s), not after init_process_group's 30 minutes.
    assert rb.wait(timeout=60) == 1, rb.err
    assert ra.wait(timeout=60) == 1, ra.err
    host = os.uname().nodename  # both namespaces share the machine's host name
    link = (f"{host} (group rank 1, {b.addr}) cannot open a TCP connection to {host} (group rank "
            f"0) at {a.addr}:")
    for agent in (ra, rb):
        assert link in agent.err, agent.err
        assert "(MASTER_ADDR): no answer" in agent.err, agent.err
        assert f"let TCP from {b.addr} to {a.addr} through" in agent.err, agent.err
        assert "GLOO_SOCKET_IFNAME/NCCL_SOCKET_IFNAME" in agent.err, agent.err
    # The workers of group rank 1 never started.
    assert "preflight failed" in rb.err and "worker" not in rb.out


def test_a_preflight_failure_stops_the_job_whatever_restarts_are_left(netns_pair, agents,
                                                                      worker, tmp_path):
    a, b = drop_ephemeral_ports(netns_pair)
    marks = tmp_path / "marks"
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\necho \"$TORCHELASTIC_RESTART_COUNT\" >> {marks}\n"
                      f"exec {worker} sleep 60\n")
    script.chmod(0o755)
    # One node would do (1:2) and restarts are left: still a configuration error ends the job.
    args = [JOIN, "--max-restarts=3", "--no-python"]
    endpoint = f"{a.addr}:29403"
    ra = agents("a", dynamic(endpoint, "1:2", 1, *args, f"--local-addr={a.addr}", run_id="pf") +
                [str(script)], netns=a.name)
    rb = agents("b", dynamic(endpoint, "1:2", 1, *args, f"--local-addr={b.addr}", run_id="pf") +
                [str(script)], netns=b.name)
    assert rb.wait(timeout=60) == 1, rb.err
    assert ra.wait(timeout=60) == 1, ra.err
    host = os.uname().nodename
    link = (f"{host} (group rank 1, {b.addr}) cannot open a TCP connection to {host} (group rank "
            f"0) at {a.addr}:")
    for agent in (ra, rb):
        assert link in agent.err, agent.err
    # Group rank 0 passed and may have started its worker once; no attempt came after.
    attempts = marks.read_text().split() if marks.exists() else []
    assert set(attempts) <= {"0"}, (attempts, ra.err)


def test_a_script_that_differs_between_the_nodes_stops_the_job(agents, worker, tmp_path):
    port = free_port()
    dirs = []
    for side in ("a", "b"):
        d = tmp_path / side
        d.mkdir()
        script = d / "job.sh"
        # The same name on both nodes; one byte differs.
        script.write_text(f"#!/bin/sh\n# version {side}\nexec {worker} sleep 60\n")
        script.chmod(0o755)
        dirs.append(d)
    args = dynamic(port, 2, 1, JOIN, "--no-python", run_id="pf") + ["./job.sh"]
    ra = agents("a", args, cwd=dirs[0])
    rb = agents("b", args, cwd=dirs[1])
    assert ra.wait(timeout=60) == 1, ra.err
    assert rb.wait(timeout=60) == 1, rb.err
    for agent in (ra, rb):
        assert "the entrypoint differs between the nodes" in agent.err, agent.err
    assert "worker" not in (tmp_path / "a.out").read_text()


def test_master_addr_that_resolves_to_loopback_on_its_node(netns_pair, agents, worker):
    a, b = netns_pair.ns
    name = "trainrun-preflight-master"
    made = []
    try:
        # ip netns exec bind-mounts /etc/netns/NS/hosts over /etc/hosts: on a (group rank 0) the
        # name is its own, as Debian maps a host's name (127.0.1.1); on b, a's real address.
        for ns, addr in ((a, "127.0.1.1"), (b, a.addr)):
            d = f"/etc/netns/{ns.name}"
            os.makedirs(d, exist_ok=True)
            made.append(d)
            with open(f"{d}/hosts", "w") as f:
                f.write(f"127.0.0.1 localhost\n{addr} {name}\n")
        # As trainrun --hosts runs them: the first host's name is MASTER_ADDR.
        common = ["--nnodes=2", "--nproc-per-node=1", f"--master-addr={name}",
                  "--master-port=29404", JOIN]
        cmd = [worker, "sleep", "60"]
        ra = agents("a", common + ["--node-rank=0"] + cmd, netns=a.name)
        rb = agents("b", common + ["--node-rank=1"] + cmd, netns=b.name)
        assert ra.wait(timeout=60) == 1, ra.err
        assert rb.wait(timeout=60) == 1, rb.err
        loopback = (f"MASTER_ADDR {name} resolves to 127.0.1.1 on {os.uname().nodename}, a loopback "
                    "address")
        assert loopback in ra.err, ra.err
        assert loopback in rb.err, rb.err
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
