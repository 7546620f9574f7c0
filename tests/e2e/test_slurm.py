"""trainrun under a real Slurm cluster on this machine (Debian's slurmctld, slurmd, munge): the
controller and node n1 in one network namespace, node n2 in another, joined by a veth pair
(netns_pair). Each daemon has its own host name (unshare --uts) and sees an /etc/hosts naming
both nodes (a private mount namespace), as on a real cluster. Needs root; a part that cannot
run here skips with the daemon's own error."""
import os
import shutil
import signal
import subprocess
import tempfile
import textwrap

import pytest

from conftest import TRAINRUN, read_envs, wait_for
from named_hosts import on_host, which, write_hosts

HERE = os.path.dirname(os.path.abspath(__file__))
ALLREDUCE = os.path.join(os.path.dirname(HERE), "python", "allreduce.py")
PYTHON = os.environ.get("PYTHON_EXEC", "python3")
NEEDED = ["munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "sinfo", "scontrol",
          "nsenter", "unshare"]


def last_error(path):
    """The last line of a daemon's log that says what went wrong, else its last line."""
    try:
        lines = [ln for ln in open(path).read().splitlines() if ln.strip()]
    except OSError:
        return f"(no log at {path})"
    errors = [ln for ln in lines if "error" in ln.lower() or "fatal" in ln.lower()]
    return (errors or lines or ["(empty log)"])[-1]


class Cluster:
    """munged on the host; slurmctld and slurmd n1 in namespace a, slurmd n2 in namespace b."""

    def __init__(self, pair, directory):
        self.pair, self.dir = pair, directory
        self.procs = {}
        # A Unix socket path must stay under 108 bytes: pytest's tmp_path may not.
        self.sock_dir = tempfile.mkdtemp(prefix="trm-", dir="/tmp")
        self.conf = directory / "slurm.conf"
        self.hosts = directory / "hosts"
        self.nodes = {"n1": pair.ns[0], "n2": pair.ns[1]}

    def wrap(self, node, command):
        """`command` inside `node`'s network namespace, host name and /etc/hosts."""
        return on_host(self.nodes[node].name, node, self.hosts, command)

    def write_config(self):
        d = self.dir
        for sub in ("state", "n1", "n2", "log"):
            (d / sub).mkdir()
        write_hosts(self.hosts, {name: ns.addr for name, ns in self.nodes.items()})
        a, b = self.pair.ns
        self.conf.write_text(textwrap.dedent(f"""\
            ClusterName=trainrun
            SlurmctldHost=n1({a.addr})
            AuthType=auth/munge
            CredType=cred/munge
            AuthInfo=socket={self.sock_dir}/munge.socket
            SlurmUser=root
            SlurmdUser=root
            StateSaveLocation={d}/state
            SlurmdSpoolDir={d}/%n
            SlurmctldPidFile={d}/slurmctld.pid
            SlurmdPidFile={d}/%n.pid
            SlurmctldLogFile={d}/log/slurmctld.log
            SlurmdLogFile={d}/log/%n.log
            ProctrackType=proctrack/linuxproc
            TaskPlugin=task/none
            JobAcctGatherType=jobacct_gather/none
            AccountingStorageType=accounting_storage/none
            SelectType=select/cons_tres
            SelectTypeParameters=CR_CPU
            SchedulerType=sched/builtin
            MpiDefault=none
            ReturnToService=2
            NodeName=n1 NodeAddr={a.addr} CPUs=2 State=UNKNOWN
            NodeName=n2 NodeAddr={b.addr} CPUs=2 State=UNKNOWN
            PartitionName=main Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
            """))

    def spawn(self, name, command):
        log = open(self.dir / "log" / f"{name}.out", "w")
        self.procs[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env())

    def env(self, extra=None):
        return dict(os.environ, SLURM_CONF=str(self.conf), **(extra or {}))

    def start(self):
        self.write_config()
        key = os.path.join(self.sock_dir, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        s = self.sock_dir
        self.spawn("munged", [which("munged"), "-F", "--force", f"--key-file={key}",
                              f"--socket={s}/munge.socket", f"--pid-file={s}/munged.pid",
                              f"--log-file={s}/munged.log", f"--seed-file={s}/munged.seed"])
        if not wait_for(lambda: os.path.exists(f"{s}/munge.socket"), 30):
            self.skip_with("munged", f"{s}/munged.log")
        self.spawn("slurmctld", self.wrap("n1", [which("slurmctld"), "-D", "-c", "-f",
                                                 str(self.conf)]))
        for node in self.nodes:
            self.spawn(node, self.wrap(node, [which("slurmd"), "-D", "-N", node, "-f",
                                              str(self.conf)]))
        if not wait_for(self.nodes_idle, 90, 0.5):
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    self.skip_with(name, self.dir / "log" / f"{name}.out")
            pytest.fail(f"Slurm nodes not idle after 90 s: {self.sinfo()}")

    def skip_with(self, daemon, log):
        pytest.skip(f"{daemon} could not start here: {last_error(log)}")

    def sinfo(self):
        r = self.run("sinfo", "-h", "-N", "-o", "%N %t", timeout=30)
        return r.stdout.strip()

    def nodes_idle(self):
        if any(p.poll() is not None for p in self.procs.values()):
            return True  # a daemon died: stop waiting, start() reports it
        return sorted(self.sinfo().splitlines()) == ["n1 idle", "n2 idle"]

    def run(self, *command, timeout=180, env=None):
        """A Slurm client command, run on n1 (the submit host)."""
        return subprocess.run(self.wrap("n1", [which(command[0]), *command[1:]]),
                              capture_output=True, text=True, timeout=timeout,
                              env=self.env(env), cwd=self.dir)

    def stop(self):
        # Jobs first (their tasks live in the namespaces, which netns_pair empties after this).
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            subprocess.run(self.wrap("n1", [which("scancel"), "--full", "--user=root"]),
                           capture_output=True, env=self.env(), timeout=30)
        for name in ["slurmctld", "n1", "n2", "munged"]:
            proc = self.procs.get(name)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        shutil.rmtree(self.sock_dir, ignore_errors=True)


@pytest.fixture
def cluster(netns_pair, tmp_path):
    missing = [n for n in NEEDED if which(n) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (Debian: slurmctld slurmd slurm-client "
                    "munge util-linux)")
    c = Cluster(netns_pair, tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def srun(cluster, *args, timeout=180, env=None):
    return cluster.run("srun", "-N2", "--ntasks-per-node=1", *args, timeout=timeout, env=env)


def test_srun_gives_trainrun_the_layout(cluster, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    r = srun(cluster, "-c", "2", TRAINRUN, worker, "env", str(out / "e"))
    assert r.returncode == 0, r.stdout + r.stderr
    envs = read_envs(out)
    assert sorted(envs) == [0, 1, 2, 3]
    for rank, e in envs.items():
        assert e["WORLD_SIZE"] == "4" and e["LOCAL_WORLD_SIZE"] == "2"
        # Node n1 (SLURM_NODEID 0) is group rank 0, with MASTER_ADDR on it.
        assert e["GROUP_RANK"] == str(rank // 2)
        assert e["MASTER_ADDR"] == "n1"
        assert e["TORCHELASTIC_RUN_ID"].endswith(".0")
    lines = [ln for ln in r.stderr.splitlines() if "from Slurm step" in ln]
    assert len(lines) == 2, r.stderr
    assert "2 nodes (SLURM_STEP_NUM_NODES=2)" in lines[0]
    assert "rendezvous host n1 (first of SLURM_STEP_NODELIST=n[1-2])" in lines[0]
    assert "2 workers per node (SLURM_CPUS_PER_TASK=2)" in lines[0]


def test_gloo_all_reduce_across_both_nodes(cluster):
    probe = subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"{PYTHON} cannot import torch: the all-reduce worker needs PyTorch")
    # Gloo finds each node's address from its host name, as on a real cluster.
    r = srun(cluster, "-c", "2", TRAINRUN, ALLREDUCE, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = sorted(ln for ln in r.stdout.splitlines() if ln.startswith("rank"))
    assert lines == [f"rank {k}/4: sum=10 expected=10" for k in range(4)], r.stdout + r.stderr


def test_explicit_options_win_over_slurm(cluster, worker, tmp_path):
    out = tmp_path / "env"
    out.mkdir()
    r = srun(cluster, TRAINRUN, "--slurm", "--nproc-per-node=1", "--master-port=23456", worker,
             "env", str(out / "e"))
    assert r.returncode == 0, r.stdout + r.stderr
    envs = read_envs(out)
    assert sorted(envs) == [0, 1]
    assert {e["MASTER_PORT"] for e in envs.values()} == {"23456"}
    assert "MASTER_PORT" not in r.stderr and "workers per node" not in r.stderr


def test_two_trainruns_on_one_node_are_refused(cluster, worker):
    r = cluster.run("srun", "-N1", "-n2", TRAINRUN, worker, "exit", "0")
    assert r.returncode != 0
    assert ("SLURM_STEP_TASKS_PER_NODE=2: srun started 2 trainrun tasks on one node; start one "
            "per node (srun --ntasks-per-node=1)") in r.stderr, r.stderr


SIGNAL_WORKER = """\
import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda *_: got.append(1))
rank = os.environ["RANK"]
open(os.path.join(sys.argv[1], "ready." + rank), "w").close()
deadline = time.monotonic() + float(sys.argv[2])
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
# Slurm's process tracking (proctrack/linuxproc here, cgroup on most clusters) signals every
# process of the step, so a worker gets USR1 from Slurm and again from trainrun: one handled, the
# other ignored, also while the interpreter shuts down (it puts SIG_DFL back for Python handlers).
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
if got:
    open(os.path.join(sys.argv[1], "usr1." + rank), "w").close()
sys.exit(0 if got else 3)
"""


def batch_script(tmp_path, directory, wait_s):
    worker = tmp_path / "signal_worker.py"
    worker.write_text(SIGNAL_WORKER)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\nexec srun -N2 --ntasks-per-node=1 -c 2 {TRAINRUN} "
                      f"{worker} {directory} {wait_s}\n")
    return script


def job_state(cluster, job):
    r = cluster.run("scontrol", "show", "job", job, timeout=30)
    for field in r.stdout.split():
        if field.startswith("JobState="):
            return field.split("=", 1)[1]
    return "?"


def submit(cluster, tmp_path, *options, wait_s):
    marks = tmp_path / "marks"
    marks.mkdir()
    script = batch_script(tmp_path, marks, wait_s)
    r = cluster.run("sbatch", "--parsable", "-N2", "--ntasks-per-node=1", "-c", "2", "-o", str(tmp_path / "job.out"), *options,
                    str(script), timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().split(";")[0], marks


def wait_done(cluster, job, timeout):
    assert wait_for(lambda: job_state(cluster, job) in ("COMPLETED", "FAILED", "CANCELLED",
                                                        "TIMEOUT"), timeout, 0.5)
    return job_state(cluster, job)


def test_scancel_signal_reaches_the_workers(cluster, tmp_path):
    job, marks = submit(cluster, tmp_path, wait_s=240)
    assert wait_for(lambda: len(list(marks.glob("ready.*"))) == 4, 120, 0.2), \
        (tmp_path / "job.out").read_text()
    r = cluster.run("scancel", "--signal=USR1", job, timeout=30)
    assert r.returncode == 0, r.stderr
    assert wait_done(cluster, job, 120) == "COMPLETED", (tmp_path / "job.out").read_text()
    assert sorted(p.name for p in marks.glob("usr1.*")) == [f"usr1.{k}" for k in range(4)]


def test_sbatch_signal_before_the_time_limit_reaches_the_workers(cluster, tmp_path):
    # USR1 60 s before a three-minute limit. Slurm may send it up to a minute early, so it comes
    # 60 to 120 s into the job: never before the workers have installed their handler (a signal
    # that came first would kill a worker, as it would under torchrun); they wait up to 4 minutes,
    # and the limit is not reached first.
    job, marks = submit(cluster, tmp_path, "--time=3", "--signal=USR1@60", wait_s=240)
    state = wait_done(cluster, job, 300)
    out = (tmp_path / "job.out").read_text()
    assert sorted(p.name for p in marks.glob("usr1.*")) == [f"usr1.{k}" for k in range(4)], out
    assert state == "COMPLETED", out


def test_host_lists_count_as_scontrol_expands_them(tmp_path):
    if which("scontrol") is None:
        pytest.skip("scontrol (Debian: slurm-client) is not installed")
    # scontrol reads a configuration but asks no daemon to expand a host list.
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=n1\nPartitionName=p Nodes=n1\n")
    for expr in ["node[01-04,07]", "gpu-a[1-2],gpu-b3", "rack[1-2]-node[1-3]", "n[8-10]",
                 "n[001-3,5]x[1-2]", "a,,b", "n[2,1,1]"]:
        r = subprocess.run([which("scontrol"), "show", "hostnames", expr], capture_output=True,
                           text=True, env=dict(os.environ, SLURM_CONF=str(conf)), timeout=30)
        assert r.returncode == 0, r.stderr
        # trainrun names the count it read when it differs from the step's node count.
        ours = subprocess.run([TRAINRUN, "--slurm", "true"], capture_output=True, text=True,
                              env=dict(os.environ, SLURM_JOB_ID="1", SLURM_STEP_ID="0",
                                       SLURM_NODEID="0", SLURM_STEP_NODELIST=expr,
                                       SLURM_STEP_NUM_NODES="999"), timeout=30)
        assert ours.returncode == 2
        assert f"names {len(r.stdout.split())} hosts, but" in ours.stderr, (expr, ours.stderr)
