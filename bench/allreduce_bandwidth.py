#!/usr/bin/python3
"""All-reduce bandwidth: libtrainrun_runtime's process group (bench/allreduce/allreduce_bench.cpp)
against Python's torch.distributed (bench/allreduce/allreduce_bench.py), both Gloo on CPU, each
run as `trainrun --standalone --nproc-per-node=N`, 1 KiB to 64 MiB, side by side in one run. The
two alternate run by run (A B, B A, ...) so a busy machine slows both alike; per size, the result
is the median over the rounds of each run's median all-reduce time; every run's is kept.

Usage: bench/allreduce_bandwidth.py [--trainrun PATH] [--bench-bin PATH] [--nproc N] [--rounds N]
                                    [--threads N] [--warmup N] [--iters N] [--min-bytes B]
                                    [--max-bytes B] [--factor F] [--python PATH] [--json PATH]
The PyTorch 2.x configuration: --trainrun build-pypi/apps/trainrun/trainrun --bench-bin
build-pypi/bench/allreduce/allreduce_bench --python .venv-pypi/bin/python (a section of its own).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import (ROOT, add_json_option, heading, median, provenance, publish,  # noqa: E402
                       record, spread, torch_config)

PYTHON = "/usr/bin/python3"
PY_BENCH = os.path.join(ROOT, "bench", "allreduce", "allreduce_bench.py")
RUNTIME, TORCH = "trainrun_runtime", "torch.distributed"


def size_name(nbytes):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def run_once(cmd, env):
    """Runs one benchmark job; returns {bytes: the JSON record of rank 0} and the wall time."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"allreduce_bandwidth: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    records = {}
    for line in r.stdout.splitlines():
        brace = line.find("{")
        if brace < 0:
            continue
        try:
            record = json.loads(line[brace:])
        except json.JSONDecodeError:
            continue
        if "bytes" in record and "median_s" in record:
            records[record["bytes"]] = record
    if not records:
        sys.exit(f"allreduce_bandwidth: no result lines from {' '.join(cmd)}:\n{r.stdout}{r.stderr}")
    return records, wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainrun", default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--bench-bin",
                    default=os.path.join(ROOT, "build", "bench", "allreduce", "allreduce_bench"))
    ap.add_argument("--nproc", type=int, default=4, help="workers (ranks)")
    ap.add_argument("--rounds", type=int, default=7, help="runs of each program, alternating")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every worker")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=0,
                    help="timed all-reduces per size; 0: about 256 MiB per size, 10 to 100")
    ap.add_argument("--min-bytes", type=int, default=1 << 10)
    ap.add_argument("--max-bytes", type=int, default=64 << 20)
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--python", default=PYTHON, help="the Python (and its torch) of the twin")
    add_json_option(ap)
    args = ap.parse_args()
    described, section, title = torch_config(args.python)
    for path in (args.trainrun, args.bench_bin):
        if not os.access(path, os.X_OK):
            sys.exit(f"allreduce_bandwidth: {path}: not an executable; build it first "
                     "(cmake --build build --target trainrun allreduce_bench) or pass "
                     "--trainrun/--bench-bin")

    common = ["--min-bytes", str(args.min_bytes), "--max-bytes", str(args.max_bytes),
              "--factor", str(args.factor), "--warmup", str(args.warmup), "--iters", str(args.iters)]
    launch = [args.trainrun, "--standalone", f"--nproc-per-node={args.nproc}"]
    commands = {RUNTIME: [*launch, args.bench_bin, *common],
                TORCH: [*launch, "--no-python", args.python, PY_BENCH, *common]}

    results = {RUNTIME: [], TORCH: []}
    with tempfile.TemporaryDirectory(prefix="allreduce_bandwidth_") as storage:
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
                   MKL_NUM_THREADS=str(args.threads), TRAINRUN_STORAGE_PATH=storage)
        for r in range(args.rounds):
            order = (RUNTIME, TORCH) if r % 2 == 0 else (TORCH, RUNTIME)
            for impl in order:
                records, wall = run_once(commands[impl], env)
                results[impl].append(records)
                print(f"round {r + 1}/{args.rounds} {impl:17s} {wall:6.1f} s  " + "  ".join(
                    f"{size_name(b)}: {rec['algbw_gbps']:.3g}" for b, rec in sorted(records.items()))
                    + "  (algbw GB/s)", flush=True)

    sizes = sorted(set.intersection(*(set(rec) for runs in results.values() for rec in runs)))
    rows = [{"bytes": nbytes, "iters": results[RUNTIME][0][nbytes]["iters"],
             "runtime_s": [run[nbytes]["median_s"] for run in results[RUNTIME]],
             "torch_s": [run[nbytes]["median_s"] for run in results[TORCH]]} for nbytes in sizes]
    publish("allreduce_bandwidth" + section, record("allreduce_bandwidth" + section, rows, {
        "workers": args.nproc, "rounds": args.rounds, "threads": args.threads,
        "warmup": args.warmup, "arguments": " ".join(common), "torch": described,
        "title": title}), args.json)


def render(rec):
    s = rec["settings"]
    world, rounds = s["workers"], s["rounds"]
    table = ["| size | iters | runtime time (µs) | runtime algbw (GB/s) | runtime busbw (GB/s) | "
             "torch.distributed time (µs) | torch.distributed algbw (GB/s) | torch.distributed "
             "busbw (GB/s) | runtime / torch | runtime / torch, fastest runs |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rec["results"]:
        n = row["bytes"]
        cells = []
        for impl in ("runtime_s", "torch_s"):
            algbw = n / median(row[impl]) / 1e9
            cells += [spread(row[impl], "{:.0f}", 1e6), f"{algbw:.3g}",
                      f"{algbw * 2 * (world - 1) / world:.3g}"]
        ratio = median(row["torch_s"]) / median(row["runtime_s"])
        # The fastest run of each: what each reaches when the machine leaves it alone.
        fastest = min(row["torch_s"]) / min(row["runtime_s"])
        table.append(f"| {size_name(n)} | {row['iters']} | {' | '.join(cells)} | {ratio:.2f}x | "
                     f"{fastest:.2f}x |")
    cpus = rec["machine"]["cpus"]
    oversubscribed = (f" {world} workers on {cpus} CPUs is oversubscribed: every all-reduce waits "
                      "for ranks the scheduler has parked, so the absolute numbers are low and "
                      "noisy; the ratio is what this section is about." if world > cpus else "")
    return heading("All-reduce bandwidth: runtime process group against torch.distributed"
                   + s["title"], rec) + f"""
`bench/allreduce_bandwidth.py` — in-place SUM all-reduce of a float32 tensor across {world}
workers, Gloo on CPU over loopback, through `trainrun::runtime::get_process_group()`
(`bench/allreduce/allreduce_bench.cpp`) and through Python's `torch.distributed.all_reduce`
(`bench/allreduce/allreduce_bench.py`, `init_process_group("gloo")` from the environment), both
as `trainrun --standalone --nproc-per-node={world} PROGRAM {s['arguments']}` with
`OMP_NUM_THREADS={s['threads']}`, on {s['torch']} (one Gloo for both). Per size:
{s['warmup']} warm-up all-reduces (the first checks the sum), then the timed ones; an iteration's
time is the longest over the ranks, a run's time the median over its iterations; the table gives
the median (min–max) over {rounds} runs of each program, alternating between the two run by run,
and the bandwidths and ratios of the medians. algbw = bytes / time; busbw = algbw × 2(n−1)/n (the
bytes each rank sends and receives in a ring). The last column compares the fastest of the
{rounds} runs of each program at that size. GB = 10⁹ bytes. Target: the runtime at parity or
better (ratio ≥ 1 within the noise).{oversubscribed}

""" + "\n".join(table) + "\n\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
