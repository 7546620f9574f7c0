"""Several trainrun agents on this machine forming one job through the built-in rendezvous."""
import os
import signal
import socket
import threading
import time

import pytest

from conftest import (alive, dynamic, ranks_by_restart, read_envs, read_pids, wait_for,
                      wait_for_pids)
from ports import free_port, held_port


def check_job(envs, world, nodes):
    assert sorted(envs) == list(range(world))
    assert {e["WORLD_SIZE"] for e in envs.values()} == {str(world)}
    assert {e["GROUP_WORLD_SIZE"] for e in envs.values()} == {str(nodes)}
    assert sorted({int(e["GROUP_RANK"]) for e in envs.values()}) == list(range(nodes))
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs.values()}) == 1
    # Ranks are contiguous per node: local rank 0 of each node starts its block.
    for e in envs.values():
        assert int(e["RANK"]) - int(e["LOCAL_RANK"]) == min(
            int(x["RANK"]) for x in envs.values() if x["GROUP_RANK"] == e["GROUP_RANK"])


def test_two_agents_with_different_nproc_form_one_job(agents, worker, tmp_path):
    port = free_port()
    out = tmp_path / "env"
    out.mkdir()
    a = agents("a", dynamic(port, 2, 2) + [worker, "env", str(out / "e")])
    b = agents("b", dynamic(port, 2, 3) + [worker, "env", str(out / "e")])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    envs = read_envs(out)
    check_job(envs, 5, 2)
    assert sorted(e["LOCAL_WORLD_SIZE"] for e in envs.values()) == ["2", "2", "3", "3", "3"]


def test_three_agents(agents, worker, tmp_path):
    port = free_port()
    out = tmp_path / "env"
    out.mkdir()
    procs = [agents(f"n{i}", dynamic(port, 3, 2) + [worker, "env", str(out / "e")]) for i in range(3)]
    for p in procs:
        assert p.wait() == 0, p.err
    check_job(read_envs(out), 6, 3)


def test_static_backend_with_node_ranks(agents, worker, tmp_path):
    port = free_port()
    out = tmp_path / "env"
    out.mkdir()
    common = ["--nnodes=2", "--nproc-per-node=2", "--master-addr=127.0.0.1", f"--master-port={port}"]
    b = agents("b", common + ["--node-rank=1", worker, "env", str(out / "e")])
    a = agents("a", common + ["--node-rank=0", worker, "env", str(out / "e")])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    envs = read_envs(out)
    check_job(envs, 4, 2)
    assert {e["GROUP_RANK"] for r, e in envs.items() if r < 2} == {"0"}
    assert {e["MASTER_PORT"] for e in envs.values()} == {str(port)}


def test_cxx_all_reduce_across_agents(agents):
    demo = os.environ.get("ALLREDUCE_DEMO_BIN")
    if not demo:
        pytest.skip("allreduce_demo not built (LibTorch missing)")
    port = free_port()
    a = agents("a", dynamic(port, 2, 2) + [demo])
    b = agents("b", dynamic(port, 2, 1) + [demo])
    assert a.wait(120) == 0, a.err
    assert b.wait(120) == 0, b.err
    lines = sorted((a.out + b.out).splitlines())
    assert lines == [f"rank {r}/3: all_reduce sum=6 (expected 6) ok" for r in range(3)]


def test_failure_on_one_node_stops_every_node_with_the_same_code(agents, worker, tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    args = [worker, "pidfile", str(pids), "wait-lines", str(pids), "4", "rank-exit", "3", "7",
            "sleep", "60"]
    a = agents("a", dynamic(port, 2, 2, "--shutdown-timeout=5") + args)
    b = agents("b", dynamic(port, 2, 2, "--shutdown-timeout=5") + args)
    assert a.wait() == 7, a.err
    assert b.wait() == 7, b.err
    for agent in (a, b):
        assert "FAILED" in agent.err
        assert "rank      : 3 (local_rank: 1)" in agent.err
        assert f"host      : {socket.gethostname()}" in agent.err


def test_restarts_are_counted_per_job(agents, tmp_path):
    port = free_port()
    script = tmp_path / "w.sh"
    marks = tmp_path / "marks"
    script.write_text(f"#!/bin/sh\necho \"$TORCHELASTIC_RESTART_COUNT $RANK\" >> {marks}\n"
                      "sleep 0.5\n"
                      "[ \"$RANK\" = 2 ] && [ \"$TORCHELASTIC_RESTART_COUNT\" -lt 2 ] && exit 5\n"
                      "exit 0\n")
    script.chmod(0o755)
    a = agents("a", dynamic(port, 2, 2, "--max-restarts=3") + [str(script)])
    b = agents("b", dynamic(port, 2, 2, "--max-restarts=3") + [str(script)])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    # Attempts 0, 1 and 2 each ran all four ranks, with one count on every node.
    assert ranks_by_restart(marks) == {0: {0, 1, 2, 3}, 1: {0, 1, 2, 3}, 2: {0, 1, 2, 3}}


def test_elastic_round_completes_at_min_after_last_call(agents, worker, tmp_path):
    port = free_port()
    out = tmp_path / "env"
    out.mkdir()
    # join_timeout far above what the agents' wait allows: the round completes by last call.
    extra = ["--rdzv-conf=last_call_timeout=1,join_timeout=600"]
    a = agents("a", dynamic(port, "2:3", 1, *extra) + [worker, "env", str(out / "e")])
    b = agents("b", dynamic(port, "2:3", 1, *extra) + [worker, "env", str(out / "e")])
    assert a.wait(120) == 0, a.err
    assert b.wait(120) == 0, b.err
    check_job(read_envs(out), 2, 2)


def test_node_arriving_mid_job_restarts_everyone_into_a_bigger_round(agents, worker, tmp_path):
    port = free_port()
    stamps = tmp_path / "ws"
    script = tmp_path / "w.sh"
    # Run until the job has two nodes, then finish.
    script.write_text(f"#!/bin/sh\necho \"$WORLD_SIZE $GROUP_WORLD_SIZE\" >> {stamps}\n"
                      "[ \"$GROUP_WORLD_SIZE\" = 2 ] && exit 0\nsleep 60\n")
    script.chmod(0o755)
    extra = ["--rdzv-conf=last_call_timeout=0.2", "--max-restarts=2"]
    a = agents("a", dynamic(port, "1:2", 1, *extra) + [str(script)])
    assert wait_for(lambda: stamps.exists(), 20)
    b = agents("b", dynamic(port, "1:2", 1, *extra) + [str(script)])
    assert a.wait(60) == 0, a.err
    assert b.wait(60) == 0, b.err
    lines = stamps.read_text().splitlines()
    assert lines[0] == "1 1"
    assert lines[1:] == ["2 2", "2 2"]


def test_lost_agent_is_noticed_and_job_continues_smaller(agents, worker, tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    script = tmp_path / "w.sh"
    # The world size first: once a worker's pid is in pids, its world size is in pids.ws
    # too, however soon after that its agent is killed.
    script.write_text(f"#!/bin/sh\necho \"$GROUP_WORLD_SIZE\" >> {pids}.ws\necho $$ >> {pids}\n"
                      "[ \"$GROUP_WORLD_SIZE\" = 1 ] && exit 0\nsleep 600\n")
    script.chmod(0o755)
    conf = "--rdzv-conf=heartbeat_timeout=2,keep_alive_interval=0.5,last_call_timeout=1"
    extra = ["--max-restarts=2", "--shutdown-timeout=2"]
    host = agents("host", dynamic(port, "1:2", 1, conf + ",is_host=1", *extra) + [str(script)])
    other = agents("other", dynamic(port, "1:2", 1, conf + ",is_host=0", *extra) + [str(script)])
    wait_for_pids(pids, 2, timeout=30)
    other.proc.kill()
    other.proc.wait()
    # Bounded far below the workers' 600 s: the host restarts without the lost node.
    assert host.wait(120) == 0, host.err
    assert (tmp_path / "pids.ws").read_text().split() == ["2", "2", "1"]


def test_lost_agent_without_restarts_stops_everyone_clearly(agents, worker, tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    conf = "--rdzv-conf=heartbeat_timeout=2,keep_alive_interval=0.5"
    host = agents("host", dynamic(port, 2, 1, conf + ",is_host=1") + [worker, "pidfile", str(pids),
                                                                         "sleep", "60"])
    other = agents("other", dynamic(port, 2, 1, conf + ",is_host=0") + [worker, "pidfile", str(pids),
                                                                         "sleep", "60"])
    workers = wait_for_pids(pids, 2, timeout=30)
    other.proc.kill()
    other.proc.wait()
    code = host.wait(60)
    assert code != 0
    assert "lost" in host.err.lower()
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in workers), 10)


def test_join_timeout_names_endpoint_and_missing_count(agents):
    port = free_port()
    a = agents("a", dynamic(port, 3, 1, "--rdzv-conf=join_timeout=2") + ["/bin/true"])
    assert a.wait(60) != 0
    assert f"127.0.0.1:{port}" in a.err
    assert "1 of 3" in a.err or "2 missing" in a.err or "missing" in a.err, a.err


def test_endpoint_not_up_yet_is_retried(agents, worker, tmp_path):
    port = free_port()
    out = tmp_path / "env"
    out.mkdir()
    a = agents("a", dynamic(port, 2, 1, "--rdzv-conf=is_host=0") + [worker, "env", str(out / "e")])
    time.sleep(1.5)
    assert a.proc.poll() is None
    b = agents("b", dynamic(port, 2, 1, "--rdzv-conf=is_host=1") + [worker, "env", str(out / "e")])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    assert "retry" in a.err.lower() or "not reachable" in a.err.lower()
    check_job(read_envs(out), 2, 2)


def test_agent_of_another_job_is_refused(agents):
    port = free_port()
    a = agents("a", dynamic(port, 2, 1, "--rdzv-conf=is_host=1,join_timeout=5", run_id="jobA") +
               ["/bin/true"])
    time.sleep(0.5)
    b = agents("b", dynamic(port, 2, 1, run_id="jobB") + ["/bin/true"])
    assert b.wait(30) != 0
    assert "jobA" in b.err or "run id" in b.err.lower(), b.err
    a.wait(30)
    assert "jobB" in a.err or "refused" in a.err.lower() or "reject" in a.err.lower(), a.err


def test_wrong_token_is_refused(agents, tmp_path):
    port = free_port()
    a = agents("a", dynamic(port, 2, 1, "--rdzv-conf=is_host=1,join_timeout=5") + ["/bin/true"],
               env={"TRAINRUN_RDZV_TOKEN": "right"})
    time.sleep(0.5)
    b = agents("b", dynamic(port, 2, 1) + ["/bin/true"], env={"TRAINRUN_RDZV_TOKEN": "wrong"})
    assert b.wait(30) != 0
    reason = "the server's token proof does not match: the nodes hold different tokens"
    assert f"trainrun: this node refused the rendezvous at 127.0.0.1:{port}: {reason}" in \
        b.err.splitlines(), b.err
    a.wait(30)
    # The host says it too, with the same reason, naming the refused node's address (its
    # "hosting ... token required" line is no answer).
    assert any(line.startswith("trainrun: rendezvous server: rejected 127.0.0.1:") and
               line.endswith(f": the client refused this rendezvous: {reason}")
               for line in a.err.splitlines()), a.err


def _run_agents_while(blocker, agents, port, conf, names=("a",)):
    """Starts one agent per name on `port` with `conf`, runs /bin/true, waits for them all, then
    closes `blocker` (what stands at the port); returns the agents, their exit codes, and the
    seconds from their start to the last one's end."""
    try:
        t0 = time.monotonic()
        procs = [agents(n, dynamic(port, 2, 1, conf) + ["/bin/true"]) for n in names]
        codes = [p.wait(120) for p in procs]
        return procs, codes, time.monotonic() - t0
    finally:
        blocker.close()


def test_port_held_by_a_process_that_does_not_listen_is_named_early(agents):
    # A socket bound to the port that never listens: no agent can host or connect.
    holder = held_port()
    port = holder.getsockname()[1]
    procs, codes, took = _run_agents_while(holder, agents, port, "--rdzv-conf=join_timeout=300",
                                           names=("a", "b"))
    expected = (f"trainrun: rendezvous endpoint 127.0.0.1:{port}: the port is in use by another "
                "process that is not a trainrun rendezvous host (bind: Address already in use; "
                "connect: Connection refused); free it or choose another --rdzv-endpoint port")
    for p, code in zip(procs, codes):
        assert code == 1, p.err
        lines = p.err.splitlines()
        assert expected in lines, p.err
        assert sum("not a trainrun rendezvous host" in line for line in lines) == 1, p.err
    # A few seconds' grace for a hosting agent that is starting, not the 300 s join timeout.
    assert took < 60, took


class _StrangeListener:
    """A listener on a free port that answers every connection with `answer` and keeps it open."""

    def __init__(self, answer):
        self.sock = held_port()
        self.port = self.sock.getsockname()[1]
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.answer = answer
        self.conns = []
        self.running = True
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while self.running:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.conns.append(conn)
            conn.sendall(self.answer)

    def close(self):
        self.running = False
        self.thread.join()
        for c in self.conns:
            c.close()
        self.sock.close()


@pytest.mark.parametrize("answer", [b"SSH-2.0-OpenSSH_9.2p1\r\n",
                                    b"\x00\x00\x00\x0bhello there"])
def test_listener_that_is_not_a_trainrun_agent_is_named_at_once(agents, answer):
    listener = _StrangeListener(answer)
    port = listener.port
    (a,), (code,), took = _run_agents_while(listener, agents, port, "--rdzv-conf=join_timeout=300")
    assert code == 1, a.err
    lines = [line for line in a.err.splitlines() if "not a trainrun rendezvous host" in line]
    assert len(lines) == 1, a.err
    assert lines[0].startswith(f"trainrun: rendezvous endpoint 127.0.0.1:{port}: the process "
                               "listening there is not a trainrun rendezvous host ("), a.err
    assert took < 60, took


def test_refused_remote_endpoint_is_retried_until_the_join_timeout(agents):
    # is_host=0: the agent does not own the endpoint, as on another machine than its host, so a
    # refusal may be a host that has not started yet.
    holder = held_port()
    port = holder.getsockname()[1]
    (a,), (code,), took = _run_agents_while(holder, agents, port,
                                            "--rdzv-conf=is_host=0,join_timeout=6")
    assert code == 1, a.err
    assert took >= 5.5, took
    assert (f"rendezvous endpoint 127.0.0.1:{port} not reachable after 6 s (last attempt: "
            "Connection refused)") in a.err, a.err


def test_stopped_agent_does_not_hold_up_the_hosts_exit(agents, worker, tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    conf = "--rdzv-conf=heartbeat_timeout=2,keep_alive_interval=0.5"
    args = [worker, "pidfile", str(pids), "sleep", "60"]
    host = agents("host", dynamic(port, 2, 1, conf + ",is_host=1") + args)
    other = agents("other", dynamic(port, 2, 1, conf + ",is_host=0") + args)
    wait_for_pids(pids, 2, timeout=30)
    os.kill(other.proc.pid, signal.SIGSTOP)
    try:
        assert wait_for(lambda: "lost:" in host.err, 30), host.err
        declared = time.monotonic()
        code = host.wait(30)
        reacted = time.monotonic() - declared
        still_stopped = other.proc.poll() is None
    finally:
        os.kill(other.proc.pid, signal.SIGCONT)
    assert code == 1, host.err
    assert still_stopped
    # The host used to wait its whole 5 s close linger for the stopped peer to acknowledge.
    assert reacted < 3, f"host exited {reacted:.1f} s after declaring the node lost:\n{host.err}"
    # Resumed, the stopped agent learns that the job is over and stops its worker.
    assert other.wait(30) != 0, other.err


@pytest.mark.parametrize("stopped", ["host", "other"])
def test_node_stopped_by_a_signal_is_named_on_the_others(agents, worker, tmp_path, stopped):
    port = free_port()
    pids = tmp_path / "pids"
    args = [worker, "pidfile", str(pids), "sleep", "600"]
    extra = ["--max-restarts=2", "--shutdown-timeout=600"]
    host = agents("host", dynamic(port, 2, 1, "--rdzv-conf=is_host=1", *extra) + args)
    other = agents("other", dynamic(port, 2, 1, "--rdzv-conf=is_host=0", *extra) + args)
    workers = wait_for_pids(pids, 2, timeout=30)
    target, survivor = (host, other) if stopped == "host" else (other, host)
    os.kill(target.proc.pid, signal.SIGTERM)
    # Bounded far below the 600 s grace period: the workers end on the SIGTERM itself.
    assert target.wait(120) == 143, target.err
    assert "sending SIGKILL" not in target.err, target.err
    # The same code either way: a node stopped mid-job is a lost node (exit 1), on every other.
    assert survivor.wait(30) == 1, survivor.err
    name = socket.gethostname()
    expected = (f"trainrun: node {name} (127.0.0.1, pid {target.proc.pid}) lost (left: {name} "
                "stopped by SIGTERM); ")
    expected += (f"it hosted the rendezvous at 127.0.0.1:{port}, so the job cannot continue"
                 if stopped == "host" else "1 node remains, fewer than the minimum of 2")
    # The host used to leave only "lost the rendezvous server at ...: connection closed by peer".
    assert expected in survivor.err.splitlines(), survivor.err
    assert "lost the rendezvous server" not in survivor.err, survivor.err
    assert wait_for(lambda: not any(alive(p) for p in workers), 10)


def test_failure_on_the_host_stops_every_node_with_its_code(agents, tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    script = tmp_path / "w.sh"
    script.write_text(f"#!/bin/sh\necho $$ >> {pids}\n"
                      f"[ \"$FAIL\" = 1 ] && while [ $(wc -l < {pids}) -lt 2 ]; do sleep 0.05; done"
                      " && exit 7\nexec sleep 60\n")
    script.chmod(0o755)
    host = agents("host", dynamic(port, 2, 1, "--rdzv-conf=is_host=1") + [str(script)],
                  env={"FAIL": "1"})
    other = agents("other", dynamic(port, 2, 1, "--rdzv-conf=is_host=0") + [str(script)],
                   env={"FAIL": "0"})
    assert host.wait(60) == 7, host.err
    assert other.wait(60) == 7, other.err
    for agent in (host, other):
        assert "FAILED" in agent.err, agent.err
        assert "exitcode  : 7" in agent.err, agent.err
    assert "lost the rendezvous server" not in other.err, other.err
    assert wait_for(lambda: not any(alive(p) for p in read_pids(pids)), 10)
