"""The preflight: once a round has formed and before the workers start, every agent checks the
links to its peers, MASTER_ADDR and what every node runs; a failure names the nodes and stops the
job on every node (docs/multinode.md)."""
import os
import re
import shutil
import signal
import subprocess

import pytest

from backends import ETCD, Etcd, etcd_args
from conftest import IPTABLES, drop_ephemeral_ports, dynamic
from ports import free_port

JOIN = "--rdzv-conf=join_timeout=60"
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


def drop_port(ns, port):
    """New connections to TCP `port` of namespace `ns` are dropped; its other ports stay open."""
    if IPTABLES is None:
        pytest.skip("iptables is not installed (scripts/setup.sh)")
    r = subprocess.run(["ip", "netns", "exec", ns.name, IPTABLES, "-A", "INPUT", "-p", "tcp",
                        "--dport", str(port), "-j", "DROP"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"iptables does not work in a network namespace here: {r.stderr.strip()}")


def test_a_firewalled_master_port_is_named_on_both_nodes(netns_pair, agents, worker, tmp_path):
    a, b = netns_pair.ns
    # A static rendezvous: MASTER_PORT is the one given, the rendezvous on the next (open).
    master_port = 29406
    drop_port(a, master_port)
    common = ["--nnodes=2", "--nproc-per-node=1", f"--master-addr={a.addr}",
              f"--master-port={master_port}", JOIN]
    started = [agents(ns.name, common + [f"--node-rank={rank}", f"--local-addr={ns.addr}", worker,
                                         "pidfile", str(tmp_path / f"{ns.name}.pids"), "sleep",
                                         "60"], netns=ns.name)
               for rank, ns in enumerate((a, b))]
    # Named in seconds, not after init_process_group's 30 minutes.
    for agent in started:
        assert agent.wait(timeout=60) == 1, agent.err
    host = os.uname().nodename
    link = (f"{host} (group rank 1, {b.addr}) cannot open a TCP connection to {host} (group rank "
            f"0) at {a.addr}:{master_port} (MASTER_PORT): no answer")
    for agent in started:
        assert link in agent.err, agent.err
        assert f"let TCP from {b.addr} to {a.addr} through on port {master_port}, MASTER_PORT" \
            in agent.err, agent.err
        # The preflight port of group rank 0, open, was reached.
        assert "(MASTER_ADDR): no answer" not in agent.err, agent.err
    # Group rank 0 waited for node b's check: no worker started on either node.
    for ns in (a, b):
        assert not (tmp_path / f"{ns.name}.pids").exists(), started[0].err


def test_on_etcd_the_firewall_ends_the_job_on_both_nodes(netns_pair, agents, worker, tmp_path):
    a, b = drop_ephemeral_ports(netns_pair)
    if not ETCD:
        pytest.skip("etcd is not installed (Debian package etcd-server; scripts/setup.sh)")
    # etcd on node a's address, its ports outside the dropped range: both nodes reach it.
    server = Etcd(tmp_path, host=a.addr, netns=a.name)
    server.start()
    try:
        started = [agents(ns.name, etcd_args(server, 2, 1, JOIN, f"--local-addr={ns.addr}", "-v",
                                             run_id="pf", backend="etcd-v2") +
                          [worker, "pidfile", str(tmp_path / f"{ns.name}.pids"), "sleep", "60"],
                          netns=ns.name)
                   for ns in (a, b)]
        # Ended by the check's 5 s bound, not by init_process_group's 30 minutes.
        for agent in started:
            assert agent.wait(timeout=60) == 1, agent.err
        host = os.uname().nodename
        # Whichever node etcd's round made group rank 0, node b cannot reach its ports (MASTER_PORT
        # too, which a dynamic rendezvous takes from the ephemeral range).
        link = re.compile(rf"preflight failed on {re.escape(host)}: {re.escape(host)} \(group "
                          rf"rank [01], {re.escape(b.addr)}\) cannot open a TCP connection to "
                          rf"{re.escape(host)} \(group rank [01]\) at {re.escape(a.addr)}:\d+"
                          rf"( \(MASTER_(ADDR|PORT)\))?: no answer")
        for agent in started:
            assert len(link.findall(agent.err)) == 1, agent.err
        # Node a ran its preflight too, whichever way etcd told it its ranks (the writer of the
        # state reads it; the others take a summary, which holds no peer to check): as group rank
        # 0 it waited for b's check of MASTER_PORT and started no worker, else it checked b.
        if "node rank 0 of 2 nodes" in started[0].err:
            assert not (tmp_path / f"{a.name}.pids").exists(), started[0].err
        else:
            assert "preflight passed: 1 node checked" in started[0].err, started[0].err
        # The workers of node b never started.
        assert not (tmp_path / f"{b.name}.pids").exists()
    finally:
        server.stop(signal.SIGKILL)


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


def differing_scripts(tmp_path, last_line):
    """The directories of nodes a and b, each with its ./job.sh: the same name on both nodes, one
    byte apart, ending with `last_line`."""
    dirs = []
    for side in ("a", "b"):
        d = tmp_path / side
        d.mkdir()
        script = d / "job.sh"
        script.write_text(f"#!/bin/sh\n# version {side}\n{last_line}\n")
        script.chmod(0o755)
        dirs.append(d)
    return dirs


def test_a_script_that_differs_between_the_nodes_stops_the_job(agents, worker, tmp_path):
    port = free_port()
    dirs = differing_scripts(tmp_path, f"exec {worker} sleep 60")
    args = dynamic(port, 2, 1, JOIN, "--no-python", run_id="pf") + ["./job.sh"]
    ra = agents("a", args, cwd=dirs[0])
    rb = agents("b", args, cwd=dirs[1])
    assert ra.wait(timeout=60) == 1, ra.err
    assert rb.wait(timeout=60) == 1, rb.err
    for agent in (ra, rb):
        assert "the entrypoint differs between the nodes" in agent.err, agent.err
    assert "worker" not in (tmp_path / "a.out").read_text()


def test_warn_runs_a_differing_script_and_says_so_once_per_node(agents, tmp_path):
    port = free_port()
    ran = tmp_path / "ran"
    dirs = differing_scripts(tmp_path, f'echo "$RANK" >> {ran}')
    args = dynamic(port, 2, 1, JOIN, "--no-python", "--preflight=warn", run_id="pf") + ["./job.sh"]
    ra = agents("a", args, cwd=dirs[0])
    rb = agents("b", args, cwd=dirs[1])
    assert ra.wait(timeout=60) == 0, ra.err
    assert rb.wait(timeout=60) == 0, rb.err
    assert sorted(ran.read_text().split()) == ["0", "1"]
    # Each node says it once, as a warning, and the workers ran.
    for agent in (ra, rb):
        lines = [line for line in agent.err.splitlines() if "the entrypoint differs" in line]
        assert len(lines) == 1, agent.err
        assert lines[0].startswith("trainrun: preflight: "), agent.err
        assert lines[0].endswith("(a warning with --preflight=warn)"), agent.err
        assert "preflight failed" not in agent.err


def test_a_log_directory_on_a_full_disk_stops_the_job(agents, worker, tmp_path):
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a file system of its own (unshare --mount, mount) needs root and util-linux")
    port = free_port()
    logs = tmp_path / "logs"
    logs.mkdir()
    # Node b sees a file system of its own at the log directory, full: a directory can still be
    # made there (no data block), a file not written.
    full = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs -o size=4k tmpfs {logs} && {{ cat /dev/zero > {logs}/fill; }} '
            '2>/dev/null; exec "$@"', "sh"]
    pids = tmp_path / "pids"
    args = dynamic(port, 2, 1, JOIN, f"--log-dir={logs}", run_id="pf") + [
        worker, "pidfile", str(pids), "sleep", "60"]
    ra = agents("a", args)
    rb = agents("b", args, wrap=full)
    assert rb.wait(timeout=60) == 1, rb.err
    assert ra.wait(timeout=60) == 1, ra.err
    line = f"preflight failed on {os.uname().nodename}: the log directory {logs}/pf_"
    for agent in (ra, rb):
        assert agent.err.count(line) == 1, agent.err
        assert "No space left on device (write); the workers' logs and error files go there: " \
            "choose another with --log-dir" in agent.err, agent.err
    # Node b's worker never started (a's may have, and was stopped with the job).
    assert not pids.exists() or len(pids.read_text().split()) <= 1


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
