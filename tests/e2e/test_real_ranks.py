"""bench/real_ranks.py: its refusals of bad input, one line each, and a smoke run of 2 ranks
under trainrun on torch 2.x (the PyPI configuration), so that it does not rot."""
import json
import os
import subprocess
import sys

from conftest import TRAINRUN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench", "real_ranks.py")


def bench(*args, timeout=120):
    return subprocess.run([sys.executable, BENCH, "--trainrun", TRAINRUN, *args],
                          capture_output=True, text=True, timeout=timeout)


def refused(r, text):
    assert r.returncode != 0, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], r.stderr


def test_an_odd_rank_count_is_refused():
    refused(bench("--python", sys.executable, "--ranks", "3"), "--ranks must be an even number")


def test_no_runs_is_refused():
    refused(bench("--python", sys.executable, "--runs", "0"), "--runs must be 1 or more")


def test_an_unknown_configuration_is_named():
    refused(bench("--python", sys.executable, "--only", "trainrun", "--only", "mpirun"),
            "no configuration 'mpirun'")


def test_a_missing_launcher_is_named(tmp_path):
    r = subprocess.run([sys.executable, BENCH, "--python", sys.executable, "--trainrun",
                        str(tmp_path / "trainrun")], capture_output=True, text=True, timeout=60)
    refused(r, "build the trainrun target")


def test_an_interpreter_without_torch_2_is_refused(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 1.13.1\n")
    python.chmod(0o755)
    refused(bench("--python", str(python)), "has no torch 2.x (found 1.13.1)")
    refused(bench("--python", str(tmp_path / "none")), "cannot run")


# Run by the PyTorch 2.x configuration's interpreter (tests/e2e/CMakeLists.txt, `-k two_ranks`);
# the Debian configuration runs the refusals only.
def test_two_ranks_under_trainrun(tmp_path):
    r = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True)
    assert r.stdout.startswith("2."), f"{sys.executable} has no torch 2.x: {r.stdout}{r.stderr}"
    out = tmp_path / "real_ranks.json"
    r = bench("--python", sys.executable, "--ranks", "2", "--runs", "1", "--only", "trainrun",
              "--only", "trainrun --preload torch", "--only", "trainrun, 2 agents", "--json",
              str(out), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads(out.read_text())
    assert record["failures"] == {} and record["not_run"] == {}, record
    for name in ("trainrun", "trainrun --preload torch", "trainrun, 2 agents"):
        run, = record["results"][name]["runs"]
        assert 0 < run["first_s"] <= run["start_s"] and run["pss_kib"] > 0, (name, run)
    assert record["results"]["trainrun, 2 agents"]["agents"] == 2
