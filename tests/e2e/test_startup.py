"""Where each attempt's start-up went (docs/cli.md, "Start-up"): the round, the workers' start and
each rank's first request to the store the agent serves, in the job summary and in one line."""
import datetime
import json
import os
import subprocess

from conftest import TRAINRUN, dynamic, run, torch2_stub
from ports import free_port

# The interpreter the workers run (ctest gives the configuration's: Debian's torch 1.13, or the
# PyPI torch 2.x), and the major version of its torch, which decides who serves the job's store:
# worker RANK 0 on torch 1.x, the agent on 2.x (docs/cli.md, "Workers"), as torchrun does.
WORKER_PYTHON = os.environ.get("PYTHON_EXEC", "python3")


def worker_torch_major():
    r = subprocess.run([WORKER_PYTHON, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{WORKER_PYTHON} cannot import torch: {r.stderr}"
    return int(r.stdout.strip().split(".")[0])

# Real torch (the workers' interpreter): a Gloo group, rank $SLOW_RANK late to it; the first
# attempt's rank 1 fails after it, so that the job restarts once.
TORCH_WORKER = """
import os, sys, time
import torch, torch.distributed as dist
rank = int(os.environ["RANK"])
if rank == int(os.environ.get("SLOW_RANK", "-1")):
    time.sleep(3)
dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
dist.destroy_process_group()
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" and rank == int(os.environ.get("FAIL_RANK", "-1")):
    sys.exit(3)
"""

# A store client as torch 2.x's is (VALIDATE, then ADD init/), without torch: rank $SLOW_RANK
# comes 3 s late. Each waits for every rank's ADD, as TCPStore's clients do, then keeps its
# connection $LINGER_S seconds (a node traces only a socket that its worker still holds).
STORE_WORKER = """
import os, socket, struct, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
if rank == int(os.environ.get("SLOW_RANK", "-1")):
    time.sleep(3)
s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
def text(b): return struct.pack("<Q", len(b)) + b
def count():
    s.sendall(b"\\x04" + text(b"init/") + struct.pack("<q", 0))
    got = b""
    while len(got) < 8:
        got += s.recv(8 - len(got))
    return struct.unpack("<q", got)[0]
s.sendall(b"\\x00" + struct.pack("<I", 0x3C85F7CE))
s.sendall(b"\\x04" + text(b"init/") + struct.pack("<q", 1))
s.recv(8)
deadline = time.monotonic() + 60
while count() < world and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(float(os.environ.get("LINGER_S", "0")))
"""



def startups(path):
    return [a["startup"] for a in json.loads(path.read_text())["attempts"]]


def startup_lines(err, attempt):
    return [line for line in err.splitlines()
            if line.startswith(f"trainrun: attempt {attempt}: round ")]


def test_each_attempt_s_start_up_is_in_the_summary_and_a_restart_says_it(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(TORCH_WORKER)
    summary = tmp_path / "summary.json"
    r = run(["--standalone", "--nproc-per-node=2", "--max-restarts=1",
             f"--summary-file={summary}", str(script)],
            env={"FAIL_RANK": "1"}, timeout=300)
    assert r.returncode == 0, r.stderr
    attempts = startups(summary)
    assert len(attempts) == 2, r.stderr
    for s in attempts:
        assert s["round_s"] is not None and s["round_s"] >= 0, s
        assert s["workers_started_s"] >= s["round_s"], s
        assert [x["rank"] for x in s["ranks"]] == [0, 1], s
        # Each worker's own start, in one pass by local rank, all before the group's.
        started = [x["started_s"] for x in s["ranks"]]
        assert s["round_s"] <= started[0] <= started[1] <= s["workers_started_s"], s
    # Without -v only the restart's line; the first attempt's is for -v.
    assert startup_lines(r.stderr, 0) == [], r.stderr
    assert len(startup_lines(r.stderr, 1)) == 1, r.stderr
    if worker_torch_major() < 2:
        assert all(s["store"] == "worker rank 0" for s in attempts), attempts
        # Torch 1.x's workers keep their own store: no agent sees it, and nothing is guessed.
        assert "ranks at the store not seen (worker RANK 0 serves it)" in r.stderr, r.stderr
        assert all(x["at_store_s"] is None for s in attempts for x in s["ranks"])
    else:
        for s in attempts:
            assert s["store"] == "this node", s
            assert all(x["at_store_s"] >= x["started_s"] for x in s["ranks"]), s


# The first attempt's rank 1 fails once rank 0 is ready; rank 0 takes 2 s to stop on SIGTERM.
SLOW_TO_STOP = """
import os, signal, sys, time
rank, attempt = os.environ["RANK"], os.environ["TORCHELASTIC_RESTART_COUNT"]
ready = os.path.join(os.environ["READY_DIR"], "ready")
if attempt == "0" and rank == "0":
    def stop(*_):
        time.sleep(2)
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    open(ready, "w").close()
    time.sleep(60)
if attempt == "0" and rank == "1":
    while not os.path.exists(ready):
        time.sleep(0.01)
    sys.exit(3)
"""


def unix(iso):
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def test_a_restart_counts_from_the_failing_worker_s_exit(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SLOW_TO_STOP)
    summary = tmp_path / "summary.json"
    r = run(["--standalone", "--nproc-per-node=2", "--max-restarts=1",
             f"--summary-file={summary}", str(script)],
            env={"READY_DIR": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r.stderr
    first, second = json.loads(summary.read_text())["attempts"]
    ended = {w["rank"]: w for w in first["workers"]}
    assert ended[1]["exit_code"] == 3 and unix(ended[0]["ended_at"]) - unix(
        ended[1]["ended_at"]) >= 2, first
    s = second["startup"]
    # From rank 1's exit as trainrun reaped it: the 2 s rank 0 took to stop are in the restart.
    assert s["counted_from"] == {"event": "worker exit", "rank": 1,
                                 "at": ended[1]["ended_at"]}, s
    assert s["workers_started_s"] >= 2, s
    # The attempt's start (when its workers were about to start) is round_s after that exit.
    assert abs(unix(second["started_at"]) - unix(ended[1]["ended_at"]) - s["round_s"]) < 0.05, (
        second["started_at"], s)
    assert first["startup"]["counted_from"]["event"] == "job start", first["startup"]
    [line] = startup_lines(r.stderr, 1)
    assert line.endswith("; from rank 1's exit"), line


def test_a_slow_rank_is_named_as_the_slowest_and_much_slower(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(STORE_WORKER)
    summary = tmp_path / "summary.json"
    r = run(["-v", "--standalone", "--nproc-per-node=4", f"--summary-file={summary}", str(script)],
            env={"SLOW_RANK": "2", "PYTHONPATH": torch2_stub(tmp_path)}, timeout=300)
    assert r.returncode == 0, r.stderr
    [s] = startups(summary)
    assert s["store"] == "this node", s
    times = {x["rank"]: x["at_store_s"] for x in s["ranks"]}
    assert sorted(times) == [0, 1, 2, 3] and None not in times.values(), s
    # Rank 2 sleeps 3 s once started; the others may still be starting then.
    started = {x["rank"]: x["started_s"] for x in s["ranks"]}
    assert times[2] > 3 + started[2], s
    assert s["slowest"]["rank"] == 2 and s["slowest"]["much_slower"], s
    assert s["unattributed_store_connections"] == 0, s
    [line] = startup_lines(r.stderr, 0)
    assert "(slowest: rank 2 on node 0, " in line and ", much slower than the median " in line, line


# Rank 0 also has a process that is no worker of the job connect to the store: no node owns it.
STRANGER = """
import os, socket, struct, subprocess, sys
if os.environ["RANK"] == "0":
    code = ("import os, socket, struct, time\\n"
            "s = socket.create_connection((os.environ['MASTER_ADDR'], int(os.environ['MASTER_PORT'])))\\n"
            "s.sendall(bytes([0]) + struct.pack('<I', 0x3C85F7CE))\\n"
            "time.sleep(1)\\n")
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def two_nodes(tmp_path, script_text, extra_env=None):
    """Two agents on this machine; each node's summary's start-up and stderr, by node rank."""
    script = tmp_path / "job.py"
    script.write_text(script_text)
    endpoint = free_port()
    # Node 0 asks once every connection came; node 1 answers within 5 s or not at all.
    env = dict(os.environ, PYTHONPATH=torch2_stub(tmp_path), LINGER_S="8", **(extra_env or {}))
    procs = []
    for node in range(2):
        summary = tmp_path / f"summary{node}.json"
        procs.append(subprocess.Popen(
            [TRAINRUN, "-v", *dynamic(endpoint, 2, 2), f"--summary-file={summary}",
             str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        errs.append(err)
        assert p.returncode == 0, err
    by_node = {}
    for node in range(2):
        [s] = startups(tmp_path / f"summary{node}.json")
        own = [x for x in s["ranks"] if x["started_s"] is not None]
        by_node[own[0]["node_rank"]] = (s, errs[node])
    return by_node


def test_two_nodes_each_say_what_they_see_of_the_store(tmp_path):
    by_node = two_nodes(tmp_path, STORE_WORKER)
    host, host_err = by_node[0]
    other, other_err = by_node[1]
    assert host["store"] == "this node" and other["store"] == "node 0", (host, other)
    # Node 0 names every rank, node 1's as node 1 traced them.
    assert [(x["rank"], x["node_rank"]) for x in host["ranks"]] == [
        (0, 0), (1, 0), (2, 1), (3, 1)], host
    assert all(x["at_store_s"] is not None for x in host["ranks"]), host
    assert host["unattributed_store_connections"] == 0, host
    assert all(x["at_store_s"] is None for x in other["ranks"]), other
    [line] = startup_lines(host_err, 0)
    assert "ranks at the store" in line and "not told apart" not in line, line
    assert "not seen" not in line, line
    [line] = startup_lines(other_err, 0)
    assert line.endswith("ranks at the store are seen by node 0's agent"), line


def test_another_node_s_slow_rank_is_named_as_the_slowest_with_its_node(tmp_path):
    by_node = two_nodes(tmp_path, STORE_WORKER, {"SLOW_RANK": "3"})
    host, host_err = by_node[0]
    times = {x["rank"]: x["at_store_s"] for x in host["ranks"]}
    assert sorted(times) == [0, 1, 2, 3] and None not in times.values(), host
    assert times[3] > max(times[0], times[1], times[2]) + 2, host
    assert host["slowest"]["rank"] == 3 and host["slowest"]["node_rank"] == 1, host
    [line] = startup_lines(host_err, 0)
    assert "(slowest: rank 3 on node 1, " in line, line


def test_a_stranger_s_connection_to_the_store_stays_unattributed(tmp_path):
    by_node = two_nodes(tmp_path, STRANGER + STORE_WORKER)
    host, host_err = by_node[0]
    assert [(x["rank"], x["node_rank"]) for x in host["ranks"]] == [
        (0, 0), (1, 0), (2, 1), (3, 1)], host
    assert host["unattributed_store_connections"] == 1, host
    [line] = startup_lines(host_err, 0)
    assert line.endswith("; 1 store connection not told apart"), line


def test_a_slow_torch_rank_is_seen_where_its_torch_version_puts_the_store(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(TORCH_WORKER)
    summary = tmp_path / "summary.json"
    r = run(["--standalone", "--nproc-per-node=3", f"--summary-file={summary}", str(script)],
            env={"SLOW_RANK": "2"}, timeout=300)
    assert r.returncode == 0, r.stderr
    [s] = startups(summary)
    times = {x["rank"]: x["at_store_s"] for x in s["ranks"]}
    if worker_torch_major() < 2:
        # Worker RANK 0 serves the store: no agent sees the ranks arrive, and none is named.
        assert s["store"] == "worker rank 0", s
        assert all(t is None for t in times.values()), s
        return
    assert s["store"] == "this node", s
    assert None not in times.values(), s
    assert s["slowest"]["rank"] == 2, s
    assert times[2] - max(times[0], times[1]) > 2, s


# Ranks 0 and 2 write to stderr at once (which passes through trainrun always), rank 1 2 s
# later, rank 3 nothing.
SPEAKERS = """
import os, sys, time
rank = int(os.environ["RANK"])
if rank == 1:
    time.sleep(2)
if rank != 3:
    print(f"rank {rank} here", file=sys.stderr, flush=True)
time.sleep(0.5)
"""


def test_each_worker_s_first_output_is_recorded_and_the_slowest_named(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(SPEAKERS)
    summary = tmp_path / "summary.json"
    r = run(["-v", "--standalone", "--nproc-per-node=4", f"--summary-file={summary}", str(script)],
            timeout=120)
    assert r.returncode == 0, r.stderr
    [s] = startups(summary)
    first = {x["rank"]: x["first_output_s"] for x in s["ranks"]}
    assert first[3] is None, s
    assert first[0] >= s["workers_started_s"] and first[2] >= s["workers_started_s"], s
    assert first[1] > first[0] + 1.5, s
    assert s["first_output_slowest"]["rank"] == 1, s
    [line] = [x for x in r.stderr.splitlines() if x.startswith("trainrun: attempt 0: first output")]
    assert "(slowest: rank 1, " in line and line.endswith("; rank 3: no output seen"), line
    # Without -v it is not said.
    r = run(["--standalone", "--nproc-per-node=2", str(script)], timeout=120)
    assert r.returncode == 0 and "first output" not in r.stderr, r.stderr


# Each rank prints one line to stdout, nothing to stderr, in one write (print() writes the line
# and its newline apart, and the two ranks share trainrun's stdout).
PRINTERS = """
import os, sys
sys.stdout.write(f"rank {os.environ['RANK']} here\\n")
sys.stdout.flush()
"""


def test_a_first_output_to_stdout_in_a_file_or_a_log_is_recorded(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(PRINTERS)
    # trainrun's stdout a file (the workers' stdout passes through it), then stdout sent to the
    # rank's log file with stderr on the console (--redirects=1 --log-dir).
    for extra, name in (([], "file"), (["--redirects=1", f"--log-dir={tmp_path / 'logs'}"], "log")):
        summary = tmp_path / f"{name}.json"
        with open(tmp_path / f"{name}.out", "w") as out:
            r = subprocess.run([TRAINRUN, "--standalone", "--nproc-per-node=2",
                                f"--summary-file={summary}", *extra, str(script)],
                               stdout=out, stderr=subprocess.PIPE, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        [s] = startups(summary)
        assert all(x["first_output_s"] is not None for x in s["ranks"]), (name, s)
    assert sorted((tmp_path / "file.out").read_text().splitlines()) == ["rank 0 here",
                                                                         "rank 1 here"]
