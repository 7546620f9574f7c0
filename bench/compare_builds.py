#!/usr/bin/python3
"""Two builds of trainrun side by side, in one run: the launch overhead (`trainrun --standalone
--nproc-per-node=N /bin/true`: wall and CPU time, medians) and the built-in rendezvous' round at
16,384 agents (bench/rendezvous_scale: the round and the exit barrier, medians), each pair run
alternately so that the machine's load falls on both alike; the ratio after/before says whether a
change made either slower.

Usage: bench/compare_builds.py --before BUILD_DIR --after BUILD_DIR [--workers 1,8] [--runs 11]
                               [--agents 16384] [--round-runs 3] [--no-doc] [--json PATH]
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
from bench_doc import add_json_option, machine, median, run_measured, write_json, write_section  # noqa: E402


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
    ap.add_argument("--round-runs", type=int, default=3)
    ap.add_argument("--no-doc", action="store_true")
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
        walls = {k: median([s[0] for s in v]) for k, v in samples.items()}
        cpus = {k: median([s[1] for s in v]) for k, v in samples.items()}
        rows.append({"what": f"launch, {n} worker{'s' if n > 1 else ''}", "unit": "ms",
                     "before": walls["before"] * 1e3, "after": walls["after"] * 1e3,
                     "before_cpu": cpus["before"] * 1e3, "after_cpu": cpus["after"] * 1e3})
        print(rows[-1], flush=True)
    rounds = {name: [] for name in builds}
    for _ in range(args.round_runs):
        for name, (_, scale) in builds.items():
            rounds[name].append(round_once(scale, args.agents))
    for i, what in enumerate(["round", "exit barrier"]):
        rows.append({"what": f"{what}, {args.agents:,} agents", "unit": "s",
                     "before": median([r[i] for r in rounds["before"]]),
                     "after": median([r[i] for r in rounds["after"]])})
        print(rows[-1], flush=True)

    lines = [f"## Two builds side by side\n",
             f"Machine: {machine()}. Before: `{revision(args.before)}`; after: "
             f"`{revision(args.after)}`. Each pair ran alternately in this one run "
             f"({args.runs} launches per count, {args.round_runs} rounds); medians; load "
             f"average {os.getloadavg()[0]:.1f} at the end (on a shared machine, compare the "
             f"ratios, not the times). A ratio above 1 means the later build is slower.\n",
             "| measure | before | after | after / before |", "|---|---:|---:|---:|"]
    for r in rows:
        fmt = "{:.1f}" if r["unit"] == "ms" else "{:.3f}"
        lines.append(f"| {r['what']} ({r['unit']}, wall) | {fmt.format(r['before'])} | "
                     f"{fmt.format(r['after'])} | {r['after'] / r['before']:.2f} |")
        if "before_cpu" in r:
            lines.append(f"| {r['what']} (ms, CPU) | {r['before_cpu']:.1f} | {r['after_cpu']:.1f} | "
                         f"{r['after_cpu'] / r['before_cpu']:.2f} |")
    body = "\n".join(lines) + "\n"
    print(body)
    if not args.no_doc:
        write_section("compare_builds", body)
    write_json(args.json, "compare_builds", rows, runs=args.runs, round_runs=args.round_runs)


if __name__ == "__main__":
    main()
