#!/usr/bin/python3
"""Supervision costs, trainrun against the reference torchrun side by side in one run:
 (a) time from a worker's death to the launcher's exit, 8 workers;
 (b) CPU used by the launcher while 8 workers sleep for 10 s;
 (c) --tee 3 throughput with 4 workers printing LINES lines each (MB/s, lines/s, CPU per GB).

Usage: bench/supervision.py [--trainrun PATH] [--worker PATH] [--lines N] [--runs N] [--no-doc]
                            [--json PATH]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import ROOT, add_json_option, machine, median, write_json, write_section  # noqa: E402

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
    ap.add_argument("--no-doc", action="store_true")
    add_json_option(ap)
    ARGS = ap.parse_args()

    rows, samples = {}, {}
    for kind in ("trainrun", "torchrun"):
        latencies = [death_to_exit(kind) for _ in range(ARGS.runs)]
        lat = median(latencies)
        print(f"{kind}: death to exit {lat*1000:.1f} ms", flush=True)
        idle, window = idle_cpu(kind, ARGS.idle_seconds)
        print(f"{kind}: idle CPU {idle:.4f} s over {window:.0f} s", flush=True)
        wall, nbytes, nlines, cpu = tee_throughput(kind, ARGS.lines)
        print(f"{kind}: tee {nbytes/wall/1e6:.1f} MB/s, {nlines/wall:,.0f} lines/s, "
              f"launcher CPU {cpu:.2f} s = {cpu/(nbytes/1e9):.2f} s/GB", flush=True)
        rows[kind] = (lat, idle, window, wall, nbytes, nlines, cpu)
        samples[kind] = latencies

    t, r = rows["trainrun"], rows["torchrun"]
    body = f"""## Supervision

`bench/supervision.py` — 8 workers for (a) and (b), 4 for (c); the reference runs with
`--monitor_interval 0.1` (1.13's default is 5 s). Medians of {ARGS.runs} runs for (a).
Machine: {machine()}; load average {os.getloadavg()[0]:.1f} at the end of the run.

| measure | trainrun | torchrun | target |
|---|---|---|---|
| (a) worker death → launcher exit | {t[0]*1000:.1f} ms | {r[0]*1000:.0f} ms | < 50 ms |
| (b) launcher CPU while 8 workers sleep ({t[2]:.0f} s window) | {t[1]*1000:.3f} ms | {r[1]*1000:.0f} ms | < 10 ms |
| (c) `--tee 3`, 4 × {ARGS.lines:,} lines: throughput | {t[4]/t[3]/1e6:.1f} MB/s | {r[4]/r[3]/1e6:.1f} MB/s | ≥ 5× reference |
| (c) lines per second | {t[5]/t[3]:,.0f} | {r[5]/r[3]:,.0f} | |
| (c) launcher CPU per GB | {t[6]/(t[4]/1e9):.2f} s | {r[6]/(r[4]/1e9):.2f} s | |
| (c) wall time | {t[3]:.2f} s | {r[3]:.2f} s | |

(a) is measured from the failing worker's own clock reading just before it exits
(CLOCK_MONOTONIC) to the moment the benchmark sees the launcher exit. (b) reads the launcher's
threads' run time from `/proc/<pid>/task/*/schedstat` (nanoseconds) between 1 s after the start
and 1 s before the workers end. Throughput speed-up:
{(t[4]/t[3])/(r[4]/r[3]):.1f}×.
"""
    if not ARGS.no_doc:
        write_section("supervision", body)
    write_json(ARGS.json, "supervision", {
        kind: {"death_to_exit_s": samples[kind], "death_to_exit_median_s": row[0],
               "idle_cpu_s": row[1], "idle_window_s": row[2], "tee_wall_s": row[3],
               "tee_bytes": row[4], "tee_lines": row[5], "tee_launcher_cpu_s": row[6]}
        for kind, row in rows.items()}, runs=ARGS.runs, lines=ARGS.lines, workers_death=8,
        workers_tee=4)
    print(body)


if __name__ == "__main__":
    main()
