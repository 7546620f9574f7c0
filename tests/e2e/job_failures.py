"""Failures on several nodes of one job, run the same way on each rendezvous backend: every node
must tell the same story (the same exit status, root cause and summary)."""
import json
import sys

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
