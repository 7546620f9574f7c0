"""trainrun in the pods of a Kubeflow PyTorchJob: each pod gets the environment the training
operator gives it and runs `trainrun ENTRYPOINT` with no options. Two pods are two network
namespaces joined by a veth pair, each with its pod's host name and an /etc/hosts that resolves
the other pod's name, as the job's headless service does (needs root)."""
import pytest

from agents import Agent
from conftest import TRAINRUN, read_envs
from named_hosts import on_host, which, write_hosts

JOB = "mnist"


@pytest.fixture
def pods(netns_pair, tmp_path):
    """pods(name, ns, env, args) starts trainrun as pod `name` in namespace `ns`."""
    if which("nsenter") is None or which("unshare") is None:
        pytest.skip("nsenter and unshare (util-linux) are needed to give each pod its host name")
    started = []

    def start(name, ns, env, args):
        hosts = tmp_path / "hosts"
        write_hosts(hosts, {pod: a.addr for pod, a in names.items()})
        agent = Agent(tmp_path, name, [TRAINRUN, *args], env,
                      prefix=on_host(ns.name, name, hosts, []))
        started.append(agent)
        return agent

    a, b = netns_pair.ns
    names = {f"{JOB}-master-0": a, f"{JOB}-worker-0": b}
    start.names = names
    try:
        yield start
    finally:
        for agent in started:
            agent.kill()


def operator_static_env(pod_rank, replicas, nproc, port):
    """A PyTorchJob with a Master and Workers (training operator 1.7+): the pod-level world and
    rank it always set, and the PET_* variables torchrun reads."""
    master = f"{JOB}-master-0"
    return {"PYTHONUNBUFFERED": "0", "MASTER_ADDR": master, "MASTER_PORT": str(port),
            "WORLD_SIZE": str(replicas), "RANK": str(pod_rank),
            "PET_MASTER_ADDR": master, "PET_MASTER_PORT": str(port),
            "PET_NNODES": str(replicas), "PET_NPROC_PER_NODE": str(nproc),
            "PET_NODE_RANK": str(pod_rank)}


def operator_elastic_env(nproc, port):
    """A PyTorchJob with an elasticPolicy (minReplicas 1, maxReplicas 2, rdzvConf): every pod the
    same, the rendezvous on worker 0."""
    return {"PYTHONUNBUFFERED": "0", "PET_RDZV_BACKEND": "c10d",
            "PET_RDZV_ENDPOINT": f"{JOB}-worker-0:{port}", "PET_RDZV_ID": JOB,
            "PET_NNODES": "1:2", "PET_NPROC_PER_NODE": str(nproc), "PET_MAX_RESTARTS": "3",
            # Both pods in the first round: the job waits this long for the second one.
            "PET_RDZV_CONF": "join_timeout=120,last_call_timeout=60"}


def check_job(envs, master_addr):
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, e in envs.items():
        # The operator's pod-level WORLD_SIZE=2 and RANK are replaced by the workers' own.
        assert e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "2"
        assert e["GROUP_WORLD_SIZE"] == "2"
        assert int(e["RANK"]) == 2 * int(e["GROUP_RANK"]) + int(e["LOCAL_RANK"])
        assert e["MASTER_ADDR"] == master_addr or master_addr is None


def test_static_pytorchjob(pods, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    (master, a), (pod1, b) = pods.names.items()
    cmd = [worker, "env", str(out / "e")]
    rw = pods(pod1, b, operator_static_env(1, 2, 2, 23456), cmd)
    rm = pods(master, a, operator_static_env(0, 2, 2, 23456), cmd)
    assert rm.wait() == 0, rm.err
    assert rw.wait() == 0, rw.err
    envs = read_envs(out)
    check_job(envs, master)
    # PET_NODE_RANK orders the pods: the master pod runs ranks 0 and 1.
    assert [envs[r]["GROUP_RANK"] for r in range(4)] == ["0", "0", "1", "1"]
    assert {e["MASTER_PORT"] for e in envs.values()} == {"23456"}
    assert {e["TORCHELASTIC_MAX_RESTARTS"] for e in envs.values()} == {"0"}


def test_elastic_pytorchjob(pods, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    (pod0, a), (pod1, b) = pods.names.items()
    cmd = [worker, "env", str(out / "e")]
    r0 = pods(pod0, a, operator_elastic_env(2, 29400), cmd)
    r1 = pods(pod1, b, operator_elastic_env(2, 29400), cmd)
    assert r0.wait(180) == 0, r0.err
    assert r1.wait(180) == 0, r1.err
    envs = read_envs(out)
    check_job(envs, None)
    assert sorted(e["GROUP_RANK"] for e in envs.values()) == ["0", "0", "1", "1"]
    assert {e["TORCHELASTIC_RUN_ID"] for e in envs.values()} == {JOB}
    assert {e["TORCHELASTIC_MAX_RESTARTS"] for e in envs.values()} == {"3"}
    # The pod named in PET_RDZV_ENDPOINT hosts the rendezvous.
    assert "hosting the rendezvous" in r1.err and "hosting the rendezvous" not in r0.err


def test_command_line_wins_over_the_operator(pods, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    (master, a), (pod1, b) = pods.names.items()
    cmd = ["--nproc-per-node=1", worker, "env", str(out / "e")]
    rw = pods(pod1, b, operator_static_env(1, 2, 2, 23457), cmd)
    rm = pods(master, a, operator_static_env(0, 2, 2, 23457), cmd)
    assert rm.wait() == 0, rm.err
    assert rw.wait() == 0, rw.err
    envs = read_envs(out)
    assert sorted(envs) == [0, 1]
    assert {e["WORLD_SIZE"] for e in envs.values()} == {"2"}
