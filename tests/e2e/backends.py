"""The rendezvous backends as the end-to-end tests see them: the built-in one (an agent hosts it on
a free port) and etcd (Debian's etcd-server, started by the test on free ports with its data in
the test's temporary directory). A scenario written once takes the `rdzv` fixture (conftest.py) and
runs on both."""
import os
import shutil
import signal
import subprocess
import sys
import urllib.request

import pytest

from agents import ip_binary
from conftest import alive, dynamic, wait_for, wait_for_pids
from ports import free_port

ETCD = shutil.which("etcd")


class Etcd:
    """One etcd member on `host` (127.0.0.1, or an address of network namespace `netns`, where it
    then runs); stop() and start() again keep its data (a restart)."""

    def __init__(self, directory, host="127.0.0.1", netns=None):
        self.directory, self.host, self.netns = directory, host, netns
        self.port, self.peer = free_port(), free_port()
        self.proc = None

    @property
    def endpoint(self):
        return f"{self.host}:{self.port}"

    def inside(self):
        """The words that run a command where etcd runs."""
        return [ip_binary(), "netns", "exec", self.netns] if self.netns else []

    def start(self):
        peer = f"http://{self.host}:{self.peer}"
        client = f"http://{self.host}:{self.port}"
        log = open(self.directory / "etcd.log", "a")
        self.proc = subprocess.Popen(
            [*self.inside(), ETCD, "--name", "t", "--data-dir", str(self.directory / "data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"t={peer}"], stdout=log, stderr=log)
        log.close()
        if not wait_for(self.healthy, 30, 0.1):
            self.stop()
            pytest.skip(f"etcd did not start on {self.endpoint}: "
                        f"{(self.directory / 'etcd.log').read_text()[-500:]}")

    def healthy(self):
        if self.netns:
            # This process cannot reach into the namespace: ask from inside it.
            ask = (f"import urllib.request; print(urllib.request.urlopen("
                   f"'http://{self.endpoint}/health', timeout=1).read())")
            r = subprocess.run([*self.inside(), sys.executable, "-c", ask], capture_output=True,
                               text=True, timeout=30)
            return '"true"' in r.stdout
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                return b'"true"' in r.read()
        except OSError:
            return False

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(30)


def etcd_args(server, nnodes, nproc, *extra, run_id="job", backend="etcd"):
    return [f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", f"--rdzv-backend={backend}",
            f"--rdzv-endpoint={server.endpoint}", f"--rdzv-id={run_id}", *extra]


class Builtin:
    """The built-in rendezvous on a free port of 127.0.0.1, hosted by one of the agents."""
    name = "builtin"
    # What a survivor says of a node killed mid-job.
    lost = "lost"

    def __init__(self):
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"

    def args(self, nnodes, nproc, conf="", *extra, run_id="job", host=None):
        """An agent's options; `conf` the --rdzv-conf entries; `host`: whether this agent hosts
        the rendezvous (None: whichever binds the port first)."""
        if host is not None:
            conf = ",".join(c for c in (conf, f"is_host={int(host)}") if c)
        return dynamic(self.port, nnodes, nproc, *([f"--rdzv-conf={conf}"] if conf else []),
                       *extra, run_id=run_id)


class EtcdBackend:
    """etcd, under the backend name `backend` (etcd, or its alias etcd-v2); no agent hosts it.
    `host`: whether the agent counts as the one the endpoint names (node rank 0), as is_host
    says; None: by its address (every agent here runs on etcd's machine)."""
    lost = "etcd lease expired"

    def __init__(self, server, backend="etcd"):
        self.server, self.backend = server, backend
        self.name = backend
        self.endpoint = server.endpoint

    def args(self, nnodes, nproc, conf="", *extra, run_id="job", host=None):
        if host is not None:
            conf = ",".join(c for c in (conf, f"is_host={int(host)}") if c)
        return etcd_args(self.server, nnodes, nproc, *([f"--rdzv-conf={conf}"] if conf else []),
                         *extra, run_id=run_id, backend=self.backend)


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


def job_that_loses_a_node(rdzv, agents, tmp_path, nnodes, names, extra=()):
    """Agents `names` (the first hosts a built-in rendezvous) of a job of `nnodes`, one worker
    each that runs until the job has two nodes; returns them, by name, once every worker runs.
    Each worker's group world size is appended to tmp_path/pids.ws."""
    pids = tmp_path / "pids"
    script = tmp_path / "w.sh"
    # The world size first: once a worker's pid is in pids, its world size is in pids.ws
    # too, however soon after that its agent is killed.
    script.write_text(f"#!/bin/sh\necho \"$GROUP_WORLD_SIZE\" >> {pids}.ws\necho $$ >> {pids}\n"
                      "[ \"$GROUP_WORLD_SIZE\" = 2 ] && exit 0\nsleep 60\n")
    script.chmod(0o755)
    # A long last call: the round waits for all three, however loaded the machine.
    conf = "heartbeat_timeout=3,keep_alive_interval=0.5,last_call_timeout=20"
    started = {}
    for name in names:
        started[name] = agents(name, rdzv.args(nnodes, 1, conf, "--shutdown-timeout=2", *extra,
                                               host=name == names[0]) + [str(script)])
    wait_for_pids(pids, len(names), timeout=30)
    return started


def shrinks_without(rdzv, agents, tmp_path, victim):
    """An elastic job of agents a, b, c (2:3) loses `victim` (a name, or a function of the
    agents by name that names it once every worker runs) to SIGKILL: the others go on with two
    nodes, each saying the node was lost."""
    started = job_that_loses_a_node(rdzv, agents, tmp_path, "2:3", ["a", "b", "c"],
                                    ["--max-restarts=2"])
    killed = started.pop(victim(started) if callable(victim) else victim)
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.wait()
    for agent in started.values():
        assert agent.wait(60) == 0, agent.err
        assert rdzv.lost in agent.err, agent.err
    assert (tmp_path / "pids.ws").read_text().split() == ["3", "3", "3", "2", "2"]


def sigterm_one_of_two(rdzv, agents, worker, tmp_path, stopped):
    """A two-node job whose agent `stopped` ("host", which hosts a built-in rendezvous, or
    "other") gets SIGTERM: it exits 143 without SIGKILLing its worker, and the other exits 1
    once its worker has gone. Returns the stopped agent and the other."""
    pids = tmp_path / "pids"
    args = [worker, "pidfile", str(pids), "sleep", "600"]
    extra = ["--max-restarts=2", "--shutdown-timeout=600"]
    host = agents("host", rdzv.args(2, 1, "", *extra, host=True) + args)
    other = agents("other", rdzv.args(2, 1, "", *extra, host=False) + args)
    workers = wait_for_pids(pids, 2, timeout=30)
    target, survivor = (host, other) if stopped == "host" else (other, host)
    os.kill(target.proc.pid, signal.SIGTERM)
    # Bounded far below the 600 s grace period: the workers end on the SIGTERM itself.
    assert target.wait(120) == 143, target.err
    assert "sending SIGKILL" not in target.err, target.err
    # A node stopped mid-job is a lost node (exit 1), on every other.
    assert survivor.wait(30) == 1, survivor.err
    assert wait_for(lambda: not any(alive(p) for p in workers), 10)
    return target, survivor
