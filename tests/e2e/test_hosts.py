"""One job on two hosts from one command (--hosts), over real ssh: Debian's sshd runs in each of
two network namespaces, with a key this test makes (needs root, `ip netns` and openssh-server)."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import IPTABLES, TRAINRUN, alive, drop_ephemeral_ports, read_envs, read_pids, run, wait_for
from agents import ip_binary

SSHD = "/usr/sbin/sshd"
JOIN = "--rdzv-conf=join_timeout=60"


class Hosts:
    """sshd on port 22 of each namespace of `pair`, taking `key` for root; ssh_words() is the
    client command that reaches them."""

    def __init__(self, pair, tmp):
        self.pair, self.tmp = pair, tmp
        self.key = tmp / "key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)],
                       check=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "hostkey")],
                       check=True)
        (tmp / "authorized_keys").write_text((tmp / "key.pub").read_text())
        self.remote_tmp = tmp / "remote_tmp"
        self.remote_tmp.mkdir(exist_ok=True)
        # sshd refuses to start without its privilege separation directory.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        self.daemons = [self.sshd(ns) for ns in pair.ns]
        for ns in pair.ns:
            self.wait_up(ns)

    def sshd(self, ns, wrap=()):
        tmp = self.tmp
        conf = tmp / f"sshd_{ns.addr}.conf"
        conf.write_text("\n".join([
            "Port 22", f"ListenAddress {ns.addr}", f"HostKey {tmp / 'hostkey'}",
            f"AuthorizedKeysFile {tmp / 'authorized_keys'}", f"PidFile {tmp}/sshd_{ns.addr}.pid",
            "UsePAM no", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "StrictModes no",
            # The agents it starts keep their files in the test's directory, as the test does.
            f"SetEnv TMPDIR={self.remote_tmp}", ""]))
        log = open(tmp / f"sshd_{ns.addr}.log", "w")
        return subprocess.Popen([ip_binary(), "netns", "exec", ns.name, *wrap, SSHD, "-D", "-e",
                                 "-f", str(conf)], stdout=log, stderr=log)

    def wait_up(self, ns):
        assert wait_for(lambda: self.ssh(ns, "true", check=False).returncode == 0, 30), \
            (self.tmp / f"sshd_{ns.addr}.log").read_text()

    def hide(self, ns, directory):
        """Restarts ns's sshd in a mount namespace of its own where `directory` is an empty
        tmpfs: a host on which nothing is installed there."""
        i = self.pair.ns.index(ns)
        self.daemons[i].terminate()
        self.daemons[i].wait(10)
        # unshare and sh exec: the Popen's pid stays the listener's.
        self.daemons[i] = self.sshd(ns, ["unshare", "--mount", "--propagation", "private", "sh",
                                         "-c", 'mount -t tmpfs hidden "$1" && shift && exec "$@"',
                                         "sh", str(directory)])
        self.wait_up(ns)

    def ssh_words(self, key=None):
        return ["ssh", "-F", "/dev/null", "-i", str(key or self.key), "-o", "IdentitiesOnly=yes",
                "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR"]

    def ssh(self, ns, command, check=True, **kw):
        """`command` on ns's host, over ssh from ns itself."""
        return subprocess.run([ip_binary(), "netns", "exec", ns.name, *self.ssh_words(),
                               ns.addr, command], capture_output=True, text=True, timeout=60,
                              check=check, **kw)

    def launch(self, args, ns=None, ssh=None, **kw):
        """`trainrun ARGS` on the first namespace's host, as a user would type it there."""
        ns = ns or self.pair.ns[0]
        return subprocess.Popen([ip_binary(), "netns", "exec", ns.name, TRAINRUN,
                                 f"--ssh={' '.join(ssh or self.ssh_words())}", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)

    def job_processes(self):
        """Every process in the two namespaces but the sshd listeners."""
        listeners = {str(p.pid) for p in self.daemons}
        for p in self.daemons:
            listeners.update(subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True,
                                            text=True).stdout.split())
        pids = []
        for ns in self.pair.ns:
            out = subprocess.run([ip_binary(), "netns", "pids", ns.name], capture_output=True,
                                 text=True).stdout.split()
            pids += [p for p in out if p not in listeners]
        return pids

    def stop(self):
        for p in self.daemons:
            p.terminate()
            p.wait(10)


@pytest.fixture
def hosts(netns_pair, tmp_path):
    if not os.access(SSHD, os.X_OK):
        pytest.skip("openssh-server is not installed (scripts/setup.sh)")
    h = Hosts(netns_pair, tmp_path)
    yield h
    h.stop()


def no_job_left(hosts):
    assert wait_for(lambda: not hosts.job_processes(), 60, 0.2), \
        f"left running: {[open(f'/proc/{p}/cmdline').read() for p in hosts.job_processes()]}"


def host_list(pair, slots):
    return ",".join(f"{ns.addr}:{slots}" for ns in pair.ns)


def test_one_command_runs_the_job_a_by_hand_launch_runs(hosts, netns_pair, worker, tmp_path):
    a, b = netns_pair.ns
    ours, by_hand = tmp_path / "ours", tmp_path / "by_hand"
    ours.mkdir()
    by_hand.mkdir()
    job = hosts.launch([f"--hosts={host_list(netns_pair, 2)}", "-x", "FORWARDED=yes", JOIN,
                        worker, "env", str(ours / "e")], cwd=tmp_path)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    # The same job typed on each node, logged in over ssh.
    common = (f"cd {tmp_path} && FORWARDED=yes {TRAINRUN} --nnodes=2 --nproc-per-node=2 "
              f"--master-addr={a.addr} {JOIN}")
    manual = [subprocess.Popen([ip_binary(), "netns", "exec", ns.name, *hosts.ssh_words(), ns.addr,
                                f"{common} --node-rank={i} {worker} env {by_hand / 'e'}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for i, ns in enumerate((a, b))]
    for p in manual:
        assert p.wait(120) == 0, p.stderr.read()
    ours_env, by_hand_env = read_envs(ours), read_envs(by_hand)
    assert sorted(ours_env) == [0, 1, 2, 3]
    # What differs between any two ssh logins (the client's port), between any two runs (the log
    # directory's random name in the error file's path), and `_`, which bash sets for a command
    # it runs but not for one it execs (the agent replaces the login shell).
    differs = {"SSH_CLIENT", "SSH_CONNECTION", "TORCHELASTIC_ERROR_FILE", "_"}
    for rank in range(4):
        mine = {k: v for k, v in ours_env[rank].items() if k not in differs}
        theirs = {k: v for k, v in by_hand_env[rank].items() if k not in differs}
        assert mine == theirs, (rank, set(mine.items()) ^ set(theirs.items()))
    assert ours_env[0]["FORWARDED"] == "yes"
    assert {e["GROUP_RANK"] for r, e in ours_env.items() if r < 2} == {"0"}
    # Every worker's output line came back, prefixed with its host and rank.
    assert f"starting 2 agents over ssh: {a.addr} (node rank 0), {b.addr} (node rank 1)" in err


def test_pet_variables_of_the_launching_machine_reach_every_agent(hosts, netns_pair, worker,
                                                                   tmp_path):
    # The agents' logins over ssh do not carry this machine's environment: torchrun's PET_* forms
    # of the options govern the whole job, as the same options on the command line would.
    out = tmp_path / "envs"
    out.mkdir()
    job = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", JOIN, worker, "env", str(out / "e")],
                       cwd=tmp_path, env=dict(os.environ, PET_MAX_RESTARTS="2", PET_ROLE="trainer"))
    _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    envs = read_envs(out)
    assert sorted(envs) == [0, 1]
    for env in envs.values():
        assert env["TORCHELASTIC_MAX_RESTARTS"] == "2", env
        assert env["ROLE_NAME"] == "trainer", env


def test_token_is_in_no_command_line_nor_environment(hosts, netns_pair, worker, tmp_path):
    # The ssh command is wrapped so that the test learns the token the launcher hands over.
    seen = tmp_path / "handover"
    wrapper = tmp_path / "ssh_wrapper"
    wrapper.write_text("#!/bin/sh\n{ IFS= read -r line; printf '%s\\n' \"$line\" >> "
                       f"{seen}; printf '%s\\n' \"$line\"; exec cat; }} | exec \"$@\"\n")
    wrapper.chmod(0o755)
    pids = tmp_path / "pids"
    job = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", JOIN, worker, "pidfile", str(pids),
                        "sleep", "60"], ssh=[str(wrapper), *hosts.ssh_words()], cwd=tmp_path)
    try:
        assert wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, 60), \
            job.stderr.read() if job.poll() is not None else "workers did not start"
        tokens = {json.loads(line)["token"] for line in seen.read_text().splitlines()}
        assert len(tokens) == 1 and len(next(iter(tokens))) >= 32
        token = next(iter(tokens)).encode()
        # Both namespaces share this kernel: /proc shows every process of both hosts.
        found, read = [], 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            for part in ("cmdline", "environ"):
                try:
                    with open(f"/proc/{pid}/{part}", "rb") as f:
                        text = f.read()
                except OSError:
                    continue
                read += 1
                if token in text:
                    found.append((pid, part))
        assert read > 20
        assert not found, found
    finally:
        job.send_signal(signal.SIGTERM)
        job.communicate(timeout=90)
    no_job_left(hosts)


@pytest.mark.parametrize("sig,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl_c", "sigterm"])
def test_a_stop_signal_stops_every_host(hosts, netns_pair, worker, tmp_path, sig, status):
    pids = tmp_path / "pids"
    job = hosts.launch([f"--hosts={host_list(netns_pair, 2)}", JOIN, "--shutdown-timeout=10",
                        worker, "pidfile", str(pids), "sleep", "120"], cwd=tmp_path)
    assert wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 4, 60), \
        job.stderr.read() if job.poll() is not None else "workers did not start"
    job.send_signal(sig)
    out, err = job.communicate(timeout=90)
    assert job.returncode == status, err
    assert f"received {signal.Signals(sig).name}: stopping every host" in err, err
    # The user's own stop is a stop on every node, not a node the others lost.
    assert not re.search(r"\blost\b|cannot continue", err), err
    no_job_left(hosts)


def test_a_failed_preflight_ends_the_command_with_its_line_once(hosts, netns_pair, worker,
                                                                 tmp_path):
    a, b = drop_ephemeral_ports(netns_pair)
    job = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", JOIN, worker, "pidfile",
                        str(tmp_path / "pids"), "sleep", "60"], cwd=tmp_path)
    out, err = job.communicate(timeout=90)
    assert job.returncode == 1, err
    # Both agents end with the line; the one console shows it once.
    assert err.count("preflight failed on") == 1, err
    assert re.search(rf"preflight failed on .*\(group rank 1, {re.escape(b.addr)}\) cannot open a "
                     rf"TCP connection to .* at {re.escape(a.addr)}:\d+ \(MASTER_ADDR\): no "
                     rf"answer", err), err
    no_job_left(hosts)


def test_a_host_without_trainrun_is_named_and_the_others_stop(hosts, netns_pair, worker,
                                                               tmp_path):
    a, b = netns_pair.ns
    # On b, trainrun's directory is empty: the path the launcher runs there does not exist.
    hosts.hide(b, os.path.dirname(os.path.realpath(TRAINRUN)))
    job = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", worker, "sleep", "60"],
                       cwd=tmp_path)
    out, err = job.communicate(timeout=90)
    assert job.returncode == 1, err
    exe = os.path.realpath(TRAINRUN)
    assert re.search(rf"trainrun: {re.escape(b.addr)}: cannot start its agent \(ssh exit 127\): "
                     rf".*{re.escape(exe)}: No such file or directory; is trainrun installed at "
                     rf"{re.escape(exe)} on {re.escape(b.addr)}\?", err), err
    assert "trainrun: stopping the agents on the other hosts" in err, err
    no_job_left(hosts)


def launcher_ssh(job, ns):
    """The launcher's own ssh to ns's host: its child (ip netns exec execs trainrun) with that
    host in its command line."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline") as f:
                words = f.read().split("\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == job.pid and ns.addr in words:
            found.append(int(pid))
    return found


def test_a_lost_ssh_connection_is_that_node_lost(hosts, netns_pair, worker, tmp_path):
    a, b = netns_pair.ns
    pids = tmp_path / "pids"
    job = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", JOIN, "--shutdown-timeout=10",
                        worker, "pidfile", str(pids), "sleep", "120"], cwd=tmp_path)
    assert wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, 60), \
        job.stderr.read() if job.poll() is not None else "workers did not start"

    (ssh,) = launcher_ssh(job, b)
    os.kill(ssh, signal.SIGKILL)
    out, err = job.communicate(timeout=120)
    assert f"trainrun: {b.addr}: ssh connection lost" in err, err
    assert "node rank 1 is lost to the job" in err, err
    # The static rendezvous ends the job without node 1: node 0's agent's status is the job's.
    assert "a static job cannot continue without it" in err, err
    assert job.returncode == 1, err
    no_job_left(hosts)


def partition(netns_pair):
    """From now on every packet between the two namespaces is dropped (iptables in b's): a cable
    pulled, with no connection closed. Skips where iptables cannot do that here."""
    if IPTABLES is None:
        pytest.skip("iptables is not installed (scripts/setup.sh)")
    a, b = netns_pair.ns
    for chain, side in (("INPUT", "-s"), ("OUTPUT", "-d")):
        r = subprocess.run([ip_binary(), "netns", "exec", b.name, IPTABLES, "-A", chain, side,
                            a.addr, "-j", "DROP"], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"iptables does not work in a network namespace here: {r.stderr.strip()}")


def namespace_pids(ns):
    r = subprocess.run([ip_binary(), "netns", "pids", ns.name], capture_output=True, text=True)
    return {int(p) for p in r.stdout.split()}


def test_a_host_cut_off_from_the_launcher_stops_its_job(hosts, netns_pair, worker, tmp_path):
    a, b = netns_pair.ns
    pids = tmp_path / "pids"
    # A rendezvous that would wait ten minutes for a silent node: only the launcher's heartbeat
    # can end b's part of the job.
    # ssh at its default log level, which names the timeout.
    ssh = hosts.ssh_words()
    del ssh[ssh.index("LogLevel=ERROR") - 1:ssh.index("LogLevel=ERROR") + 1]
    job = hosts.launch([f"--hosts={host_list(netns_pair, 1)}",
                        "--rdzv-conf=join_timeout=60,heartbeat_timeout=600",
                        "--shutdown-timeout=5", worker, "pidfile", str(pids), "sleep", "300"],
                       ssh=ssh, cwd=tmp_path)
    try:
        assert wait_for(lambda: len(read_pids(pids)) == 2, 60), \
            job.stderr.read() if job.poll() is not None else "workers did not start"
        on_b = namespace_pids(b)
        agent = [p for p in on_b if "--remote-agent=" in open(f"/proc/{p}/cmdline").read()]
        workers_b = set(read_pids(pids)) & on_b
        assert agent and len(workers_b) == 1, (agent, workers_b)
        of_b = set(agent) | workers_b
        # The launcher's channel is the agent's: no worker can take a heartbeat from it.
        assert all(os.readlink(f"/proc/{w}/fd/0") == "/dev/null" for w in read_pids(pids))
        partition(netns_pair)
        # Within the heartbeat timeout (30 s) and the shutdown grace.
        assert wait_for(lambda: not any(alive(p) for p in of_b), 90, 0.5), \
            f"still running on {b.addr} without its launcher: {[p for p in of_b if alive(p)]}"
        # The launcher's ssh gives up on the silent connection (ServerAliveInterval) with exit
        # 255, ssh's own status for a lost connection.
        assert wait_for(lambda: not launcher_ssh(job, b), 90, 0.5)
    finally:
        job.send_signal(signal.SIGTERM)
        out, err = job.communicate(timeout=90)
    assert re.search(rf"trainrun: {re.escape(b.addr)}: ssh connection lost \(ssh exit 255: "
                     rf"Timeout, server {re.escape(b.addr)} not responding\.\); node rank 1 is "
                     rf"lost to the job", err), err


def test_a_second_job_on_the_same_hosts_is_told_of_the_port_clash(hosts, netns_pair, worker,
                                                                  tmp_path):
    a, b = netns_pair.ns
    pids = tmp_path / "pids"
    first = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", JOIN, worker, "pidfile",
                          str(pids), "sleep", "120"], cwd=tmp_path)
    try:
        assert wait_for(lambda: len(read_pids(pids)) == 2, 60), \
            first.stderr.read() if first.poll() is not None else "workers did not start"
        second = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", JOIN, worker, "sleep", "60"],
                              cwd=tmp_path)
        _, err = second.communicate(timeout=90)
        assert second.returncode == 1, err
        assert (f"trainrun: another job's rendezvous already listens on port 29501 on {a.addr}: "
                "give this job another --master-port (the rendezvous takes MASTER_PORT + 1) or "
                "--rdzv-conf rdzv_port=N, or wait for that job to end\n") in err, err
        assert "different tokens" not in err, err
        # The first job runs on.
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=90)
    no_job_left(hosts)


def test_a_host_that_is_down_is_named_and_the_others_stop(hosts, netns_pair, worker, tmp_path):
    a, _ = netns_pair.ns
    down = a.addr.rsplit(".", 1)[0] + ".77"  # off the namespaces' /30: no route there
    # The default join timeout (600 s): the started agent must be stopped, not time out.
    job = hosts.launch([f"--hosts={a.addr}:1,{down}:1", worker, "sleep", "60"], cwd=tmp_path)
    out, err = job.communicate(timeout=90)
    assert job.returncode == 1, err
    assert re.search(rf"trainrun: {re.escape(down)}: cannot start its agent \(ssh exit 255\): "
                     rf"ssh: connect to host {re.escape(down)} port 22: Network is unreachable\n",
                     err), err
    no_job_left(hosts)


def test_a_refused_key_is_named(hosts, netns_pair, worker, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    job = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", JOIN, worker, "sleep", "60"],
                       ssh=hosts.ssh_words(other), cwd=tmp_path)
    out, err = job.communicate(timeout=90)
    assert job.returncode == 1, err
    assert "cannot start its agent (ssh exit 255): root@" in err and \
        "Permission denied (publickey)" in err, err
    no_job_left(hosts)


def test_dedup_collapses_a_warning_all_ranks_print(hosts, netns_pair, tmp_path):
    barrier = tmp_path / "barrier"
    script = tmp_path / "warn.sh"
    # Every worker prints its own line, waits for the other seven, then the same warning.
    script.write_text(f"""#!/bin/sh
echo "start $RANK"
echo "$RANK" >> {barrier}
while [ "$(wc -l < {barrier})" -lt 8 ]; do sleep 0.05; done
echo "UserWarning: the same for everyone" >&2
echo "end $RANK"
""")
    script.chmod(0o755)
    logs = tmp_path / "logs"
    job = hosts.launch([f"--hosts={host_list(netns_pair, 4)}", "--dedup", JOIN,
                        f"--log-dir={logs}", "--no-python", str(script)], cwd=tmp_path)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    a, b = netns_pair.ns
    assert err.count("UserWarning") == 1, err
    assert "[0-7]:UserWarning: the same for everyone\n" in err, err
    expected = {f"[{(a if r < 4 else b).addr}:{r}]:{word} {r}" for r in range(8)
                for word in ("start", "end")}
    assert set(out.splitlines()) == expected, out
    # Each rank's lines in order.
    for r in range(8):
        host = (a if r < 4 else b).addr
        assert out.index(f"[{host}:{r}]:start {r}") < out.index(f"[{host}:{r}]:end {r}")
    # The per-rank files keep every line as the worker wrote it.
    errs = [p for p in logs.rglob("stderr.log")]
    assert len(errs) == 8
    assert all(p.read_text() == "UserWarning: the same for everyone\n" for p in errs)


SLURM_STEP = {"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "2",
              "SLURM_STEP_NODELIST": "n[0-1]", "SLURM_JOB_NODELIST": "n[0-1]"}


@pytest.mark.parametrize("args,env,needle", [
    (["--hostfile=HF"], {}, "HF: line 3: cannot read 'n2 slots=four'; use HOST slots=N"),
    (["--hosts=n0:2,n1:2,n0:2"], {}, "--hosts=n0:2,n1:2,n0:2: n0 is listed twice"),
    (["--hosts=n0:0"], {}, "n0 has 0 slots"),
    (["--hosts="], {}, "--hosts=: empty; give the hosts to run on"),
    (["--hosts=n0,n1", "--node-rank=1"], {}, "--node-rank=1: --hosts gives every host its node"),
    (["--hosts=n0,n1"], SLURM_STEP, "--hosts=n0,n1: inside a Slurm job step srun starts"),
    # The handover is JSON text: bytes that are not UTF-8 (a str's surrogate escapes) cannot go.
    (["--hosts=n0,n1", "-x", "A=x\udcff"], {}, "-x A: byte 0xFF of the value is not UTF-8;"),
    (["--hosts=n0,n1", "-x", "B"], {"B": "\udcc3"}, "-x B: byte 0xC3 of the value is not UTF-8;"),
])
def test_bad_host_lists_are_one_line_and_exit_2(tmp_path, args, env, needle):
    hostfile = tmp_path / "HF"
    hostfile.write_text("n0 slots=2\n# n1 is down\nn2 slots=four\n")
    r = run([a.replace("HF", str(hostfile)) for a in args] + ["x"], env=env, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainrun: "), r.stderr
    assert needle in lines[0], r.stderr


def test_a_remote_agent_of_another_version_names_both(tmp_path):
    r = run(["--remote-agent=0.0.0-other", "x"], stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert "this host runs trainrun " in r.stderr
    assert "the launching machine trainrun 0.0.0-other; install the same version" in r.stderr



@pytest.mark.parametrize("stdin", ["closed", "terminal", "too_long"])
def test_a_remote_agent_without_its_handover_says_why(tmp_path, stdin):
    """The handover is read before the job and its event loop exist (it carries the token and
    the environment the command line is read with): one bounded read, each way it can go wrong
    said in one line."""
    version = run(["--version"]).stdout.split()[-1]
    opened = []
    if stdin == "closed":
        source, needle = subprocess.DEVNULL, "standard input closed before the launcher's handover"
    elif stdin == "terminal":
        leader, follower = os.openpty()
        opened += [leader, follower]
        source, needle = follower, "standard input is a terminal"
    else:
        long_line = tmp_path / "handover"
        long_line.write_bytes(b"x" * (1 << 20) + b"\n")
        source, needle = open(long_line, "rb"), "the handover on standard input is too long"
        opened.append(source)
    try:
        r = run([f"--remote-agent={version}", "x"], stdin=source)
    finally:
        for f in opened:
            f.close() if hasattr(f, "close") else os.close(f)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainrun: "), r.stderr
    assert needle in lines[0], r.stderr

WHICH_PYTHON = ("import os, sys\n"
                "open(os.path.join(sys.argv[1], os.environ['RANK']), 'w').write(sys.executable)\n")


def test_the_launchers_activated_environment_runs_the_workers_on_every_host(hosts, netns_pair,
                                                                             tmp_path):
    """An activated virtual environment does not reach the remote shells (ssh starts a fresh
    login): the launcher hands its interpreter over, and every host that has it runs it."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python3").symlink_to("/usr/bin/python3")
    script, out = tmp_path / "which.py", tmp_path / "which"
    script.write_text(WHICH_PYTHON)
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON_EXEC", "CONDA_PREFIX")}
    env.update(VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
    job = hosts.launch([f"--hosts={host_list(netns_pair, 1)}", JOIN, str(script), str(out)],
                       cwd=tmp_path, env=env)
    _, err = job.communicate(timeout=120)
    assert job.returncode == 0, err
    used = {name: (out / name).read_text() for name in os.listdir(out)}
    assert used == {"0": str(venv / "bin" / "python3"), "1": str(venv / "bin" / "python3")}, used
