"""How failures reach every node of a multi-node job: big error files, several failures, text
from other nodes made safe for a terminal, honest messages."""
import sys
import time

import pytest

from ports import free_port

# The limit of docs/protocol.md on the failure summary that is sent to the other nodes.
MAX_SUMMARY = 16 * 1024
LAST_LINE = "RuntimeError: the last line of a huge traceback"

# A worker that, in attempt 0 (or every attempt with "always"), writes a torchelastic error file
# as torch's @record does, with a traceback of SIZE bytes, and exits 1 when its RANK is 1; every
# other worker of that attempt waits to be stopped. In later attempts every worker succeeds.
FAILING_WORKER = r'''
import json, os, sys, time
size, when, marks = int(sys.argv[1]), sys.argv[2], sys.argv[3]
rank, attempt = int(os.environ["RANK"]), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
with open(marks, "a") as f:
    f.write(f"{attempt} {rank}\n")
if attempt > 0 and when != "always":
    sys.exit(0)
if rank != 1:
    time.sleep(120)
    sys.exit(0)
line = '  File "/job/train.py", line 42, in step\n    loss = model(batch)\n'
body = (line * (size // len(line) + 1))[:size]
tb = "Traceback (most recent call last):\n" + body + "\n" + sys.argv[4] + "\n"
error = {"message": {"message": "RuntimeError: boom",
                     "extraInfo": {"py_callstack": tb, "timestamp": str(int(time.time()))}}}
with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
    json.dump(error, f)
sys.exit(1)
'''


def dynamic(port, nnodes, nproc, *extra):
    return [f"--nnodes={nnodes}", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=job", "--shutdown-timeout=5", *extra]


def failing_job(agents, tmp_path, size, restarts, when="once", last_line=LAST_LINE):
    script = tmp_path / "w.py"
    script.write_text(FAILING_WORKER)
    marks = tmp_path / "marks"
    port = free_port()
    extra = [f"--max-restarts={restarts}"] if restarts else []
    command = [sys.executable, "-u", str(script), str(size), when, str(marks), last_line]
    nodes = [agents(n, dynamic(port, 2, 1, "--no-python", *extra) + command) for n in ("a", "b")]
    codes = [n.wait(180) for n in nodes]
    return nodes, codes, marks


def attempts(marks):
    seen = {}
    for line in marks.read_text().splitlines():
        attempt, rank = line.split()
        seen.setdefault(int(attempt), set()).add(int(rank))
    return seen


def split_by_failure(nodes):
    """(the node whose worker failed, the other), told apart by the local error-file path the
    failing node prints without a truncation note."""
    relayed = [n for n in nodes if "bytes not shown" in n.err]
    assert len(relayed) == 1, [n.err[-3000:] for n in nodes]
    other = relayed[0]
    return next(n for n in nodes if n is not other), other


def summary_block(err):
    """The failure summary as printed: from its first rule to its last."""
    start = err.index("=" * 60)
    end = err.rindex("=" * 60) + 60
    return err[start:end]


@pytest.mark.parametrize("size", [100_000, 2_000_000])
def test_a_huge_traceback_fails_the_job_on_every_node(agents, tmp_path, size):
    nodes, codes, _ = failing_job(agents, tmp_path, size, restarts=0)
    assert codes == [1, 1], [n.err[-3000:] for n in nodes]
    failed, other = split_by_failure(nodes)
    for node in nodes:
        assert "protocol" not in node.err and "internal error" not in node.err, node.err[-3000:]
        assert " FAILED" in node.err and LAST_LINE in node.err
    # The failing node prints the whole traceback, as torchrun does; the other node a summary cut
    # to the documented size, its head and tail kept, the place of the whole file named.
    assert len(failed.err) > size
    block = summary_block(other.err)
    assert len(block.encode()) <= MAX_SUMMARY, len(block)
    assert "Traceback (most recent call last):" in block
    assert "rank      : 1 (local_rank: 0)" in block
    assert "/attempt_0/0/error.json on " in block


def test_an_error_file_over_the_read_limit_is_named_not_read(agents, tmp_path):
    nodes, codes, _ = failing_job(agents, tmp_path, 4 << 20, restarts=0)
    assert codes == [1, 1], [n.err[-3000:] for n in nodes]
    for node in nodes:
        assert "protocol" not in node.err and "internal error" not in node.err, node.err[-3000:]
        assert " FAILED" in node.err
        assert "is too large" in node.err and "not read" in node.err, node.err[-3000:]
        assert len(node.err) < 64 * 1024
        assert "error_file: <N/A>" not in node.err


@pytest.mark.parametrize("size", [100_000, 4 << 20])
def test_a_huge_traceback_restarts_the_job_like_any_failure(agents, tmp_path, size):
    nodes, codes, marks = failing_job(agents, tmp_path, size, restarts=1)
    assert codes == [0, 0], [n.err[-3000:] for n in nodes]
    assert attempts(marks) == {0: {0, 1}, 1: {0, 1}}
    for node in nodes:
        assert "protocol" not in node.err and "internal error" not in node.err, node.err[-3000:]
    assert any("restarting (1 of 1 restarts)" in n.err for n in nodes), [n.err for n in nodes]


@pytest.mark.parametrize("size", [100_000, 4 << 20])
def test_a_huge_traceback_with_restarts_left_over_ends_the_job(agents, tmp_path, size):
    nodes, codes, marks = failing_job(agents, tmp_path, size, restarts=1, when="always")
    assert codes == [1, 1], [n.err[-3000:] for n in nodes]
    assert attempts(marks) == {0: {0, 1}, 1: {0, 1}}
    for node in nodes:
        assert "protocol" not in node.err and "internal error" not in node.err, node.err[-3000:]
        assert " FAILED" in node.err


def test_escape_sequences_from_another_node_are_shown_escaped(agents, tmp_path):
    hostile = "RuntimeError: \x1b[31mred\x1b[0m \x1b]0;owned\x07 \x9b2J done"
    nodes, codes, _ = failing_job(agents, tmp_path, 100_000, restarts=0, last_line=hostile)
    assert codes == [1, 1], [n.err[-3000:] for n in nodes]
    failed, other = split_by_failure(nodes)
    assert "\x1b" not in other.err and "\x07" not in other.err and "\x9b" not in other.err
    assert r"RuntimeError: \x1b[31mred\x1b[0m \x1b]0;owned\x07 \u009b2J done" in other.err
