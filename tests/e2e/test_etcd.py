"""The etcd backend's own cases (--rdzv-backend=etcd, against Debian's etcd-server started by each
test, backends.py): etcd restarted or gone, leases, run ids and the keys they keep, answers that
are not etcd's. The scenarios every backend shares are in test_rendezvous.py."""
import base64
import http.server
import json
import re
import signal
import threading
import time
import urllib.request

import pytest

from backends import EtcdBackend, check_job, etcd_args, shrinks_without
from conftest import read_envs, wait_for, wait_for_pids
from job_failures import check_late_but_earlier
from ports import free_port

FAST = "--rdzv-conf=heartbeat_timeout=3,keep_alive_interval=0.5,last_call_timeout=1"


def test_the_same_run_id_runs_again_after_the_job_finished(etcd, agents, worker, tmp_path):
    # The first job's ended state stays in etcd: the second job's agents, arriving together,
    # start one fresh job under the same run id (docs/protocol.md, the etcd backend).
    for attempt in ("first", "second"):
        out = tmp_path / attempt
        out.mkdir()
        started = [agents(f"{attempt}-{name}", etcd_args(etcd, 2, 1) +
                          [worker, "env", str(out / "e")]) for name in ("a", "b")]
        for p in started:
            assert p.wait(60) == 0, p.err
        check_job(read_envs(out), 2, 2)


def test_the_node_that_completes_the_round_does_not_say_it_waits(etcd, agents, worker):
    # As with the built-in rendezvous (test_multinode): a node whose join completes a fixed-size
    # round has nothing to wait for.
    a = agents("a", etcd_args(etcd, 2, 1) + [worker, "exit", "0"])
    assert wait_for(lambda: "waiting for nodes in etcd at " in a.err, 30), a.err
    b = agents("b", etcd_args(etcd, 2, 1) + [worker, "exit", "0"])
    assert a.wait(60) == 0, a.err
    assert b.wait(60) == 0, b.err
    assert "waiting for nodes" not in b.err, b.err


def etcd_values(server, prefix, keys_only=False):
    """What etcd holds under `prefix`, by key, as `etcdctl get --prefix` lists it."""
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps({"key": base64.b64encode(prefix.encode()).decode(),
                       "range_end": base64.b64encode(end.encode()).decode(),
                       "keys_only": keys_only}).encode()
    with urllib.request.urlopen(f"http://{server.endpoint}/v3/kv/range", body, timeout=10) as r:
        kvs = json.load(r).get("kvs", [])
    return {base64.b64decode(kv["key"]).decode(): base64.b64decode(kv.get("value", "")).decode()
            for kv in kvs}


def etcd_keys(server, prefix):
    """The keys etcd holds under `prefix`, as `etcdctl get --prefix --keys-only` lists them."""
    return sorted(etcd_values(server, prefix, keys_only=True))


def test_run_ids_one_inside_the_other_keep_to_their_own_keys(etcd, agents, worker, tmp_path):
    # Run "a" reads and watches the range of its prefix: run "a/nodes/x"'s keys must not be in
    # it, where they read as live nodes of "a". Each run's keys are under its percent-encoded id.
    jobs = {"a": (2, 1), "a/nodes/x": (1, 3)}  # run id: nodes, workers per node
    started = []
    for run_id, (nodes, nproc) in jobs.items():
        out = tmp_path / run_id.replace("/", "_")
        out.mkdir()
        started += [agents(f"{out.name}-{i}", etcd_args(etcd, nodes, nproc, FAST, run_id=run_id) +
                           [worker, "env", str(out / "e"), "sleep", "1"]) for i in range(nodes)]
    for p in started:
        assert p.wait(60) == 0, p.err
    check_job(read_envs(tmp_path / "a"), 2, 2)
    check_job(read_envs(tmp_path / "a_nodes_x"), 3, 1)
    for prefix in ("/trainrun/a/", "/trainrun/a%2Fnodes%2Fx/"):
        keys = [k[len(prefix):] for k in etcd_keys(etcd, prefix)]
        assert "state" in keys and all(
            re.fullmatch(r"state|round|(nodes|answers)/[0-9a-f]{16}", k) for k in keys), (prefix, keys)


def test_agent_killed_while_joining_is_left_out_of_the_next_round(etcd, agents, worker,
                                                                 tmp_path):
    # Its lease outlives it by up to heartbeat_timeout (long enough here for the next agents to
    # start on a loaded machine), so they pick it into their round; the round starts only once
    # every member has answered, and forms again without it when its lease expires.
    args = etcd_args(etcd, 2, 1, "--rdzv-conf=heartbeat_timeout=10,keep_alive_interval=0.5")
    gone = agents("gone", args + [worker, "env", str(tmp_path / "never")])
    assert wait_for(lambda: "waiting for nodes" in gone.err, 30), gone.err
    gone.proc.kill()
    gone.proc.wait()
    out = tmp_path / "env"
    out.mkdir()
    started = [agents(name, args + [worker, "env", str(out / "e")]) for name in ("a", "b")]
    for p in started:
        assert p.wait(60) == 0, p.err
    check_job(read_envs(out), 2, 2)
    assert "never answered" in started[0].err + started[1].err


def test_every_node_names_the_same_root_cause_and_lists_every_failure(etcd, agents, tmp_path):
    # As with the built-in rendezvous (test_failures.py): the failure reported first (rank 0)
    # is not the root cause; every node waits for the other to say what failed.
    check_late_but_earlier(agents, tmp_path, etcd_args(etcd, 2, 1))


def test_any_agent_may_be_lost_the_first_too(etcd, agents, tmp_path):
    # No agent hosts anything: the first to start is lost as any other (on the built-in backend
    # it would host the rendezvous; test_rendezvous.py loses the last one on both backends).
    shrinks_without(EtcdBackend(etcd), agents, tmp_path, "a")


def test_the_agent_that_writes_the_state_may_be_lost(etcd, agents, tmp_path):
    # The agent with the lowest node id takes the others' keys into the state; SIGKILLed
    # mid-job, the next one takes over: it finds the lease gone, records the loss, and the two
    # left re-form and finish (docs/protocol.md, the etcd backend).
    def writer(started):
        nodes = etcd_values(etcd, "/trainrun/job/nodes/")
        pid = int(nodes[min(nodes)].rsplit(" pid ", 1)[1])
        return next(name for name, agent in started.items() if agent.proc.pid == pid)

    shrinks_without(EtcdBackend(etcd), agents, tmp_path, writer)


def test_etcd_restarted_mid_job_is_reconnected(etcd, agents, tmp_path):
    go = tmp_path / "go"
    pids = tmp_path / "pids"
    script = tmp_path / "w.sh"
    script.write_text(f"#!/bin/sh\necho $$ >> {pids}\n"
                      f"while [ ! -e {go} ]; do sleep 0.1; done\nexit 0\n")
    script.chmod(0o755)
    # Leases outlive the outage (2 s, plus etcd's start on a loaded machine) by far: the test is
    # about reconnecting, not about how fast.
    conf = "--rdzv-conf=heartbeat_timeout=30,keep_alive_interval=0.5,join_timeout=60"
    a = agents("a", etcd_args(etcd, 2, 1, conf) + [str(script)])
    b = agents("b", etcd_args(etcd, 2, 1, conf) + [str(script)])
    wait_for_pids(pids, 2, timeout=30)
    etcd.stop()
    time.sleep(2)
    etcd.start()
    go.touch()
    # The exit barrier needs etcd again: both nodes finish through the restarted etcd.
    assert a.wait(60) == 0, a.err
    assert b.wait(60) == 0, b.err
    assert "not reachable" in a.err + b.err


def test_etcd_gone_for_good_stops_the_job_clearly(etcd, agents, tmp_path):
    pids = tmp_path / "pids"
    script = tmp_path / "w.sh"
    script.write_text(f"#!/bin/sh\necho $$ >> {pids}\nsleep 60\n")
    script.chmod(0o755)
    conf = "--rdzv-conf=heartbeat_timeout=3,keep_alive_interval=0.5,join_timeout=4"
    a = agents("a", etcd_args(etcd, 2, 1, conf) + [str(script)])
    b = agents("b", etcd_args(etcd, 2, 1, conf) + [str(script)])
    wait_for_pids(pids, 2, timeout=30)
    etcd.stop(signal.SIGKILL)
    for agent in (a, b):
        assert agent.wait(60) == 1, agent.err
        assert f"etcd at {etcd.endpoint} unreachable for" in agent.err


def test_wrong_endpoint_is_named(agents, tmp_path):
    port = free_port()
    a = agents("a", ["--nnodes=2", "--rdzv-backend=etcd", f"--rdzv-endpoint=127.0.0.1:{port}",
                     "--rdzv-conf=join_timeout=3", "/bin/true"])
    assert a.wait(60) == 1
    assert f"etcd at 127.0.0.1:{port} unreachable for" in a.err
    assert "Connection refused" in a.err or "connect" in a.err.lower()


def test_endpoint_that_is_not_etcd_is_named_at_once(etcd, agents, tmp_path):
    # etcd's peer port answers HTTP but not the v3 client API.
    a = agents("a", ["--nnodes=2", "--rdzv-backend=etcd",
                     f"--rdzv-endpoint=127.0.0.1:{etcd.peer}", "/bin/true"])
    assert a.wait(60) == 1
    assert "does not answer as etcd's v3 API does" in a.err


@pytest.mark.parametrize("status", [408, 429])
def test_an_etcd_that_answers_not_now_is_retried_not_refused(agents, status):
    # etcd's HTTP gateway answers 408 "the client connection is closing" while it restarts; a
    # busy one 429. Neither says "not etcd": the agent retries until its deadline, as for an etcd
    # it cannot reach, and then names the last answer.
    body = b'{"error":"grpc: the client connection is closing","code":1}'

    class NotNow(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotNow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        a = agents("a", ["--nnodes=2", "--rdzv-backend=etcd", f"--rdzv-endpoint=127.0.0.1:{port}",
                         "--rdzv-conf=join_timeout=3", "/bin/true"])
        assert a.wait(60) == 1, a.err
    finally:
        server.shutdown()
        server.server_close()
    assert "does not answer as etcd's v3 API does" not in a.err, a.err
    assert f"etcd at 127.0.0.1:{port} unreachable for" in a.err, a.err
    assert f"HTTP {status}" in a.err, a.err
