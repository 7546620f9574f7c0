"""--preload torch under PyTorch 2.x (PyPI): each job runs with and without it and must behave the
same. Run with TRAINRUN_PYTHON, an interpreter that imports torch 2.x; py-spy from
TRAINRUN_PY_SPY (or PATH) for the stack cases."""
import glob
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from preload_jobs import (NEEDS_PY_SPY, PY, PY_SPY, TRAINRUN, WITH_AND_WITHOUT, finish, job_env,
                          start, trainrun)

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(os.path.dirname(HERE), "e2e")
sys.path.insert(0, os.path.dirname(HERE))
from ports import standalone_args  # noqa: E402


def write(path, text):
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_the_interpreter_has_torch_2():
    # A missing or wrong interpreter fails here rather than letting every case compare nothing.
    assert PY and TRAINRUN, "set TRAINRUN_PYTHON and TRAINRUN_BIN (ctest does)"
    r = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and int(r.stdout.split(".")[0]) >= 2, (r.stdout, r.stderr)


def test_each_worker_gets_the_same_environment(tmp_path):
    dumps = []
    for preload in (False, True):
        out = tmp_path / ("preload" if preload else "plain")
        out.mkdir()
        r = trainrun(tmp_path, preload, ["--nproc-per-node=2", "--rdzv-id=same",
                                         os.path.join(HERE, "env_dump.py"), str(out)], 2)
        assert r.returncode == 0, r.stderr
        dumps.append({rank: json.loads((out / f"{rank}.json").read_text()) for rank in (0, 1)})
    plain, warm = dumps
    for rank in (0, 1):
        # A port chosen free and a log directory made fresh for each run.
        differ = {k for k in plain[rank].keys() | warm[rank].keys()
                  if plain[rank].get(k) != warm[rank].get(k)}
        assert differ == {"MASTER_PORT", "TORCHELASTIC_ERROR_FILE"}, (rank, differ)


def test_ddp_training_ends_with_the_same_parameters_as_without_and_under_torchrun(tmp_path):
    # Each rank's line holds its loss and a SHA-256 of its final state dict's bytes: the same
    # training, bit for bit, with --preload, without it, and under torchrun 2.x.
    script = os.path.join(HERE, "ddp_train.py")
    outs = []
    for preload in (False, True):
        r = trainrun(tmp_path, preload, ["--nproc-per-node=2", script], 2)
        assert r.returncode == 0, r.stderr
        outs.append(sorted(r.stdout.splitlines()))
    r = subprocess.run([PY, "-m", "torch.distributed.run", *standalone_args(),
                        "--nproc_per_node=2", script], capture_output=True, text=True,
                       timeout=600, cwd=tmp_path, env=job_env(tmp_path))
    assert r.returncode == 0, r.stderr
    outs.append(sorted(line for line in r.stdout.splitlines() if line.startswith("rank ")))
    assert outs[0] == outs[1] == outs[2], outs
    assert len(outs[1]) == 2 and all(line.endswith(" in_sync=True") for line in outs[1]), outs
    assert all(" state_sha256=" in line for line in outs[1]), outs


RECORDED = """\
    import os, sys
    from torch.distributed.elastic.multiprocessing.errors import record

    @record
    def main():
        attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
        if rank == "1":
            sys.stdout.write(f"attempt {attempt} rank 1\\n")
            raise RuntimeError(f"recorded failure in attempt {attempt}")

    if __name__ == "__main__":
        main()
    """


@WITH_AND_WITHOUT
def test_a_recorded_failure_writes_its_error_file_in_each_attempt(tmp_path, preload):
    # --max-restarts: the second attempt is forked from the same template, and fails as well.
    script = write(tmp_path / "recorded.py", RECORDED)
    r = trainrun(tmp_path, preload, ["--nproc-per-node=2", "--max-restarts=1", "--log-dir=logs",
                                     script], 4)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines() == ["attempt 0 rank 1", "attempt 1 rank 1"], r.stdout
    assert "restarting the worker group (1 of 1 restart)" in r.stderr, r.stderr
    summary = r.stderr[r.stderr.index("Root Cause"):]
    assert "RuntimeError: recorded failure in attempt 1" in summary, summary
    assert "error_file: <N/A>" not in summary, summary
    for attempt in (0, 1):
        files = glob.glob(str(tmp_path / "logs" / "*" / f"attempt_{attempt}" / "1" / "error.json"))
        assert len(files) == 1, os.listdir(tmp_path / "logs")
        message = json.loads(open(files[0]).read())["message"]
        assert message["message"] == f"RuntimeError: recorded failure in attempt {attempt}"
        stack = message["extraInfo"]["py_callstack"]
        assert stack.startswith("Traceback (most recent call last):\n"), stack
        assert f'File "{script}", line 9, in main\n' in stack and "<trainrun" not in stack, stack


@WITH_AND_WITHOUT
def test_tee_redirects_and_local_ranks_filter(tmp_path, preload):
    script = write(tmp_path / "io.py", """\
        import os, sys
        rank = os.environ["RANK"]
        sys.stdout.write(f"out rank {rank}\\n")
        sys.stderr.write(f"err rank {rank}\\n")
        """)
    r = trainrun(tmp_path, preload, ["--nproc-per-node=2", "--tee=1", "--redirects=2",
                                     "--local-ranks-filter=1", "--log-dir=logs", script], 2)
    assert r.returncode == 0, r.stderr
    # stdout to the console and its file, stderr to its file alone; rank 1's console lines only.
    assert r.stdout == "[default1]:out rank 1\n", r.stdout
    assert "err rank" not in r.stderr, r.stderr
    for rank in (0, 1):
        [attempt] = glob.glob(str(tmp_path / "logs" / "*" / "attempt_0" / str(rank)))
        assert open(os.path.join(attempt, "stdout.log")).read() == f"out rank {rank}\n"
        assert open(os.path.join(attempt, "stderr.log")).read() == f"err rank {rank}\n"


@WITH_AND_WITHOUT
def test_sigusr1_and_sigusr2_reach_each_worker_while_its_dataloader_runs(tmp_path, preload):
    # A spawn DataLoader: its processes start from the worker's sys.executable and __main__.
    out = tmp_path / "out"
    out.mkdir()
    p = start(tmp_path, preload, ["--nproc-per-node=2", os.path.join(HERE, "loader_usr1.py"),
                                  str(out), "spawn", "SIGUSR1,SIGUSR2"])
    try:
        deadline = time.monotonic() + 300
        while not all((out / f"ready.{rank}").exists() for rank in (0, 1)):
            assert p.poll() is None and time.monotonic() < deadline, "the workers never got ready"
            time.sleep(0.05)
        p.send_signal(signal.SIGUSR1)
        p.send_signal(signal.SIGUSR2)
    finally:
        r = finish(p, tmp_path, preload, 2)
    assert r.returncode == 0, r.stderr
    assert "killed by signal" not in r.stderr, r.stderr
    assert [(out / f"result.{rank}").read_text() for rank in (0, 1)] == ["2 32\n"] * 2


def py_spy_path():
    return os.path.dirname(PY_SPY) + os.pathsep + os.environ["PATH"] if PY_SPY else None


@WITH_AND_WITHOUT
def test_a_hung_job_is_stopped_with_each_workers_traceback(tmp_path, preload):
    job = os.path.join(E2E, "hang_job.py")
    r = trainrun(tmp_path, preload, ["--nproc-per-node=2", "--hang-timeout=3",
                                     "--shutdown-timeout=5", "--log-dir=logs", job, "sleep",
                                     "300"], 2, path=py_spy_path())
    assert r.returncode == 124, r.stderr
    # Both ranks in one place: stuck_here with py-spy, a native frame of the interpreter without.
    assert "no rank stands out: ranks 0-1 in " in r.stderr, r.stderr
    [report] = glob.glob(str(tmp_path / "logs" / "*" / "attempt_0" / "hang.txt"))
    assert "no rank stands out: ranks 0-1 in " in open(report).read()
    assert "trainrun: stopping the Python workers with SIGABRT" in r.stderr, r.stderr
    # faulthandler's traceback of each worker, innermost first (forked ones go on below the
    # script with the template's frames: docs/cli.md, Warm starts).
    frames = re.findall(rf'^Current thread .*\n  File "{re.escape(job)}", line \d+ in stuck_here\n'
                        rf'  File "{re.escape(job)}", line \d+ in <module>\n', r.stderr, re.M)
    assert len(frames) == 2, r.stderr


@NEEDS_PY_SPY
@pytest.mark.parametrize("preload", [False, True], ids=["plain", "preload"])
def test_stacks_of_a_running_job(tmp_path, preload):
    release, ready = tmp_path / "release", tmp_path / "ready"
    ready.mkdir()
    p = start(tmp_path, preload, ["--nproc-per-node=3", os.path.join(E2E, "stacks_job.py"),
                                  str(release), str(ready)], path=py_spy_path())
    try:
        deadline = time.monotonic() + 300
        while len(os.listdir(ready)) < 3:
            assert p.poll() is None and time.monotonic() < deadline, "the ranks never got ready"
            time.sleep(0.05)
        stacks = subprocess.run([TRAINRUN, "--stacks"], capture_output=True, text=True,
                                timeout=300, env=job_env(tmp_path, py_spy_path()))
    finally:
        release.touch()
        r = finish(p, tmp_path, preload, 3)
    assert r.returncode == 0, r.stderr
    assert stacks.returncode == 0, stacks.stderr
    assert re.search(r"^rank 1 on \S+ is in stuck_here\(\) \(stacks_job\.py:\d+\) while ranks 0,2 "
                     r"wait in wait_for_others \(stacks_job\.py:\d+\)$", stacks.stdout, re.M), \
        stacks.stdout
    assert "rank 1 (1): stuck_here <- <module>\n" in stacks.stdout, stacks.stdout
    assert "ranks 0,2 (2): wait_for_others <- <module>\n" in stacks.stdout, stacks.stdout
