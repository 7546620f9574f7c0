#!/usr/bin/python3
"""The flight recorder's cost: what trainrun's TORCH_FR_BUFFER_SIZE=2000 (set for every Python
worker of torch 2.x, docs/hangs.md) costs a Gloo all-reduce loop, against the same loop with the
recorder off (TORCH_FR_BUFFER_SIZE=0, which the user may set), in one run.

Two workers under trainrun run --iterations all-reduces of --elements float32 each after a warm-up;
rank 0 reports the loop's seconds. Each setting runs in turn, --runs times; every run is kept.

Usage: bench/flight_recorder.py --python VENV/bin/python [--trainrun PATH] [--runs 7]
                               [--iterations 2000] [--elements 1024,262144] [--json PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import ROOT, add_json_option, heading, median, provenance, publish, record, spread  # noqa: E402

JOB = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
out, iterations, elements = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
t = torch.ones(elements)
for _ in range(50):
    dist.all_reduce(t)
dist.barrier()
start = time.perf_counter()
for _ in range(iterations):
    dist.all_reduce(t)
seconds = time.perf_counter() - start
if dist.get_rank() == 0:
    with open(out, "w") as f:
        json.dump({"seconds": seconds}, f)
dist.destroy_process_group()
'''


def loop_seconds(trainrun, python, job, iterations, elements, buffer):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "out.json")
        env = dict(os.environ, PYTHON_EXEC=python, TORCH_FR_BUFFER_SIZE=buffer)
        subprocess.run([trainrun, "--standalone", "--nproc-per-node=2", job, out,
                        str(iterations), str(elements)], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
        with open(out) as f:
            return json.load(f)["seconds"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True)
    parser.add_argument("--trainrun", default=os.path.join(ROOT, "build/apps/trainrun/trainrun"))
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--elements", default="1024,262144")
    add_json_option(parser)
    args = parser.parse_args()
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    sizes = [int(x) for x in args.elements.split(",")]
    settings = {"off (TORCH_FR_BUFFER_SIZE=0)": "0", "on (2000 entries, trainrun's)": "2000"}
    samples = {(n, s): [] for n in sizes for s in settings}
    with tempfile.TemporaryDirectory() as tmp:
        job = os.path.join(tmp, "allreduce_loop.py")
        with open(job, "w") as f:
            f.write(JOB)
        for _ in range(args.runs):
            for n in sizes:
                for name, buffer in settings.items():
                    s = loop_seconds(args.trainrun, args.python, job, args.iterations, n, buffer)
                    samples[(n, name)].append(s)
                    print(f"{n:>8} floats  {name:32s} {s / args.iterations * 1e6:8.1f} us/all-reduce",
                          flush=True)
    off, on = list(settings)
    rows = [{"elements": n, "off_s": samples[(n, off)], "on_s": samples[(n, on)]} for n in sizes]
    publish("flight_recorder", record("flight_recorder", rows, {
        "runs": args.runs, "iterations": args.iterations, "torch": version}), args.json)


def render(rec):
    s = rec["settings"]
    us = 1e6 / s["iterations"]
    table = ["| tensor | recorder off (µs per all-reduce) | on (µs) | on / off, of the medians |",
             "|---|---:|---:|---:|"]
    for row in rec["results"]:
        n = row["elements"]
        table.append(f"| {n} float32 ({n * 4 // 1024} KiB) | {spread(row['off_s'], '{:.1f}', us)} | "
                     f"{spread(row['on_s'], '{:.1f}', us)} | "
                     f"{median(row['on_s']) / median(row['off_s']):.3f} |")
    return heading("The flight recorder's cost", rec) + f"""
`bench/flight_recorder.py` — a loop of {s['iterations']} Gloo all-reduces on 2 workers under
trainrun (PyTorch {s['torch']}), with the flight recorder off (`TORCH_FR_BUFFER_SIZE=0`) and on as
trainrun sets it for every Python worker of torch 2.x (2000 entries): the loop's time per
all-reduce, median (min–max) of {s['runs']} runs, the two settings in turn.

""" + "\n".join(table) + "\n\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
