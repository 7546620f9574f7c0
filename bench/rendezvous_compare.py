#!/usr/bin/python3
"""Multi-node rendezvous with real agents: N launchers started at once on 127.0.0.1, one worker
each, trainrun (`--rdzv-backend=c10d`) against the reference torchrun's c10d rendezvous, N = 2, 4,
8: time from start until every worker has started and until every agent has exited, and the CPU
all agents used; medians of several runs, side by side in one run.

Each worker is `test_worker stamp FILE`: it appends its rank and a CLOCK_MONOTONIC reading and
exits (/bin/true plus one write), so the start of the last worker is measured on the same clock.
Without the test worker, /bin/true is run and only the exit time is reported.

Usage: bench/rendezvous_compare.py [--trainrun PATH] [--worker PATH] [--sizes 2,4,8] [--runs N]
                                   [--reference-runs N] [--json PATH]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import ROOT, add_json_option, heading, median, provenance, publish, record, spread  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tests"))
from ports import free_port  # noqa: E402

REFERENCE = os.path.join(ROOT, "..", "shared", "peer", "torchrun113.py")


def agent_cmd(kind, n, port, worker_cmd):
    if kind == "trainrun":
        return [ARGS.trainrun, f"--nnodes={n}", "--nproc-per-node=1", "--rdzv-backend=c10d",
                f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=bench", *worker_cmd]
    return ["/usr/bin/python3", REFERENCE, f"--nnodes={n}", "--nproc_per_node=1",
            "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=bench",
            "--monitor_interval=0.1", "--no_python", *worker_cmd]


def one_run(kind, n):
    """Returns (all exited s, last worker started s or None, CPU s of all agents and workers)."""
    with tempfile.TemporaryDirectory() as d:
        stamps = os.path.join(d, "stamps")
        worker_cmd = [ARGS.worker, "stamp", stamps] if ARGS.worker else ["/bin/true"]
        port = free_port()
        cmds = [agent_cmd(kind, n, port, worker_cmd) for _ in range(n)]
        errs = [open(os.path.join(d, f"agent{i}.err"), "w+") for i in range(n)]
        t0 = time.monotonic()
        procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=e) for c, e in zip(cmds, errs)]
        cpu, codes = 0.0, {}
        deadline = t0 + ARGS.timeout
        pending = {p.pid: p for p in procs}
        while pending:
            pid, status, ru = os.wait4(-1, os.WNOHANG)
            if pid == 0:
                if time.monotonic() > deadline:
                    for p in pending.values():
                        p.kill()
                    sys.exit(f"rendezvous_compare: {kind} with {n} agents still running after "
                             f"{ARGS.timeout:.0f} s")
                time.sleep(0.001)
                continue
            if pid in pending:
                pending.pop(pid).returncode = os.waitstatus_to_exitcode(status)
                codes[pid] = os.waitstatus_to_exitcode(status)
                cpu += ru.ru_utime + ru.ru_stime
        end = time.monotonic()
        bad = [(i, codes[p.pid]) for i, p in enumerate(procs) if codes[p.pid] != 0]
        if bad:
            i, code = bad[0]
            errs[i].seek(0)
            tail = "".join(errs[i].readlines()[-15:])
            sys.exit(f"rendezvous_compare: {kind} with {n} agents: agent {i} exited {code}:\n{tail}")
        started = None
        if ARGS.worker:
            with open(stamps) as f:
                rows = [line.split() for line in f if line.strip()]
            ranks = sorted(int(r[0]) for r in rows)
            if ranks != list(range(n)):
                sys.exit(f"rendezvous_compare: {kind} with {n} agents: worker ranks {ranks}")
            started = max(float(r[1]) for r in rows) - t0
        for e in errs:
            e.close()
        return end - t0, started, cpu


def measure(kind, n, runs):
    """Every run's exit, start (None without the test worker) and CPU time, in seconds."""
    results = [one_run(kind, n) for _ in range(runs)]
    return {"exited_s": [r[0] for r in results], "started_s": [r[1] for r in results],
            "cpu_s": [r[2] for r in results]}


def ms(xs):
    if any(x is None for x in xs):
        return "n/a"
    return spread(xs, "{:.0f}" if median(xs) >= 1 else "{:.1f}", 1e3)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainrun", default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--worker", default=os.path.join(ROOT, "build", "tests", "workers", "test_worker"),
                    help="test worker with the `stamp` action; '' runs /bin/true instead")
    ap.add_argument("--sizes", default="2,4,8", help="comma-separated agent counts")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--reference-runs", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run before giving up")
    add_json_option(ap)
    ARGS = ap.parse_args()
    try:
        sizes = [int(x) for x in ARGS.sizes.split(",")]
    except ValueError:
        ap.error(f"--sizes {ARGS.sizes}: expected comma-separated integers, e.g. 2,4,8")
    if not sizes or any(n < 1 for n in sizes):
        ap.error(f"--sizes {ARGS.sizes}: every size must be at least 1")
    if ARGS.runs < 1 or ARGS.reference_runs < 1:
        ap.error("--runs and --reference-runs must be at least 1")
    if not os.access(ARGS.trainrun, os.X_OK):
        ap.error(f"--trainrun {ARGS.trainrun}: not an executable; build it or pass its path")
    if ARGS.worker and not os.access(ARGS.worker, os.X_OK):
        ap.error(f"--worker {ARGS.worker}: not an executable; build test_worker or pass --worker ''")

    rows = []
    for n in sizes:
        ours = measure("trainrun", n, ARGS.runs)
        ref = measure("torchrun", n, ARGS.reference_runs)
        rows.append({"agents": n, "trainrun": ours, "torchrun": ref})
        print(f"N={n:2d}  trainrun exited {ms(ours['exited_s'])} ms   torchrun exited "
              f"{ms(ref['exited_s'])} ms", flush=True)
    publish("rendezvous_compare", record("rendezvous_compare", rows, {
        "runs": ARGS.runs, "reference_runs": ARGS.reference_runs,
        "worker": "test_worker" if ARGS.worker else "/bin/true"}), ARGS.json)


def render(rec):
    s = rec["settings"]
    table = ["| agents | trainrun: all workers started (ms) | torchrun: all workers started (ms) | "
             "trainrun: all agents exited (ms) | torchrun: all agents exited (ms) | speed-up | "
             "trainrun CPU (ms) | torchrun CPU (ms) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rec["results"]:
        o, r = row["trainrun"], row["torchrun"]
        table.append(f"| {row['agents']} | {ms(o['started_s'])} | {ms(r['started_s'])} | "
                     f"{ms(o['exited_s'])} | {ms(r['exited_s'])} | "
                     f"{median(r['exited_s']) / median(o['exited_s']):.0f}x | {ms(o['cpu_s'])} | "
                     f"{ms(r['cpu_s'])} |")
    worker = ("`test_worker stamp FILE` (appends its rank and a CLOCK_MONOTONIC reading,\nthen "
              "exits)" if s.get("worker") == "test_worker" else "`/bin/true`")
    return heading("Rendezvous with real agents", rec) + f"""
`bench/rendezvous_compare.py` — N agents started at once on 127.0.0.1, one worker each, forming
one job: `trainrun --nnodes=N --nproc-per-node=1 --rdzv-backend=c10d
--rdzv-endpoint=127.0.0.1:PORT` against `torchrun113.py --nnodes=N --nproc_per_node=1
--rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:PORT --monitor_interval=0.1 --no_python`.
The worker is {worker}. Times run from starting the first agent to the last worker's own clock
reading (started) and to the last agent's exit (exited: rendezvous, the workers and the exit
barrier); CPU is user+system time of all agents and their workers. Median (min–max) of
{s['runs']} (trainrun) and {s['reference_runs']} (torchrun) runs; the speed-up is of the medians
of the exits. Other processes compete for the CPUs, which slows the reference's Python start-up
most.

""" + "\n".join(table) + "\n\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
