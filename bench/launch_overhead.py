#!/usr/bin/python3
"""Launch overhead: `trainrun --standalone --nproc-per-node=N /bin/true` against the reference
torchrun (`--monitor_interval 0.1 --no_python`) and against the floor, a shell starting the same N
programs, N = 1, 4, 16 (--workers): wall time, CPU time and the launcher's peak RSS, medians of
several runs, side by side in one run.
With --wheel BIN (the `trainrun` a pip-installed wheel put in a virtual environment's bin/): the
CMake build, the wheel's binary and torchrun 2.x from the Python of that same environment
(--torchrun2-python to name another), in a section of its own.

Usage: bench/launch_overhead.py [--trainrun PATH] [--workers 1,4,16] [--runs N] [--reference-runs N]
                                [--wheel BIN [--torchrun2-python PYTHON]] [--json PATH]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import (ROOT, add_json_option, heading, median, peak_rss_kib, provenance,  # noqa: E402
                       publish, record, run_measured, spread)

REFERENCE = os.path.join(ROOT, "..", "shared", "peer", "torchrun113.py")


def measure(cmd, runs):
    """Every run's wall and CPU time (s), and GNU time's peak RSS (KiB) of three more."""
    walls, cpus = [], []
    for _ in range(runs):
        code, wall, cpu, _ = run_measured(cmd)
        if code != 0:
            sys.exit(f"launch_overhead: {' '.join(cmd)} exited {code}")
        walls.append(wall), cpus.append(cpu)
    return {"wall_s": walls, "cpu_s": cpus, "peak_rss_kib": [peak_rss_kib(cmd) for _ in range(3)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainrun", default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--reference-runs", type=int, default=5)
    ap.add_argument("--workers", default="1,4,16", help="comma-separated worker counts")
    ap.add_argument("--wheel", help="the trainrun binary of an installed wheel")
    ap.add_argument("--torchrun2-python", help="Python with torch 2.x (default: the wheel's)")
    add_json_option(ap)
    args = ap.parse_args()
    try:
        counts = [int(x) for x in args.workers.split(",")]
    except ValueError:
        ap.error(f"--workers {args.workers}: expected comma-separated integers, e.g. 1,4,16")
    if args.wheel:
        return compare_wheel(args, counts)

    rows = []
    for n in counts:
        ours = measure([args.trainrun, "--standalone", f"--nproc-per-node={n}", "/bin/true"], args.runs)
        ref = measure(["/usr/bin/python3", REFERENCE, "--standalone", f"--nproc_per_node={n}",
                       "--monitor_interval", "0.1", "--no_python", "/bin/true"], args.reference_runs)
        # The floor: a shell that starts the same N programs and waits for them.
        floor = measure(["/bin/sh", "-c", " ".join(["/bin/true &"] * n) + " wait"], args.runs)
        rows.append({"workers": n, "trainrun": ours, "torchrun": ref, "shell": floor})
        print(f"N={n:2d}  trainrun {median(ours['wall_s'])*1000:8.1f} ms   torchrun "
              f"{median(ref['wall_s'])*1000:8.1f} ms   shell {median(floor['wall_s'])*1000:6.1f} ms",
              flush=True)
    publish("launch_overhead", record("launch_overhead", rows, {
        "runs": args.runs, "reference_runs": args.reference_runs}), args.json)


def ms(xs):
    return spread(xs, "{:.1f}", 1e3)


def mib(kib):
    return f"{max(kib) / 1024:.1f}"


def render(rec):
    s = rec["settings"]
    table = ["| N | trainrun wall (ms) | torchrun wall (ms) | speed-up | shell wall (ms) | "
             "trainrun / shell | trainrun CPU (ms) | torchrun CPU (ms) | trainrun peak RSS (MiB) "
             "| torchrun peak RSS (MiB) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rec["results"]:
        o, r, f = row["trainrun"], row["torchrun"], row["shell"]
        table.append(f"| {row['workers']} | {ms(o['wall_s'])} | {spread(r['wall_s'], '{:.0f}', 1e3)} | "
                     f"{median(r['wall_s']) / median(o['wall_s']):.0f}x | {ms(f['wall_s'])} | "
                     f"{median(o['wall_s']) / median(f['wall_s']):.1f} | {ms(o['cpu_s'])} | "
                     f"{spread(r['cpu_s'], '{:.0f}', 1e3)} | {mib(o['peak_rss_kib'])} | "
                     f"{mib(r['peak_rss_kib'])} |")
    return heading("Launch overhead", rec) + f"""
`bench/launch_overhead.py` — `trainrun --standalone --nproc-per-node=N /bin/true` against
`torchrun113.py --standalone --nproc_per_node=N --monitor_interval 0.1 --no_python /bin/true`.
Median (min–max) of {s['runs']} (trainrun, shell) and {s['reference_runs']} (torchrun) runs; the
ratios are of the medians. CPU is user+system time of the launcher and the workers it reaped;
peak RSS is the largest resident set of the launcher or any of its workers over 3 more runs,
measured with GNU time (`%M`). The shell is the floor: `sh -c '/bin/true & ... /bin/true &
wait'` starting the same N programs. Targets: at least 50x faster wall time than torchrun,
within 2x of the shell at N = 4, under 10 MiB peak RSS.

""" + "\n".join(table) + "\n\n" + provenance(rec) + "\n"


def compare_wheel(args, counts):
    python = args.torchrun2_python or os.path.join(os.path.dirname(args.wheel), "python")
    for path in (args.trainrun, args.wheel, python):
        if not os.access(path, os.X_OK):
            sys.exit(f"launch_overhead: {path} is not an executable")
    rows = []
    for n in counts:
        cmake = measure([args.trainrun, "--standalone", f"--nproc-per-node={n}", "/bin/true"],
                        args.runs)
        wheel = measure([args.wheel, "--standalone", f"--nproc-per-node={n}", "/bin/true"],
                        args.runs)
        ref = measure([python, "-m", "torch.distributed.run", "--standalone",
                       f"--nproc-per-node={n}", "--monitor-interval=0.1", "--no-python",
                       "/bin/true"], args.reference_runs)
        rows.append({"workers": n, "cmake": cmake, "wheel": wheel, "torchrun2": ref})
        print(f"N={n:2d}  CMake build {median(cmake['wall_s'])*1000:8.1f} ms  wheel "
              f"{median(wheel['wall_s'])*1000:8.1f} ms  torchrun 2.x "
              f"{median(ref['wall_s'])*1000:8.1f} ms", flush=True)
    publish("launch_overhead_wheel", record("launch_overhead_wheel", rows, {
        "runs": args.runs, "reference_runs": args.reference_runs,
        "cmake_build": os.path.relpath(args.trainrun, ROOT),
        "torchrun2_python": args.torchrun2_python and os.path.relpath(args.torchrun2_python, ROOT)}),
        args.json)


def render_wheel(rec):
    s = rec["settings"]
    table = ["| N | CMake build wall (ms) | wheel wall (ms) | wheel / CMake | torchrun 2.x wall (ms) | "
             "CMake build CPU (ms) | wheel CPU (ms) | CMake build peak RSS (MiB) | wheel peak RSS (MiB) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rec["results"]:
        c, w, r = row["cmake"], row["wheel"], row["torchrun2"]
        table.append(f"| {row['workers']} | {ms(c['wall_s'])} | {ms(w['wall_s'])} | "
                     f"{median(w['wall_s']) / median(c['wall_s']):.2f} | "
                     f"{spread(r['wall_s'], '{:.0f}', 1e3)} | {ms(c['cpu_s'])} | {ms(w['cpu_s'])} | "
                     f"{mib(c['peak_rss_kib'])} | {mib(w['peak_rss_kib'])} |")
    python = (f"`{s['torchrun2_python']}`" if s.get("torchrun2_python")
              else "the same environment's Python")
    return heading("Launch overhead of the wheel", rec) + f"""
`bench/launch_overhead.py --wheel` — `trainrun --standalone --nproc-per-node=N /bin/true` from the
CMake build (`{s['cmake_build']}`, GCC, shared libraries) and from the wheel (the static
zig-built binary, a unity build at `-Os`, that `pip install` put in the virtual environment's
`bin/`), and `python -m torch.distributed.run` (torchrun 2.x) of {python}. Median (min–max) of
{s['runs']} (trainrun) and {s['reference_runs']} (torchrun) runs, CPU and peak RSS as above.
Target: the wheel within 10% of the CMake build.

""" + "\n".join(table) + "\n\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
