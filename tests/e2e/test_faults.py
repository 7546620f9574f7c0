"""Fault injection: each case breaks something and asserts what trainrun does about it.

docs/reliability.md lists these cases with the ones covered in test_supervision.py,
test_output.py and test_multinode.py. Cases that need root (mounts, network namespaces) skip
with the reason where that is not permitted.
"""
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import (TRAINRUN, alive, cgroup_directory, dynamic, read_pids, run, sanitized,
                      start, wait_for, wait_for_pids)
from ports import free_port


def rank_dir(log_dir, attempt=0, local_rank=0):
    (run_dir,) = os.listdir(log_dir)
    return os.path.join(log_dir, run_dir, f"attempt_{attempt}", str(local_rank))


def stopped_within(proc, seconds):
    """Waits for `proc`; returns (exit code, elapsed seconds)."""
    t0 = time.monotonic()
    code = proc.wait(timeout=seconds)
    return code, time.monotonic() - t0


# --- Workers that die ---------------------------------------------------------------------

@pytest.mark.parametrize("action,sig", [("segv", signal.SIGSEGV), ("abort", signal.SIGABRT)])
def test_worker_crash_stops_the_group_and_names_the_signal(worker, tmp_path, action, sig):
    pids = tmp_path / "pids"
    # An ASan-built worker would turn the SEGV into a report and exit 1: let the signal through.
    env = {"ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":handle_segv=0:handle_abort=0"}
    r = run(["--nproc-per-node=3", worker, "pidfile", str(pids), "wait-lines", str(pids), "3",
             "rank-exit", "0", "0", "rank-exit", "2", "0", action], timeout=60, env=env)
    assert r.returncode == 128 + sig, r.stderr
    name = signal.Signals(sig).name
    assert f"Signal {int(sig)} ({name}) received by PID" in r.stderr
    assert "rank      : 1 (local_rank: 1)" in r.stderr
    for pid in read_pids(pids):
        assert not alive(pid)


# --- Workers that misbehave without dying --------------------------------------------------

class Drain(threading.Thread):
    """Reads a pipe to the end, counting bytes and checking every line's prefix."""

    def __init__(self, pipe, prefixes):
        super().__init__(daemon=True)
        self.pipe, self.prefixes = pipe, prefixes
        self.bytes = 0
        self.bad_lines = []

    def run(self):
        partial = b""
        while True:
            chunk = self.pipe.read1(1 << 16)
            if not chunk:
                break
            self.bytes += len(chunk)
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for line in lines:
                if not line.startswith(self.prefixes) and len(self.bad_lines) < 5:
                    self.bad_lines.append(line[:80])


def peak_rss_kib(pid, until):
    peak = 0
    while not until():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        peak = max(peak, int(line.split()[1]))
        except OSError:
            break
        time.sleep(0.05)
    return peak


def test_flooding_worker_neither_delays_the_stop_nor_grows_the_launcher(worker, tmp_path):
    logs = tmp_path / "logs"
    # The same launcher with quiet workers: the flood may add buffers, not grow with the output
    # (sanitizer builds start much bigger, hence a baseline rather than a fixed figure).
    idle = start(["--nproc-per-node=2", "--tee=3", f"--log-dir={tmp_path / 'idle'}", worker,
                  "sleep", "1"], stdout=subprocess.DEVNULL)
    baseline = peak_rss_kib(idle.pid, lambda: idle.poll() is not None)
    idle.wait(timeout=30)
    # Rank 0 prints 50 MB as fast as it can; rank 1 is done at once.
    p = start(["--nproc-per-node=2", "--tee=3", f"--log-dir={logs}", "--shutdown-timeout=2",
               worker, "rank-stamp-exit", "1", str(tmp_path / "stamp"), "0",
               "spew", "500000", "99"],
              stdout=subprocess.PIPE, stderr=open(tmp_path / "err", "w"))
    drain = Drain(p.stdout, (b"[default0]:", b"[default1]:"))
    drain.start()
    rss = peak_rss_kib(p.pid, lambda: p.poll() is not None)
    code, elapsed = stopped_within(p, 60)
    drain.join(10)
    assert code == 0, (tmp_path / "err").read_text()
    assert drain.bad_lines == []
    assert drain.bytes > 0
    # What the code bounds is its queues (4 MiB of console lines, a pipe's worth per worker); RSS
    # shows it only without a sanitizer, whose allocator keeps freed memory in quarantine.
    if not sanitized():
        assert rss < baseline + 32 * 1024, \
            f"launcher RSS peaked at {rss} KiB copying a flood, {baseline} KiB idle"
    size = os.path.getsize(os.path.join(rank_dir(logs), "stdout.log"))
    assert size == 500000 * 100


def test_flood_with_a_failure_stops_promptly(worker, tmp_path):
    logs = tmp_path / "logs"
    stamp = tmp_path / "stamp"
    p = start(["--nproc-per-node=2", "--tee=3", f"--log-dir={logs}", "--shutdown-timeout=2",
               worker, "rank-stamp-exit", "1", str(stamp), "3",
               "spew", "100000000", "99", "sleep", "600"],
              stdout=subprocess.PIPE, stderr=open(tmp_path / "err", "w"))
    drain = Drain(p.stdout, (b"[default0]:", b"[default1]:"))
    drain.start()
    # Bounded far below what the spewing worker would take on its own (10 GB, then 600 s).
    code, _ = stopped_within(p, 120)
    drain.join(10)
    assert code == 3, (tmp_path / "err").read_text()
    assert drain.bad_lines == []
    assert "exitcode  : 3" in (tmp_path / "err").read_text()


def test_console_nobody_reads_does_not_wedge_the_stop(worker, tmp_path):
    """trainrun's stdout is a pipe whose reader never reads: the workers block on it, yet a stop
    signal still ends the job, after a bounded wait for the console that is then reported."""
    logs = tmp_path / "logs"
    r, w = os.pipe()
    try:
        p = start(["--nproc-per-node=2", "--tee=3", f"--log-dir={logs}", "--shutdown-timeout=1",
                   worker, "rank-exit", "1", "0", "spew", "100000", "99", "sleep", "60",
                   ],
                  stdout=w, stderr=open(tmp_path / "err", "w"))
        os.close(w)
        w = -1
        # Rank 0 floods until the pipe is full and then sleeps; now stop the job by signal.
        time.sleep(2)
        p.send_signal(signal.SIGTERM)
        try:
            code, _ = stopped_within(p, 20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            pytest.fail("trainrun wedged writing to a console that is not read")
        assert code == 128 + signal.SIGTERM
        err = (tmp_path / "err").read_text()
        assert "the console has taken no output for 5 s" in err, err
        # Rank 0 was held back by the console, not dropping its output: its log is short.
        assert os.path.getsize(os.path.join(rank_dir(logs), "stdout.log")) < 100000 * 100
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_fork_happy_worker_leaves_nothing_when_the_job_fails(worker, tmp_path):
    grand = tmp_path / "grand"
    forks = []
    for mode in ["plain", "ignore-term", "setsid"] * 16 + ["plain", "plain"]:  # 50 children
        forks += ["grandchild", str(grand), mode]
    r = run(["--nproc-per-node=2", "--shutdown-timeout=1", worker, "rank-exit", "0", "0",
             *forks, "wait-lines", str(grand), "50", "exit", "4"], timeout=60)
    assert r.returncode == 4, r.stderr
    children = read_pids(grand)
    assert len(children) == 50
    assert wait_for(lambda: not any(alive(x) for x in children), 2.0), \
        [x for x in children if alive(x)]


def test_fork_happy_worker_and_kill_9_of_trainrun_leave_no_survivors(worker, tmp_path):
    grand = tmp_path / "grand"
    forks = []
    for mode in ["plain", "ignore-term"] * 25:
        forks += ["grandchild", str(grand), mode]
    p = start(["--nproc-per-node=1", worker, *forks, "sleep", "60"])
    children = wait_for_pids(grand, 50)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert wait_for(lambda: not any(alive(x) for x in children), 1.0), \
        [x for x in children if alive(x)]


# --- The launcher's own environment ---------------------------------------------------------

def test_trainrun_with_its_stdout_closed(tmp_path):
    logs = tmp_path / "logs"
    probe = tmp_path / "probe.sh"
    seen = tmp_path / "seen"
    # The worker records what its stdout is, then prints (which may fail) and exits 0.
    probe.write_text(f"#!/bin/sh\n(readlink /proc/$$/fd/1 || echo closed) > {seen}.$LOCAL_RANK\n"
                     "echo hello\nexit 0\n")
    probe.chmod(0o755)
    closed = ["sh", "-c", 'exec "$0" "$@" >&-', TRAINRUN, "--nproc-per-node=2"]

    r = subprocess.run(closed + [str(probe)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "trainrun:" not in r.stderr  # the workers' own "echo: I/O error" lines are theirs
    for rank in (0, 1):
        # Closed or /dev/null: never a pipe, socket or event fd the launcher opened.
        target = (tmp_path / f"seen.{rank}").read_text().strip()
        assert target in ("closed", "/dev/null"), target

    r = subprocess.run(closed + ["--tee=3", f"--log-dir={logs}", str(probe)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "internal error" not in r.stderr
    for rank in (0, 1):
        with open(rank_dir(logs, 0, rank) + "/stdout.log") as f:
            assert f.read() == "hello\n"


def test_trainrun_with_its_stdout_closed_still_has_a_watchdog(worker, tmp_path):
    pids = tmp_path / "pids"
    p = subprocess.Popen(["sh", "-c", 'exec "$0" "$@" >&-', TRAINRUN, "--nproc-per-node=2",
                          worker, "pidfile", str(pids), "sleep", "60"])
    workers = wait_for_pids(pids, 2)
    with open(f"/proc/{workers[0]}/cgroup") as f:
        job_cgroup = cgroup_directory(f.read())
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert wait_for(lambda: not any(alive(x) for x in workers), 1.0), \
        [x for x in workers if alive(x)]
    # The watchdog itself did it (the workers' PDEATHSIG alone would too): the job's cgroup, where
    # there is one, is gone.
    if job_cgroup is not None and "/trainrun-" in job_cgroup:
        assert wait_for(lambda: not os.path.exists(job_cgroup), 10.0), job_cgroup


# --- Log directory on a broken filesystem ---------------------------------------------------

@pytest.fixture
def mount_tmpfs(tmp_path):
    """mount_tmpfs(name, options) mounts a tmpfs under tmp_path; unmounted afterwards."""
    mounted = []

    def mount(name, options):
        target = tmp_path / name
        target.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'not root'})")
        mounted.append(target)
        return target

    yield mount
    for target in mounted:
        subprocess.run(["umount", "-l", str(target)], capture_output=True)


def fill(directory):
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while os.write(fd, b"\0" * 4096) > 0:
            pass
    except OSError:
        pass
    finally:
        os.close(fd)


def test_log_dir_on_a_full_filesystem_is_reported_and_the_job_finishes(worker, mount_tmpfs):
    full = mount_tmpfs("full", "size=256k")
    fill(full)
    r = run(["--nproc-per-node=2", "--tee=3", f"--log-dir={full}/logs", worker, "spew", "1000",
             "99", "exit", "0"], timeout=120)
    if r.returncode == 1:
        # The tree itself could not be made: one clear line, nothing started.
        assert "No space left on device" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
        return
    # The workers ran: the console still got every line, and the lost log is named.
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2000 and set(l[:11] for l in lines) == {"[default0]:", "[default1]:"}
    assert "No space left on device" in r.stderr, r.stderr
    assert "stdout.log" in r.stderr


@pytest.mark.parametrize("language", ["c++", "python"])
def test_redirected_output_on_a_full_filesystem_goes_to_the_console(worker, mount_tmpfs,
                                                                    tmp_path, language):
    # Without --tee the log file is the only place the output goes: a C++ worker ignores the
    # failed writes (exit 0, output gone), a Python one dies of them (its traceback gone too).
    full = mount_tmpfs("full", "size=256k")
    fill(full)
    command = [worker, "spew", "1000", "99", "exit", "0"]
    if language == "python":
        command = [str(tmp_path / "spew.py")]
        (tmp_path / "spew.py").write_text("for i in range(1000):\n    print('x' * 99)\n")
    r = run(["--nproc-per-node=2", "--redirects=3", f"--log-dir={full}/logs", *command],
            timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2000 and set(l[:11] for l in lines) == {"[default0]:", "[default1]:"}
    said = [l for l in r.stderr.splitlines() if "No space left on device" in l]
    assert len(said) == 2 and all("/stdout.log: " in l for l in said), r.stderr


def test_log_dir_on_a_read_only_filesystem_is_a_clear_error(worker, mount_tmpfs):
    ro = mount_tmpfs("ro", "ro,size=64k")
    r = run(["--redirects=3", f"--log-dir={ro}/logs", worker, "exit", "0"], timeout=60)
    assert r.returncode == 1
    assert "cannot create log directory" in r.stderr and "Read-only file system" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def pids_hierarchy():
    """The mount point of a cgroup hierarchy with the pids controller where a child cgroup can be
    given a pids.max: cgroup v2 with pids delegated by its root, else cgroup v1's pids."""
    with open("/proc/self/mountinfo") as f:
        mounts = [line.split(" - ") for line in f if " - " in line]
    for fields, kind in mounts:
        if kind.startswith("cgroup2 "):
            mount_point = fields.split()[4]
            try:
                with open(os.path.join(mount_point, "cgroup.subtree_control")) as f:
                    if "pids" in f.read().split():
                        return mount_point
            except OSError:
                pass
    for fields, kind in mounts:
        if kind.startswith("cgroup ") and "pids" in kind.split()[2].split(","):
            return fields.split()[4]
    return None


@pytest.fixture
def pids_cgroup():
    """pids_cgroup(limit) makes a cgroup whose pids.max is `limit` and returns its cgroup.procs;
    what is still in it at the end of the test is killed and the cgroup removed."""
    made = []

    def make(limit):
        mount_point = pids_hierarchy()
        if os.geteuid() != 0 or mount_point is None:
            pytest.skip("needs root and a writable cgroup with the pids controller")
        path = os.path.join(mount_point, f"trainrun-test-pids-{os.getpid()}")
        try:
            os.mkdir(path)
        except OSError as e:
            pytest.skip(f"cannot make a cgroup under {mount_point}: {e.strerror}")
        made.append(path)
        with open(os.path.join(path, "pids.max"), "w") as f:
            f.write(str(limit))
        return os.path.join(path, "cgroup.procs")

    yield make

    def removed(path):
        # The job's own cgroup, where trainrun made one (cgroup v2), is below it.
        for directory, _, _ in os.walk(path, topdown=False):
            try:
                with open(os.path.join(directory, "cgroup.procs")) as f:
                    for pid in f.read().split():
                        os.kill(int(pid), signal.SIGKILL)
                os.rmdir(directory)
            except OSError:
                pass
        return not os.path.exists(path)

    for path in made:
        wait_for(lambda: removed(path), 10.0, 0.05)


def test_more_workers_than_a_pids_cgroup_allows_is_a_failed_start_that_leaves_nothing(
        worker, tmp_path, pids_cgroup):
    # Six tasks: trainrun, its watchdog and the resolver thread of the rendezvous it hosts, then
    # three workers; the fourth cannot be forked. The launcher once hung here, in asio's system
    # executor: a probe socket started a pool of threads, and one that could not start left the
    # pool's constructor joining the others forever.
    procs = pids_cgroup(6)
    pids = tmp_path / "pids"

    def into_the_cgroup():
        with open(procs, "w") as f:
            f.write("0")

    r = run([*dynamic(free_port(), 1, 6), worker, "pidfile", str(pids), "sleep", "60"],
            timeout=60, preexec_fn=into_the_cgroup)
    assert r.returncode == 1, r.stderr
    said = [l for l in r.stderr.splitlines() if l.startswith("trainrun: cannot start worker ")]
    assert len(said) == 1, r.stderr
    assert "Resource temporarily unavailable" in said[0] and "pids.max 6 (" in said[0], said[0]
    started = read_pids(pids)
    assert wait_for(lambda: not any(alive(x) for x in started), 10.0), \
        [x for x in started if alive(x)]

    def members():
        with open(procs) as f:
            return f.read().split()
    assert wait_for(lambda: members() == [], 10.0), members()


# --- Multi-node: the rendezvous host and the network ----------------------------------------

HEARTBEAT = "heartbeat_timeout=2,keep_alive_interval=0.5"


def test_rendezvous_host_killed_stops_the_other_agent_with_a_clear_message(agents, worker,
                                                                         tmp_path):
    port = free_port()
    pids = tmp_path / "pids"
    endpoint = f"127.0.0.1:{port}"
    cmd = [worker, "pidfile", str(pids), "sleep", "600"]
    host = agents("host", [*dynamic(endpoint, 2, 1, f"--rdzv-conf={HEARTBEAT},is_host=1",
                                    run_id="faults"), *cmd])
    # is_host=0: started at the same moment, it must not take the local endpoint first.
    other = agents("other", [*dynamic(endpoint, 2, 1, f"--rdzv-conf={HEARTBEAT},is_host=0",
                                      "--shutdown-timeout=1", run_id="faults"), *cmd])
    workers = wait_for_pids(pids, 2, timeout=30)
    host.proc.kill()
    host.proc.wait()
    # Bounded far below the workers' 600 s: the stop comes from the lost server, not from them.
    code, _ = stopped_within(other.proc, 120)
    assert code != 0
    assert f"lost the rendezvous server at {endpoint}" in other.err, other.err
    assert wait_for(lambda: not any(alive(x) for x in workers), 30.0)


def test_network_partition_stops_both_sides_within_the_heartbeat_timeout(agents, worker,
                                                                        tmp_path, netns_pair):
    a, b = netns_pair.ns
    pids = tmp_path / "pids"
    endpoint = f"{a.addr}:29411"
    cmd = [worker, "pidfile", str(pids), "sleep", "600"]
    host = agents("host", [*dynamic(endpoint, 2, 1, f"--rdzv-conf={HEARTBEAT},is_host=1",
                                    f"--local-addr={a.addr}", "--shutdown-timeout=1",
                                    run_id="faults"), *cmd],
                  netns=a.name)
    other = agents("other", [*dynamic(endpoint, 2, 1, f"--rdzv-conf={HEARTBEAT}",
                                      f"--local-addr={b.addr}", "--shutdown-timeout=1",
                                      run_id="faults"), *cmd],
                   netns=b.name)
    workers = wait_for_pids(pids, 2, timeout=30)
    # B's end goes down: nothing crosses and nobody is told (no RST, no FIN); A keeps its
    # address, so the host's own agent still reaches its server.
    netns_pair.sh("-n", b.name, "link", "set", b.veth, "down")
    # Bounded far below what TCP alone would take to notice (minutes) and the workers' 600 s:
    # each side stops by the heartbeat timeout, which the messages name.
    other_code, _ = stopped_within(other.proc, 120)
    host_code = host.proc.wait(timeout=120)
    assert host_code != 0 and other_code != 0, (host.err, other.err)
    assert "lost: no message for 2 s (heartbeat timeout)" in host.err, host.err
    assert f"lost the rendezvous server at {endpoint}" in other.err, other.err
    assert wait_for(lambda: not any(alive(x) for x in workers), 30.0)
