"""A smoke run of the store benchmark (bench/store_scale.py, bench/store_load.cpp) against the
store a real agent serves, so that neither rots: 64 ranks through torch 2.15's start-up."""
import json
import os
import subprocess
import sys

from conftest import TRAINRUN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.dirname(os.path.dirname(os.path.dirname(TRAINRUN)))


def test_64_ranks_pass_the_barrier_of_the_agents_store(tmp_path):
    out = tmp_path / "store_scale.json"
    r = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "store_scale.py"), "--build", BUILD,
         "--python", sys.executable, "--servers", "trainrun", "--clients", "64",
         "--gloo-clients", "64", "--timeout", "60", "--json", str(out)],
        capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads(out.read_text())
    runs = record["runs"]
    assert [(x["pattern"], x["server"], x["clients"]) for x in runs] == [
        ("nccl", "trainrun", 64), ("gloo", "trainrun", 64)], runs
    for run in runs:
        assert run["ranks_past_barrier"] == 64 and run["failed"] == 0, run
        assert run["seconds"] is not None and run["p99_ms"] > 0 and run["cpu_s"] >= 0, run
        assert 0 <= run["cpu_system_s"] <= run["cpu_s"], run
        assert run["generator_cpu_s"] >= run["generator_system_s"] >= 0, run
    # 64 ranks: VALIDATE's PING, init/, the barrier's two ADDs; 63 GETs of NCCL's id.
    assert runs[0]["requests"] == 64 * 4 + 63, runs[0]
    # Gloo: every rank GETs the 63 others' addresses.
    assert runs[1]["requests"] == 64 * 4 + 64 * 63, runs[1]
    assert record["machine"]["cpus"] >= 1 and record["commit"], record
