#!/usr/bin/python3
"""Supervision costs, trainrun against the reference torchrun side by side in one run:
 (a) time from a worker's death to the launcher's exit, 8 workers;
 (b) CPU used by the launcher while 8 workers sleep for 10 s;
 (c) --tee 3 throughput with 4 workers printing LINES lines each (MB/s, lines/s, CPU per GB).

Each measure runs --runs times, the launchers in turn; every run's values go into the record.

Usage: bench/supervision.py [--trainrun PATH] [--worker PATH] [--lines N] [--runs N] [--json PATH]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import ROOT, add_json_option, heading, median, provenance, publish, record, spread  # noqa: E402

REFERENCE = os.path.join(ROOT, "..", "shared", "peer", "torchrun113.py")
TICK = os.sysconf("SC_CLK_TCK")


def launcher(kind, args, nproc, extra=()):
    if kind == "trainrun":
        return [ARGS.trainrun, f"--nproc-per-node={nproc}", *extra, ARGS.worker, *args]
    underscored = ["--" + e[2:].split("=")[0].replace("-", "_") + e[len(e.split("=")[0]):]
                   for e in extra]
    return ["/usr/bin/python3", REFERENCE, f"--nproc_per_node={nproc}", "--monitor_interval", "0.1",
            *underscored, "--no_python", ARGS.worker, *args]


def process_cpu(pid):
    """CPU seconds of `pid` alone (all its threads, not its children)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def precise_cpu(pid):
    """CPU seconds of `pid`'s threads from schedstat (nanoseconds)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


class CpuWatcher(threading.Thread):
    """Keeps the last CPU reading of a process until it exits."""

    def __init__(self, pid, read=process_cpu, interval=0.02):
        super().__init__(daemon=True)
        self.pid, self.read, self.interval, self.last = pid, read, interval, 0.0
        self.running = True

    def run(self):
        while self.running:
            try:
                self.last = self.read(self.pid)
            except (OSError, IndexError, ValueError):
                return
            time.sleep(self.interval)


def death_to_exit(kind):
    with tempfile.TemporaryDirectory() as d:
        stamps = os.path.join(d, "stamps")
        # Rank 3 reads the clock just before it dies; the others keep sleeping.
        cmd = launcher(kind, ["sleep", "1.5", "rank-stamp-exit", "3", stamps, "1", "sleep", "60"], 8)
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        p.wait(timeout=120)
        end = time.monotonic()
        with open(stamps) as f:
            died = float(f.read().split()[1])
        return end - died


def idle_cpu(kind, seconds):
    p = subprocess.Popen(launcher(kind, ["sleep", str(seconds)], 8), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # past start-up
    start = precise_cpu(p.pid)
    time.sleep(seconds - 2.0)
    used = precise_cpu(p.pid) - start
    p.wait(timeout=120)
    return used, seconds - 2.0


def tee_throughput(kind, lines, width=100):
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        p = subprocess.Popen(launcher(kind, ["spew", str(lines), str(width)], 4,
                                      extra=["--tee=3", f"--log-dir={d}"]),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        w = CpuWatcher(p.pid)
        w.start()
        p.wait(timeout=3600)
        wall = time.monotonic() - t0
        w.running = False
        total_bytes = 4 * lines * (width + 1)
        return wall, total_bytes, 4 * lines, w.last


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainrun", default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--worker", default=os.path.join(ROOT, "build", "tests", "workers", "test_worker"))
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    add_json_option(ap)
    ARGS = ap.parse_args()

    kinds = ("trainrun", "torchrun")
    res = {k: {"death_to_exit_s": [], "idle_cpu_s": [], "tee_wall_s": [],
               "tee_launcher_cpu_s": []} for k in kinds}
    for _ in range(ARGS.runs):
        for kind in kinds:
            res[kind]["death_to_exit_s"].append(death_to_exit(kind))
    for _ in range(ARGS.runs):
        for kind in kinds:
            idle, window = idle_cpu(kind, ARGS.idle_seconds)
            res[kind]["idle_cpu_s"].append(idle)
            res[kind]["idle_window_s"] = window
    for _ in range(ARGS.runs):
        for kind in kinds:
            wall, nbytes, nlines, cpu = tee_throughput(kind, ARGS.lines)
            res[kind]["tee_wall_s"].append(wall), res[kind]["tee_launcher_cpu_s"].append(cpu)
            res[kind]["tee_bytes"], res[kind]["tee_lines"] = nbytes, nlines
    for kind in kinds:
        print(f"{kind}: death to exit {median(res[kind]['death_to_exit_s'])*1000:.1f} ms, idle "
              f"CPU {median(res[kind]['idle_cpu_s'])*1000:.3f} ms, tee "
              f"{median(res[kind]['tee_wall_s']):.2f} s", flush=True)
    publish("supervision", record("supervision", res, {
        "runs": ARGS.runs, "lines": ARGS.lines, "workers_death": 8, "workers_tee": 4}), ARGS.json)


def render(rec):
    s, t, r = rec["settings"], rec["results"]["trainrun"], rec["results"]["torchrun"]

    def rate(x, per):
        return [x[per] / w for w in x["tee_wall_s"]]

    def per_gb(x):
        return [c / (x["tee_bytes"] / 1e9) for c in x["tee_launcher_cpu_s"]]

    speedup = median(rate(t, "tee_bytes")) / median(rate(r, "tee_bytes"))
    return heading("Supervision", rec) + f"""
`bench/supervision.py` — 8 workers for (a) and (b), 4 for (c); the reference runs with
`--monitor_interval 0.1` (1.13's default is 5 s). Median (min–max) of {s['runs']} runs of each
measure, the launchers in turn.

| measure | trainrun | torchrun | target |
|---|---:|---:|---|
| (a) worker death → launcher exit (ms) | {spread(t['death_to_exit_s'], '{:.1f}', 1e3)} | {spread(r['death_to_exit_s'], '{:.0f}', 1e3)} | < 50 ms |
| (b) launcher CPU while 8 workers sleep, {t['idle_window_s']:.0f} s window (ms) | {spread(t['idle_cpu_s'], '{:.3f}', 1e3)} | {spread(r['idle_cpu_s'], '{:.0f}', 1e3)} | < 10 ms |
| (c) `--tee 3`, 4 × {s['lines']:,} lines: throughput (MB/s) | {spread(rate(t, 'tee_bytes'), '{:.1f}', 1e-6)} | {spread(rate(r, 'tee_bytes'), '{:.1f}', 1e-6)} | ≥ 5× reference |
| (c) lines per second (thousands) | {spread(rate(t, 'tee_lines'), '{:,.0f}', 1e-3)} | {spread(rate(r, 'tee_lines'), '{:,.0f}', 1e-3)} | |
| (c) launcher CPU per GB (s) | {spread(per_gb(t), '{:.2f}')} | {spread(per_gb(r), '{:.2f}')} | |
| (c) wall time (s) | {spread(t['tee_wall_s'], '{:.2f}')} | {spread(r['tee_wall_s'], '{:.2f}')} | |

(a) is measured from the failing worker's own clock reading just before it exits
(CLOCK_MONOTONIC) to the moment the benchmark sees the launcher exit. (b) reads the launcher's
threads' run time from `/proc/<pid>/task/*/schedstat` (nanoseconds) between 1 s after the start
and 1 s before the workers end. Throughput speed-up, of the medians: {speedup:.1f}×.

""" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
