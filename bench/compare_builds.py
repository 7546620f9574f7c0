#!/usr/bin/python3
"""Two builds of trainrun side by side, in one run: the launch overhead (`trainrun --standalone
--nproc-per-node=N /bin/true`: wall and CPU time) and the built-in rendezvous' round at
16,384 agents (bench/rendezvous_scale: the round and the exit barrier), every run kept, each pair run
alternately so that the machine's load falls on both alike; the ratio after/before says whether a
change made either slower.

Usage: bench/compare_builds.py --before BUILD_DIR --after BUILD_DIR [--workers 1,8] [--runs 11]
                               [--agents 16384] [--round-runs 5] [--json PATH]
BUILD_DIR is a CMake build directory holding apps/trainrun/trainrun and
bench/rendezvous/rendezvous_scale.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import add_json_option, heading, median, provenance, publish, record, run_measured, spread  # noqa: E402


def binaries(build):
    trainrun = os.path.join(build, "apps", "trainrun", "trainrun")
    scale = os.path.join(build, "bench", "rendezvous", "rendezvous_scale")
    for path in (trainrun, scale):
        if not os.access(path, os.X_OK):
            sys.exit(f"compare_builds: {path} is not there: build the trainrun and rendezvous_scale "
                     f"targets in {build}")
    return trainrun, scale


def revision(build):
    """The commit a build directory was configured from (its CMakeCache's source directory)."""
    source = ""
    with open(os.path.join(build, "CMakeCache.txt")) as cache:
        for line in cache:
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                source = line.split("=", 1)[1].strip()
    r = subprocess.run(["git", "-C", source, "log", "-1", "--format=%h %s"], capture_output=True,
                       text=True)
    return r.stdout.strip() or source


def launch(trainrun, workers):
    cmd = [trainrun, "--standalone", f"--nproc-per-node={workers}", "/bin/true"]
    code, wall, cpu, _ = run_measured(cmd)
    if code != 0:
        sys.exit(f"compare_builds: {' '.join(cmd)} exited {code}")
    return wall, cpu


def round_once(scale, agents):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        r = subprocess.run([scale, "--sizes", str(agents), "--json", out.name],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            sys.exit(f"compare_builds: {scale} exited {r.returncode}: {r.stderr.strip()[-500:]}")
        row = json.load(open(out.name))["results"][0]
    if not row["ok"]:
        sys.exit(f"compare_builds: {scale}: the round of {agents} did not complete")
    return row["round_s"], row["barrier_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="build directory of the earlier revision")
    ap.add_argument("--after", required=True, help="build directory of the later revision")
    ap.add_argument("--workers", default="1,8", help="comma-separated worker counts")
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--agents", type=int, default=16384)
    ap.add_argument("--round-runs", type=int, default=5)
    add_json_option(ap)
    args = ap.parse_args()
    builds = {"before": binaries(args.before), "after": binaries(args.after)}
    # 16,384 agents need as many descriptors in each process, and more.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    rows = []
    for n in [int(w) for w in args.workers.split(",")]:
        samples = {name: [] for name in builds}
        for _ in range(args.runs):
            for name, (trainrun, _) in builds.items():
                samples[name].append(launch(trainrun, n))
        rows.append({"what": f"launch, {n} worker{'s' if n > 1 else ''}", "unit": "ms",
                     **{name: [s[0] * 1e3 for s in v] for name, v in samples.items()},
                     **{f"{name}_cpu": [s[1] * 1e3 for s in v] for name, v in samples.items()}})
        print(rows[-1]["what"], {k: median(rows[-1][k]) for k in builds}, flush=True)
    rounds = {name: [] for name in builds}
    for _ in range(args.round_runs):
        for name, (_, scale) in builds.items():
            rounds[name].append(round_once(scale, args.agents))
    for i, what in enumerate(["round", "exit barrier"]):
        rows.append({"what": f"{what}, {args.agents:,} agents", "unit": "s",
                     **{name: [r[i] for r in rounds[name]] for name in builds}})
        print(rows[-1]["what"], {k: median(rows[-1][k]) for k in builds}, flush=True)
    publish("compare_builds", record("compare_builds", rows, {
        "runs": args.runs, "round_runs": args.round_runs, "before": revision(args.before),
        "after": revision(args.after)}), args.json)


def render(rec):
    s = rec["settings"]
    lines = ["| measure | before | after | after / before, of the medians |", "|---|---:|---:|---:|"]
    for r in rec["results"]:
        fmt = "{:.1f}" if r["unit"] == "ms" else "{:.3f}"
        lines.append(f"| {r['what']} ({r['unit']}, wall) | {spread(r['before'], fmt)} | "
                     f"{spread(r['after'], fmt)} | {median(r['after']) / median(r['before']):.2f} |")
        if "before_cpu" in r:
            lines.append(f"| {r['what']} (ms, CPU) | {spread(r['before_cpu'])} | "
                         f"{spread(r['after_cpu'])} | "
                         f"{median(r['after_cpu']) / median(r['before_cpu']):.2f} |")
    return heading("Two builds side by side", rec) + f"""
Before: `{s['before']}`; after: `{s['after']}`. Each pair ran alternately in this one run
({s['runs']} launches per count, {s['round_runs']} rounds); median (min–max). On a shared machine,
compare the ratios, not the times. A ratio above 1 means the later build is slower.

""" + "\n".join(lines) + "\n\n" + provenance(rec) + "\n"

if __name__ == "__main__":
    main()
