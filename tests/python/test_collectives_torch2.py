"""The hang report from the collectives (docs/hangs.md, "The collectives"): real Gloo jobs of
PyTorch 2.x whose ranks' flight recorders the agent reads through each worker's diagnosis channel.
Run with TRAINRUN_PYTHON (torch 2.x) and TRAINRUN_BIN."""
import json
import os
import re
import subprocess
import time

import pytest

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
PY = os.environ.get("TRAINRUN_PYTHON", "")
HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "collectives_job.py")


def env(tmp_path, path="/usr/bin:/bin"):
    # Without py-spy on PATH (nor PYTHON_EXEC's directory): the Python frames come from the
    # workers themselves, as for a user whom ptrace refuses.
    return dict(os.environ, PYTHON_EXEC=PY, PATH=path,
                TRAINRUN_RUNTIME_DIR=str(tmp_path / "runtime"))


def start(tmp_path, scenario, ranks, *options):
    ready, release = tmp_path / "ready", tmp_path / "release"
    ready.mkdir()
    p = subprocess.Popen([TRAINRUN, *options, f"--nproc-per-node={ranks}", JOB, scenario,
                          str(ready), str(release)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env(tmp_path))
    deadline = time.monotonic() + 300
    while len(os.listdir(ready)) < ranks:
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()
        time.sleep(0.05)
    time.sleep(0.5)  # from `arrived` into the wait
    return p, release


def stacks_of(tmp_path, scenario, ranks):
    p, release = start(tmp_path, scenario, ranks)
    try:
        r = subprocess.run([TRAINRUN, "--stacks"], capture_output=True, text=True, timeout=300,
                           env=env(tmp_path))
    finally:
        # Ranks that wait in a collective no other rank calls wait for ever: the job is stopped.
        release.touch()
        p.terminate()
        p.communicate(timeout=300)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_two_ranks_a_hang_names_the_rank_behind_as_its_cause(tmp_path):
    summary = tmp_path / "summary.json"
    p, release = start(tmp_path, "behind", 2, "--hang-timeout=2", f"--summary-file={summary}",
                       "--log-dir", str(tmp_path / "logs"))
    try:
        out, err = p.communicate(timeout=300)
    finally:
        release.touch()
    assert p.returncode == 124, err
    line = (r"rank 1 \(\S+\) never entered collective #4 \(all_reduce, group 0\) that rank 0 "
            r"waits in; rank 1 is in stuck_here\(\) \(collectives_job\.py:\d+\)")
    assert re.search(r"trainrun: the job is hung: .*" + line, err), err
    hang = json.loads(summary.read_text())
    assert hang["root_cause"]["rank"] == 1, hang["root_cause"]
    assert re.search(line, hang["hang"]["line"]), hang["hang"]
    assert hang["hang"]["collectives"]["behind"] == [1], hang["hang"]["collectives"]
    [report] = list((tmp_path / "logs").rglob("hang.txt"))
    assert re.search(line, report.read_text()), report.read_text()


def test_four_ranks_the_one_behind_and_where_each_is_without_py_spy(tmp_path):
    out = stacks_of(tmp_path, "behind", 4)
    assert re.search(r"^rank 3 \(\S+\) never entered collective #4 \(all_reduce, group 0\) that "
                     r"ranks 0-2 wait in; rank 3 is in stuck_here\(\) \(collectives_job\.py:\d+\)$",
                     out, re.M), out
    # No py-spy: the Python frames are the workers' own, told on their channels.
    assert "rank 3 (1): stuck_here <- <module>" in out, out
    assert "diagnosis channel" in out, out


def test_a_rank_that_calls_another_collective_is_named(tmp_path):
    out = stacks_of(tmp_path, "op_mismatch", 4)
    assert re.search(r"^collective #4 of group 0: ranks 0-2 called all_reduce\(4096 float32\), "
                     r"rank 3 called all_gather", out, re.M), out


def test_a_rank_that_sends_another_size_is_named(tmp_path):
    out = stacks_of(tmp_path, "size_mismatch", 2)
    assert re.search(r"^collective #4 of group 0: rank 0 called broadcast\(4096 float32\), "
                     r"rank 1 called broadcast\(2048 float32\)", out, re.M), out


def test_a_rank_waiting_inside_a_collective_for_its_peer_is_told_from_the_one_behind(tmp_path):
    out = stacks_of(tmp_path, "peer_wait", 3)
    # Rank 2, a member of the pair's group that has entered none of its collectives, is behind in
    # both groups and is the cause; rank 1 is said to wait for it.
    lines = [line for line in out.splitlines() if "never entered" in line]
    assert len(lines) == 3, out
    assert re.match(r"rank 2 \(\S+\) never entered collective #4 \(all_reduce, group 0\) that "
                    r"rank 0 waits in; rank 2 is in stuck_here\(\) \(collectives_job\.py:\d+\)$",
                    lines[0]), out
    assert re.match(r"rank 2 \(\S+\) never entered collective #1 \(all_reduce, group 1\) that "
                    r"rank 1 waits in; rank 2 is in stuck_here\(\)", lines[1]), out
    assert re.match(r"rank 1 \(\S+\) never entered collective #4 \(all_reduce, group 0\) that "
                    r"rank 0 waits in; rank 1 waits in collective #1 \(all_reduce, group 1\)$",
                    lines[2]), out
    assert re.search(r"^  group 1: rank 1 at #1 all_reduce\(16 float32\), pending; rank 2 "
                     r"entered none$", out, re.M), out
    assert "no other rank read has used" not in out, out


def test_a_healthy_job_shows_every_rank_at_the_same_collective(tmp_path):
    out = stacks_of(tmp_path, "healthy", 2)
    assert re.search(r"^  group 0 \(default_pg\): ranks 0-1 at #4 barrier", out, re.M), out
    assert "never entered" not in out and "called" not in out, out
