"""--hang-timeout: a job that makes no progress on any node is found hung by its stacks, reported
and stopped (exit 124); a job that computes silently, or says a line now and then, is not."""
import glob
import json
import os
import re
import resource
import select
import subprocess
import sys
import time

import pytest

from conftest import PY_SPY, TRAINRUN, WORKER, dynamic, run, start

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "hang_job.py")
PYTHON = os.environ.get("PYTHON_EXEC", "") or sys.executable
HANG_EXIT = 124


def path_without_py_spy():
    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if not os.path.exists(os.path.join(d, "py-spy")))


def tools_path(with_py_spy):
    path = path_without_py_spy()
    return os.path.dirname(PY_SPY) + os.pathsep + path if with_py_spy else path


@pytest.fixture(autouse=True)
def own_runtime_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINRUN_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("PYTHON_EXEC", PYTHON)


@pytest.mark.parametrize("with_py_spy", [
    pytest.param(True, id="py-spy", marks=pytest.mark.skipif(
        not PY_SPY, reason="py-spy is not installed (scripts/setup.sh --tests)")),
    pytest.param(False, id="fallback")])
def test_a_hang_across_two_nodes_names_the_stuck_rank(netns_pair, agents, tmp_path, with_py_spy):
    a, b = netns_pair.ns
    endpoint = f"{a.addr}:29404"
    summaries = [tmp_path / "a.json", tmp_path / "b.json"]
    common = ["--rdzv-conf=join_timeout=60", "--hang-timeout=10", "--shutdown-timeout=10",
              f"--log-dir={tmp_path / 'logs'}"]
    env = {"PATH": tools_path(with_py_spy)}
    nodes = []
    for ns, summary in zip((a, b), summaries):
        nodes.append(agents(ns.name[-1], dynamic(endpoint, 2, 2, *common, f"--local-addr={ns.addr}",
                                                 f"--summary-file={summary}", run_id="hang")
                            + [JOB, "stuck", "300"],
                            env={**env, "GLOO_SOCKET_IFNAME": ns.veth}, netns=ns.name))
    # Bounded far above 10 s of silence and the two roll calls 3 s apart: no timing is asserted.
    codes = [node.wait(240) for node in nodes]
    err = nodes[0].err + nodes[1].err
    assert codes == [HANG_EXIT, HANG_EXIT], err
    # Rank 2 (node 1's local rank 0) is named: by py-spy's Python frame, or, without it, by the
    # traceback faulthandler wrote when the SIGABRT stopped it.
    assert "the job is hung" in err, err
    assert "rank 2 on " in err and "(node 1) is in " in err, err
    if with_py_spy:
        assert "(node 1) is in stuck_here() (hang_job.py:" in err, err
        assert "wait in all_reduce" in err, err
    else:
        assert "stopping the Python workers with SIGABRT" in err, err
    assert 'in stuck_here\n' in err, err  # faulthandler: File "...hang_job.py", line N in stuck_here
    hangs = [json.loads(s.read_text())["hang"] for s in summaries if s.exists()]
    found = [h for h in hangs if h]
    assert found, hangs
    assert found[0]["groups"] and os.path.exists(found[0]["report_file"]), found
    if with_py_spy:
        assert [s["rank"] for s in found[0]["suspects"]] == [2], found


def test_a_native_worker_hung_is_named_with_its_native_frame(tmp_path):
    r = run(["--nproc-per-node=4", "--hang-timeout=3", "--shutdown-timeout=5",
             f"--log-dir={tmp_path / 'logs'}", WORKER, "stuck-here", "2", "120", "sleep", "120"],
            timeout=120)
    assert r.returncode == HANG_EXIT, r.stderr
    assert "rank 2 on " in r.stderr and " is in stuck_here" in r.stderr, r.stderr
    assert "while ranks 0-1,3 wait in" in r.stderr, r.stderr


def test_a_hang_report_says_each_thing_once(tmp_path):
    """Three Gloo ranks, rank 2 in stuck_here(), without py-spy: the verdict, each SIGABRT
    traceback and each rank of the failure summary appear once, the summary numbered in order."""
    r = run(["--nproc-per-node=3", "--hang-timeout=3", "--shutdown-timeout=10",
             f"--log-dir={tmp_path / 'logs'}", JOB, "stuck", "120"],
            env={"PATH": path_without_py_spy()}, timeout=180)
    assert r.returncode == HANG_EXIT, r.stderr
    err = r.stderr
    assert err.count("trainrun: the job is hung: ") == 1, err
    verdict = re.search(r"^trainrun: the job is hung: .*? in 3 s: (.*)$", err, re.M).group(1)
    assert "rank 2 " in verdict, verdict
    assert err.count(verdict) == 1, err
    # One traceback per rank, from the SIGABRT; none again in the summary.
    assert err.count("Fatal Python error: Aborted") == 3, err
    assert err.count("Extension modules:") in (0, 3), err
    summary = err[err.index(" FAILED\n"):]
    numbers = [int(n) for n in re.findall(r"^\[(\d+)\]:$", summary, re.M)]
    assert numbers == list(range(len(numbers))) and numbers, summary
    ranks = re.findall(r"^  rank      : (\d+) ", summary, re.M)
    assert len(ranks) == len(set(ranks)) == len(numbers), summary
    assert len(re.findall(r"^  exitcode  : ", summary, re.M)) == len(numbers), summary
    root = summary[summary.index("Root Cause"):]
    assert "rank      : 2 (local_rank: 2)" in root and "exitcode  : 124 " in root, summary


def core_files_go_to_the_working_directory():
    with open("/proc/sys/kernel/core_pattern") as f:
        pattern = f.read().strip()
    return not pattern.startswith("|") and not pattern.startswith("/")


@pytest.mark.skipif(not core_files_go_to_the_working_directory(),
                    reason="core files are not written to the working directory here "
                           "(/proc/sys/kernel/core_pattern)")
def test_the_sigabrt_for_the_tracebacks_leaves_no_core_files(tmp_path):
    # `ulimit -c` as high as it goes: the workers would write a core file each on SIGABRT.
    hard = resource.getrlimit(resource.RLIMIT_CORE)[1]
    if hard == 0:
        pytest.skip("the hard limit on core files is 0 here: no core file could be written")
    work = tmp_path / "work"
    work.mkdir()
    r = run(["--nproc-per-node=2", "--hang-timeout=3", "--shutdown-timeout=5",
             f"--log-dir={tmp_path / 'logs'}", JOB, "sleep", "120"],
            env={"PATH": path_without_py_spy()}, timeout=120, cwd=work,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CORE, (hard, hard)))
    assert r.returncode == HANG_EXIT, r.stderr
    assert "stopping the Python workers with SIGABRT" in r.stderr, r.stderr
    assert "in stuck_here" in r.stderr, r.stderr
    assert not glob.glob(str(work / "core*")), os.listdir(work)


@pytest.mark.skipif(not PY_SPY, reason="py-spy is not installed (scripts/setup.sh --tests)")
def test_a_silent_worker_computing_through_changing_frames_is_not_hung(tmp_path):
    r = run(["--nproc-per-node=1", "--hang-timeout=3", "-v", f"--log-dir={tmp_path / 'logs'}",
             JOB, "compute", "14"], env={"PATH": tools_path(True)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "hang watch: not hung: the stack of rank 0 moved" in r.stderr, r.stderr
    assert "the job is hung" not in r.stderr
    assert "done rank 0" in r.stdout


def stderr_until(p, marker, seconds):
    """What the running trainrun `p` wrote to its stderr (a pipe) until `marker`, its end, or
    `seconds`."""
    err = b""
    deadline = time.monotonic() + seconds
    while marker not in err and time.monotonic() < deadline:
        ready, _, _ = select.select([p.stderr], [], [], 1)
        if ready:
            chunk = os.read(p.stderr.fileno(), 65536)
            if not chunk:
                break
            err += chunk
    return err


# Silent computation in one place (the stack never moves) is not a hang: every rank uses CPU and
# no collective waits. Torch on two ranks, and native programs.
def test_ranks_computing_silently_in_one_place_run_to_their_end(tmp_path):
    # The ranks compute until the watch has judged them (at most 150 s), so that a loaded
    # machine's slow stack tools cannot let the job end before the verdict it is here to show.
    release = tmp_path / "release"
    p = start(["--nproc-per-node=2", "--hang-timeout=8", "-v", f"--log-dir={tmp_path / 'logs'}",
               JOB, "flat", "150", str(release)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
              env={"PATH": tools_path(bool(PY_SPY)), "OMP_NUM_THREADS": "1"})
    err = b""
    try:
        err = stderr_until(p, b"hang watch: not hung", 170)
        release.touch()
        out, rest = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    err, out = (err + rest).decode(), out.decode()
    assert p.returncode == 0, err
    assert "the job is hung" not in err, err
    assert re.search(r"hang watch: not hung: ranks 0-1 used [0-9-]+% of a CPU with no "
                     r"collective waiting", err), err
    assert "done rank 0" in out and "done rank 1" in out, out


# Without --log-dir: the stacks the watch took to judge the quiet stretch are not kept after the
# job succeeds (nothing in them is the user's to read), so no log directory stays.
def test_native_ranks_computing_silently_run_to_their_end(tmp_path):
    (tmp_path / "tmp").mkdir()
    r = run(["--nproc-per-node=2", "--hang-timeout=5", "-v", WORKER,
             "work", "16", "stamp", str(tmp_path / "done")],
            env={"TMPDIR": str(tmp_path / "tmp")}, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "the job is hung" not in r.stderr, r.stderr
    assert "hang watch: not hung" in r.stderr, r.stderr
    assert len((tmp_path / "done").read_text().splitlines()) == 2
    assert "log directory kept" not in r.stderr, r.stderr
    assert not [f for _, _, files in os.walk(tmp_path / "tmp") for f in files], r.stderr


def test_a_rank_in_pdb_at_its_terminal_pauses_the_watch(tmp_path):
    # The job's stdin is a terminal, as a person's is: rank 0 waits at pdb's prompt past the
    # timeout, the watch says once that it is paused, and the job goes on when told to.
    master, slave = os.openpty()
    cmd = [TRAINRUN, "--nproc-per-node=1", "--hang-timeout=3", f"--log-dir={tmp_path / 'logs'}",
           JOB, "pdb"]
    p = subprocess.Popen(cmd, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PATH": tools_path(bool(PY_SPY))})
    os.close(slave)
    err = b""
    try:
        err = stderr_until(p, b"hang watch: paused", 90)
        assert b"hang watch: paused: rank 0 waits for input at /dev/pts/" in err, err
        # Two more timeouts at the prompt: still paused, said once.
        time.sleep(7)
        assert p.poll() is None, err
        os.write(master, b"c\n")
        out, rest = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
        os.close(master)
    err = (err + rest).decode()
    assert p.returncode == 0, err
    assert err.count("hang watch: paused") == 1, err
    if PY_SPY:
        assert "(in pdb)" in err, err
    assert "the job is hung" not in err, err
    assert "done rank 0" in out.decode()


# A line (print() without flush: the workers run `python -u`, as torchrun's), or a touch of
# TRAINRUN_HEARTBEAT_FILE, every second.
@pytest.mark.parametrize("action,last_line", [("chatty", "rank 0: step 11"),
                                              ("heartbeat", "done rank 0")])
def test_a_sign_of_life_every_second_is_progress(tmp_path, action, last_line):
    r = run(["--nproc-per-node=1", "--hang-timeout=4", f"--log-dir={tmp_path / 'logs'}", JOB,
             action, "12"], env={"PATH": tools_path(bool(PY_SPY))}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "the job is hung" not in r.stderr, r.stderr
    assert last_line in r.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="binds a directory over /tmp/trainrun-<uid> in a "
                    "mount namespace of its own, which needs root")
def test_a_runtime_directory_another_user_made_first_turns_nothing_off(tmp_path, monkeypatch):
    """Another user made /tmp/trainrun-<uid> first: the agent registers in a fresh private
    directory beside it, `trainrun --stacks` finds the job there, and --hang-timeout still stops
    the hung job (exit 124)."""
    monkeypatch.delenv("TRAINRUN_RUNTIME_DIR")
    uid = os.geteuid()
    runtime = f"/tmp/trainrun-{uid}"
    if not os.path.isdir(runtime):  # what any agent of this user would make: a mount point
        os.mkdir(runtime, 0o700)
    squat = tmp_path / "squat"
    squat.mkdir(mode=0o755)
    os.chown(squat, 65534, 65534)
    squat.chmod(0o755)
    err, stacks, codes = tmp_path / "err", tmp_path / "stacks", tmp_path / "codes"
    # The squatter's directory is seen at /tmp/trainrun-<uid> only inside this mount namespace,
    # so no other job on the machine is disturbed.
    script = f"""
mount --bind {squat} {runtime} || exit 90
{TRAINRUN} --nproc-per-node=2 --hang-timeout=3 --shutdown-timeout=5 \
    --log-dir={tmp_path / 'logs'} {WORKER} stuck-here 1 120 sleep 120 2>{err} &
job=$!
for i in $(seq 150); do {TRAINRUN} --stacks >{stacks} 2>&1 && break; sleep 0.1; done
stacks_code=$?
wait $job
echo "$? $stacks_code" >{codes}
"""
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    job_code, stacks_code = codes.read_text().split()
    text = err.read_text()
    assert int(job_code) == HANG_EXIT, text
    assert f"{runtime} is not a private directory of user root" in text, text
    assert "owner nobody, mode 0755" in text, text
    fresh = re.search(rf"this job registers in ({re.escape(runtime)}\.\S+) instead", text)
    assert fresh, text
    assert int(stacks_code) == 0, stacks.read_text()
    assert "rank 1" in stacks.read_text(), stacks.read_text()
    assert not os.path.exists(fresh.group(1))  # removed when the job ended


def test_hang_timeout_is_refused_when_its_roll_call_cannot_start(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    monkeypatch.setenv("TRAINRUN_RUNTIME_DIR", str(shared))
    r = run(["--nproc-per-node=1", "--hang-timeout=3", WORKER, "sleep", "0"], timeout=60)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("trainrun: --hang-timeout needs the roll call, which cannot start: "
                               f"{shared} is not a private directory of user "), r.stderr
    # Without --hang-timeout the job runs, and says that --stacks cannot reach it.
    r = run(["--nproc-per-node=1", WORKER, "sleep", "0"], timeout=60)
    assert r.returncode == 0, r.stderr
    assert "trainrun --stacks cannot reach this job" in r.stderr, r.stderr
