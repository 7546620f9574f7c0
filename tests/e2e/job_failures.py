"""Failures on several nodes of one job, run the same way on each rendezvous backend: every node
must tell the same story (the same exit status, root cause and summary)."""
import json
import sys

from conftest import dynamic
from ports import free_port

# Rank 0 (one node) fails first, exit 3, with an error file dated 1700000100; rank 1 (the other
# node) fails only when that failure stops it, exit 4, with an error file dated 100 s earlier.
# The root cause is rank 1 by the rule (earliest error-file timestamp), though it failed second.
LATE_BUT_EARLIER = r'''
import json, os, signal, sys, time
rank, ready = int(os.environ["RANK"]), sys.argv[1]
def record(timestamp, code):
    error = {"message": {"message": f"ValueError: rank {rank}", "extraInfo": {
        "py_callstack": f"Traceback (most recent call last):\nValueError: rank {rank}\n",
        "timestamp": str(timestamp)}}}
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump(error, f)
    os._exit(code)
if rank == 1:
    signal.signal(signal.SIGTERM, lambda *_: record(1700000000, 4))
    open(ready, "w").close()
    time.sleep(120)
    sys.exit(0)
while not os.path.exists(ready):
    time.sleep(0.01)
record(1700000100, 3)
'''


def summary_block(err):
    """The failure summary as printed: from its first rule to its last."""
    start = err.index("=" * 60)
    end = err.rindex("=" * 60) + 60
    return err[start:end]


def check_late_but_earlier(agents, tmp_path, options):
    """Runs LATE_BUT_EARLIER on two agents with the rendezvous `options` (one worker each), and
    checks that both exit 4, print the same summary listing both failures with rank 1 as the
    root cause, and name it in their --summary-file."""
    script = tmp_path / "late.py"
    script.write_text(LATE_BUT_EARLIER)
    options = [*options, "--shutdown-timeout=5", "--no-python"]
    nodes = [agents(n, options + [f"--summary-file={tmp_path / n}.json", sys.executable, "-u",
                                  str(script), str(tmp_path / "ready")]) for n in ("a", "b")]
    codes = [n.wait(120) for n in nodes]
    assert codes == [4, 4], [n.err[-3000:] for n in nodes]
    blocks = [summary_block(n.err) for n in nodes]
    assert blocks[0] == blocks[1], blocks
    assert blocks[0].count(" FAILED") == 1, blocks[0]
    failures, root = blocks[0].split("Root Cause (first observed failure):")
    assert "rank      : 1 (local_rank: 0)" in root and "exitcode  : 4 " in root, blocks[0]
    assert "rank      : 0 (local_rank: 0)" in failures and "exitcode  : 3 " in failures, blocks[0]
    for n in ("a", "b"):
        summary = json.loads((tmp_path / f"{n}.json").read_text())
        assert summary["root_cause"]["rank"] == 1 and summary["exit_code"] == 4, summary


# Failures planned per worker: argv[1] is a directory the workers meet in, argv[2] a JSON object
# naming, for "NODE LOCAL_RANK" (NODE from the environment), {"after": seconds after the first
# failure, "code": exit code, "stderr": lines of about 100 bytes written first, "traceback":
# bytes of an error-file traceback (0: no error file)}. The worker planned at "after": null fails
# first, once every worker has started; the others wait for it. A planned worker ignores SIGTERM,
# so that its failure is its own; an unplanned one waits to be stopped.
PLANNED_FAILURES = r'''
import json, os, signal, sys, time
meet, plan = sys.argv[1], json.loads(sys.argv[2])
lr, world = os.environ["LOCAL_RANK"], int(os.environ["WORLD_SIZE"])
name = os.environ["NODE"] + lr
mine = plan.get(f"{os.environ['NODE']} {lr}")
if mine is not None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(meet, "up." + os.environ["RANK"]), "w").close()
if mine is None:
    time.sleep(120)
    sys.exit(0)
while len([f for f in os.listdir(meet) if f.startswith("up.")]) < world:
    time.sleep(0.01)
first = os.path.join(meet, "first")
if mine["after"] is None:
    open(first, "w").close()
else:
    while not os.path.exists(first):
        time.sleep(0.01)
    time.sleep(mine["after"])
if mine.get("traceback"):
    tb = f"Traceback of {name}:\n" + "".join(
        f"{name} frame {i:04d} " + "t" * 84 + "\n" for i in range(mine["traceback"] // 100))
    error = {"message": {"message": f"RuntimeError: {name}",
                         "extraInfo": {"py_callstack": tb, "timestamp": str(time.time())}}}
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump(error, f)
sys.stderr.write("".join(f"{name} line {i:02d} " + "x" * 84 + "\n"
                         for i in range(mine.get("stderr", 0))))
sys.stderr.flush()
os._exit(mine["code"])
'''


def stderr_lines(name, count):
    """The lines PLANNED_FAILURES writes to the stderr of worker `name` (node and local rank)."""
    return [f"{name} line {i:02d} " + "x" * 84 for i in range(count)]


def planned_command(tmp_path, plan):
    """The command (after --no-python) of a job whose workers fail as `plan` says."""
    script = tmp_path / "planned.py"
    script.write_text(PLANNED_FAILURES)
    meet = tmp_path / "meet"
    meet.mkdir()
    return [sys.executable, "-u", str(script), str(meet), json.dumps(plan)]


def run_planned_failures(agents, tmp_path, plan):
    """Runs `plan` on two agents "a" and "b" of two workers each, each with a --summary-file
    NAME.json; returns the agents and their exit codes."""
    command = planned_command(tmp_path, plan)
    options = [*dynamic(free_port(), 2, 2), "--shutdown-timeout=5", "--no-python"]
    nodes = [agents(n, [*options, f"--summary-file={tmp_path / n}.json", *command],
                    env={"NODE": n}) for n in ("a", "b")]
    return nodes, [n.wait(120) for n in nodes]
