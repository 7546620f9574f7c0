"""trainrun --hang-timeout with C++ workers of the runtime: a rank stuck in a native function while
the others wait in a Gloo all-reduce is named by its native frame, and a job whose only sign of
life is report() (the runtime touches $TRAINRUN_HEARTBEAT_FILE) is not hung."""
import json
import os
import shutil
import subprocess

import pytest

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
WORKER = os.environ.get("RUNTIME_WORKER_BIN", "")
HANG_EXIT = 124


@pytest.fixture(autouse=True)
def needs_binaries():
    if not (os.access(TRAINRUN, os.X_OK) and os.access(WORKER, os.X_OK)):
        pytest.fail("set TRAINRUN_BIN and RUNTIME_WORKER_BIN to the built binaries (ctest does)")


def trainrun(tmp_path, args):
    env = dict(os.environ, TRAINRUN_RUNTIME_DIR=str(tmp_path / "runtime"),
               TRAINRUN_STORAGE_PATH=str(tmp_path / "storage"))
    # Bounded far above the timeout, the two roll calls and LibTorch's start: no timing asserted.
    return subprocess.run([TRAINRUN, "--hang-timeout=10", "--shutdown-timeout=10",
                           f"--log-dir={tmp_path / 'logs'}"] + args, env=env, capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not (shutil.which("eu-stack") or shutil.which("gdb")),
                    reason="neither eu-stack (elfutils) nor gdb is installed: no native frames")
def test_a_rank_stuck_in_native_code_is_named_while_the_others_wait_in_all_reduce(tmp_path):
    # Three ranks: with two, the stuck rank and the waiting one would be groups of one each and
    # neither the odd one.
    r = trainrun(tmp_path, ["--nproc-per-node=3", WORKER, "stuck", "1", "300"])
    assert r.returncode == HANG_EXIT, r.stderr
    assert "the job is hung" in r.stderr, r.stderr
    assert "rank 1 on " in r.stderr and " is in stuck_here" in r.stderr, r.stderr
    assert "while ranks 0,2 wait in " in r.stderr, r.stderr
    assert "not stuck after all" not in r.stdout


def test_report_every_two_seconds_is_progress(tmp_path):
    # Silent but for report() for 24 s: without the heartbeat it would be hung after 10 + 3 s.
    summary = tmp_path / "summary.json"
    r = trainrun(tmp_path, ["--nproc-per-node=2", f"--summary-file={summary}", WORKER,
                            "heartbeat", "24"])
    assert r.returncode == 0, r.stderr
    assert "the job is hung" not in r.stderr, r.stderr
    assert "done rank 0" in r.stdout and "done rank 1" in r.stdout, r.stdout
    # Each rank's first report() is its first step in the start-up record, long before its
    # first output (the last line of the job).
    [attempt] = json.loads(summary.read_text())["attempts"]
    for rank in attempt["startup"]["ranks"]:
        assert rank["first_report_s"] is not None, attempt["startup"]
        assert attempt["startup"]["workers_started_s"] <= rank["first_report_s"], rank
        assert rank["first_output_s"] is None or rank["first_report_s"] < rank["first_output_s"]
