"""The preflight's cost when all is well: N real trainrun agents on this machine form one job
(c10d rendezvous on loopback, one worker each that exits at once), each run with -v; the time each
agent's preflight took (its "preflight passed: ... (T ms)" line) is read back, for every agent of
every job. The simulated part at thousands of nodes is bench/rendezvous_scale.py's.

  python3 bench/preflight_cost.py --trainrun build/apps/trainrun/trainrun \
      --worker build/tests/workers/test_worker --sizes 2,8 --runs 5
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
from ports import free_port  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import add_json_option, heading, median, provenance, publish, record, spread  # noqa: E402

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
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trainrun", required=True)
    p.add_argument("--worker", required=True)
    p.add_argument("--sizes", default="2,8")
    p.add_argument("--runs", type=int, default=5)
    add_json_option(p)
    o = p.parse_args()
    rows = []
    for n in (int(x) for x in o.sizes.split(",")):
        jobs = [one_job(o.trainrun, o.worker, n) for _ in range(o.runs)]
        rows.append({"agents": n, "preflight_s": jobs})
        print(f"{n} agents: {[f'{median(j) * 1000:.1f}' for j in jobs]} ms", flush=True)
    publish("preflight_cost", record("preflight_cost", rows, {"runs": o.runs}), o.json)


def render(rec):
    table = ["| agents | preflight, median agent (ms) | preflight, slowest agent (ms) |",
             "|---:|---:|---:|"]
    for row in rec["results"]:
        jobs = row["preflight_s"]
        table.append(f"| {row['agents']} | {spread([median(j) for j in jobs], '{:.1f}', 1e3)} | "
                     f"{spread([max(j) for j in jobs], '{:.1f}', 1e3)} |")
    return heading("The preflight's cost", rec) + f"""
`bench/preflight_cost.py` — real agents on this machine (c10d rendezvous on loopback, one worker
each), the time from the assignment to the preflight's verdict that each agent prints at `-v`;
for each job the median agent and the slowest, median (min–max) over {rec['settings']['runs']}
jobs. Simulated at thousands of nodes (`rendezvous_scale --preflight`): in "Rendezvous scale"
above.

""" + "\n".join(table) + "\n\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
