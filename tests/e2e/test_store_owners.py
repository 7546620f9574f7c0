"""bench/store_owners.py and bench/store_owner_trace.cpp: a smoke run against real agents, so
that neither rots, and their refusals of bad input."""
import json
import os
import subprocess
import sys

from conftest import TRAINRUN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.dirname(os.path.dirname(os.path.dirname(TRAINRUN)))
BENCH = os.path.join(ROOT, "bench", "store_owners.py")
TRACE = os.path.join(BUILD, "bench", "store", "store_owner_trace")


def test_a_small_run_names_every_connection_and_every_rank(tmp_path):
    out = tmp_path / "store_owners.json"
    r = subprocess.run([sys.executable, BENCH, "--build", BUILD, "--workers", "3", "--fds", "2",
                        "--repeat", "2", "--runs", "1", "--json", str(out)],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    record = json.loads(out.read_text())
    res = record["results"]
    [trace] = res["trace"]
    assert trace["workers"] == 3 and len(trace["sock_diag_us"]) == len(trace["table_us"]) == 6
    assert [j["nodes"] for j in res["jobs"]] == [1, 2], res["jobs"]
    for j in res["jobs"]:
        assert len(j["named_after_s"]) == 1 and j["last_at_store_s"][0] > 0, j
    assert sum(res["lines"].values()) > 0 and record["commit"], record


def refusal(args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and r.stdout == "", r
    return r.stderr.strip().splitlines()[-1]


def test_the_trace_refuses_bad_input_in_one_line():
    assert refusal([TRACE]) == "store_owner_trace: --workers W is required"
    assert refusal([TRACE, "--workers", "0"]) == (
        'store_owner_trace: --workers must be a number in 1..1024, not "0"')
    assert refusal([TRACE, "--workers"]) == "store_owner_trace: --workers needs a value"
    assert refusal([TRACE, "--threads", "2"]) == (
        "store_owner_trace: unknown option --threads (--workers W [--fds F] [--repeat R])")


def test_the_bench_refuses_bad_input_in_one_line(tmp_path):
    assert refusal([sys.executable, BENCH, "--build", BUILD, "--workers", "8,x"]).endswith(
        "argument --workers: 'x' is not a number in 1..1024")
    assert refusal([sys.executable, BENCH, "--build", str(tmp_path)]) == (
        f"store_owners: {tmp_path}/apps/trainrun/trainrun is not there: build the trainrun "
        "target")
