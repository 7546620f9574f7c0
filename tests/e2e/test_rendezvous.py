"""Scenarios of several agents forming one job, written once and run on each rendezvous backend
(the built-in one and etcd: the `rdzv` fixture). Each backend's own cases are beside these, in
test_multinode.py (built-in) and test_etcd.py."""
import socket

from backends import (EtcdBackend, check_job, job_that_loses_a_node, shrinks_without,
                      sigterm_one_of_two)
from conftest import alive, ranks_by_restart, read_envs, wait_for

FAST = "heartbeat_timeout=3,keep_alive_interval=0.5,last_call_timeout=1"


def test_two_agents_with_different_nproc_form_one_job(rdzv, agents, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    a = agents("a", rdzv.args(2, 2) + [worker, "env", str(out / "e")])
    b = agents("b", rdzv.args(2, 3) + [worker, "env", str(out / "e")])
    assert a.wait() == 0, a.err
    assert b.wait() == 0, b.err
    envs = read_envs(out)
    check_job(envs, 5, 2)
    assert sorted(e["LOCAL_WORLD_SIZE"] for e in envs.values()) == ["2", "2", "3", "3", "3"]
    assert {e["TORCHELASTIC_RESTART_COUNT"] for e in envs.values()} == {"0"}


def test_three_agents(rdzv, agents, worker, tmp_path):
    # etcd under torchrun's other name for it: the same backend.
    if isinstance(rdzv, EtcdBackend):
        rdzv = EtcdBackend(rdzv.server, "etcd-v2")
    out = tmp_path / "env"
    out.mkdir()
    procs = [agents(f"n{i}", rdzv.args(3, 2) + [worker, "env", str(out / "e")]) for i in range(3)]
    for p in procs:
        assert p.wait() == 0, p.err
        if rdzv.name == "etcd-v2":
            assert "trainrun speaks etcd's v3 API" in p.err
    check_job(read_envs(out), 6, 3)


def test_ranks_stay_put_the_host_takes_0_and_a_node_rank_is_honoured(rdzv, agents, tmp_path):
    marks = tmp_path / "marks"
    script = tmp_path / "w.sh"
    # Attempt 0 fails on node rank 1 once every node has written its line; the others wait to
    # be stopped. Attempt 1 shows where each node went the second time.
    script.write_text(f"#!/bin/sh\necho \"$TORCHELASTIC_RESTART_COUNT $WHO $GROUP_RANK\" >> {marks}\n"
                      "[ \"$TORCHELASTIC_RESTART_COUNT\" = 1 ] && exit 0\n"
                      "[ \"$GROUP_RANK\" = 1 ] || exec sleep 60\n"
                      f"for i in $(seq 600); do [ $(wc -l < {marks}) -ge 3 ] && exit 3; "
                      "sleep 0.1; done\nexit 3\n")
    script.chmod(0o755)

    def agent(name, host, *extra):
        args = rdzv.args(3, 1, "", "--max-restarts=1", *extra, host=host) + [str(script)]
        return agents(name, args, env={"WHO": name})

    # The node that hosts the rendezvous (etcd: is_host=1, all being on etcd's machine) starts
    # last, so that it sorts last by (host, address, pid).
    started = [agent("a", False, "--node-rank=2"), agent("b", False), agent("host", True)]
    for p in started:
        assert p.wait(60) == 0, p.err
    lines = sorted(marks.read_text().splitlines())
    assert lines == ["0 a 2", "0 b 1", "0 host 0", "1 a 2", "1 b 1", "1 host 0"], lines


def test_failure_on_one_node_stops_every_node_and_restarts_count_per_job(rdzv, agents, tmp_path):
    script = tmp_path / "w.sh"
    marks = tmp_path / "marks"
    script.write_text(f"#!/bin/sh\necho \"$TORCHELASTIC_RESTART_COUNT $RANK\" >> {marks}\n"
                      "sleep 0.5\n"
                      "[ \"$RANK\" = 2 ] && exit 5\nexit 0\n")
    script.chmod(0o755)
    a = agents("a", rdzv.args(2, 2, "", "--max-restarts=2", host=True) + [str(script)])
    b = agents("b", rdzv.args(2, 2, "", "--max-restarts=2", host=False) + [str(script)])
    assert a.wait() == 5, a.err
    assert b.wait() == 5, b.err
    # Attempts 0, 1 and 2 each ran all four ranks, with one count on every node; then no more.
    assert ranks_by_restart(marks) == {0: {0, 1, 2, 3}, 1: {0, 1, 2, 3}, 2: {0, 1, 2, 3}}
    assert "no restarts left (2 used)" in a.err + b.err
    for agent in (a, b):
        assert "FAILED" in agent.err, agent.err
        assert "rank      : 2 (local_rank: 0)" in agent.err, agent.err
        assert f"host      : {socket.gethostname()}" in agent.err, agent.err


def test_elastic_job_forms_at_min_after_last_call_and_grows(rdzv, agents, tmp_path):
    stamps = tmp_path / "ws"
    script = tmp_path / "w.sh"
    # Run until the job has three nodes, then finish.
    script.write_text(f"#!/bin/sh\necho \"$GROUP_WORLD_SIZE\" >> {stamps}\n"
                      "[ \"$GROUP_WORLD_SIZE\" = 3 ] && exit 0\nsleep 60\n")
    script.chmod(0o755)
    a = agents("a", rdzv.args("1:3", 1, FAST, "--max-restarts=3", host=True) + [str(script)])
    assert wait_for(lambda: stamps.exists(), 30)
    b = agents("b", rdzv.args("1:3", 1, FAST, "--max-restarts=3", host=False) + [str(script)])
    assert wait_for(lambda: stamps.read_text().split().count("2") == 2, 30), stamps.read_text()
    c = agents("c", rdzv.args("1:3", 1, FAST, "--max-restarts=3", host=False) + [str(script)])
    for p in (a, b, c):
        assert p.wait(60) == 0, p.err
    assert stamps.read_text().split() == ["1", "2", "2", "3", "3", "3"]


def test_killed_agent_shrinks_an_elastic_job(rdzv, agents, tmp_path):
    # The last to start: on the built-in backend, not the one that hosts the rendezvous.
    shrinks_without(rdzv, agents, tmp_path, "c")


def test_killed_agent_stops_a_fixed_size_job_clearly(rdzv, agents, tmp_path):
    started = job_that_loses_a_node(rdzv, agents, tmp_path, 3, ["a", "b", "c"],
                                    ["--max-restarts=2"])
    workers = [int(p) for p in (tmp_path / "pids").read_text().split()]
    started.pop("c").proc.kill()
    for agent in started.values():
        assert agent.wait(60) == 1, agent.err
        assert rdzv.lost in agent.err, agent.err
        assert "2 nodes remain, fewer than the minimum of 3" in agent.err, agent.err
    assert wait_for(lambda: not any(alive(p) for p in workers), 10)


def test_join_timeout_names_endpoint_and_missing_count(rdzv, agents):
    a = agents("a", rdzv.args(3, 1, "join_timeout=2") + ["/bin/true"])
    assert a.wait(60) != 0
    assert rdzv.endpoint in a.err, a.err
    assert "1 of 3" in a.err or "missing" in a.err, a.err


def test_node_stopped_by_a_signal_is_named_on_the_others(rdzv, agents, worker, tmp_path):
    stopped, host = sigterm_one_of_two(rdzv, agents, worker, tmp_path, "other")
    name = socket.gethostname()
    expected = (f"trainrun: node {name} (127.0.0.1, pid {stopped.proc.pid}) lost (left: {name} "
                "stopped by SIGTERM); 1 node remains, fewer than the minimum of 2")
    assert expected in host.err.splitlines(), host.err
