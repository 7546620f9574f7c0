"""The preflight's cost when all is well: N real trainrun agents on this machine form one job
(c10d rendezvous on loopback, one worker each that exits at once), each run with -v; the time each
agent's preflight took (its "preflight passed: ... (T ms)" line) is read back. Prints the median and
the slowest over the agents, for each N, median of --runs jobs.

  python3 bench/preflight_cost.py --trainrun build/apps/trainrun/trainrun \
      --worker build/tests/workers/test_worker --sizes 2,8 --runs 5
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
from ports import free_port  # noqa: E402

PASSED = re.compile(r"preflight passed: .*\(([0-9.]+) ms\)")


def one_job(trainrun, worker, n):
    port = free_port()
    args = [trainrun, "-v", f"--nnodes={n}", "--nproc-per-node=1", "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=bench", worker, "exit", "0"]
    agents = [subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for _ in range(n)]
    times = []
    for a in agents:
        _, err = a.communicate(timeout=120)
        if a.returncode != 0:
            sys.exit(f"an agent failed ({a.returncode}):\n{err}")
        times += [float(m.group(1)) / 1000 for m in PASSED.finditer(err)]
    if len(times) != n:
        sys.exit(f"expected {n} preflight lines, got {len(times)}")
    return statistics.median(times), max(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainrun", required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--sizes", default="2,8")
    p.add_argument("--runs", type=int, default=5)
    o = p.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| agents | preflight, median agent (ms) | preflight, slowest agent (ms) |")
    print("|---:|---:|---:|")
    for n in (int(x) for x in o.sizes.split(",")):
        runs = [one_job(o.trainrun, o.worker, n) for _ in range(o.runs)]
        med = statistics.median(r[0] for r in runs) * 1000
        slow = statistics.median(r[1] for r in runs) * 1000
        print(f"| {n} | {med:.1f} | {slow:.1f} |")


if __name__ == "__main__":
    main()
