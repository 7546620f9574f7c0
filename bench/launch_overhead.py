#!/usr/bin/python3
"""Launch overhead: `trainrun --standalone --nproc-per-node=N /bin/true` against the reference
torchrun (`--monitor_interval 0.1 --no_python`) and against the floor, a shell starting the same N
programs, N = 1, 4, 16 (--workers): wall time, CPU time and the launcher's peak RSS, medians of
several runs, side by side in one run.
With --wheel BIN (the `trainrun` a pip-installed wheel put in a virtual environment's bin/): the
CMake build, the wheel's binary and torchrun 2.x from the Python of that same environment
(--torchrun2-python to name another), in a section of its own.

Usage: bench/launch_overhead.py [--trainrun PATH] [--workers 1,4,16] [--runs N] [--reference-runs N]
                                [--wheel BIN [--torchrun2-python PYTHON]] [--no-doc] [--json PATH]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import (ROOT, add_json_option, machine, median, peak_rss_kib, run_measured,  # noqa: E402
                       write_json, write_section)

REFERENCE = os.path.join(ROOT, "..", "shared", "peer", "torchrun113.py")


def measure(cmd, runs):
    walls, cpus, rss = [], [], []
    for _ in range(runs):
        code, wall, cpu, maxrss = run_measured(cmd)
        if code != 0:
            sys.exit(f"launch_overhead: {' '.join(cmd)} exited {code}")
        walls.append(wall), cpus.append(cpu)
    rss = [peak_rss_kib(cmd) for _ in range(3)]
    return median(walls), median(cpus), max(rss)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainrun", default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--reference-runs", type=int, default=5)
    ap.add_argument("--workers", default="1,4,16", help="comma-separated worker counts")
    ap.add_argument("--wheel", help="the trainrun binary of an installed wheel")
    ap.add_argument("--torchrun2-python", help="Python with torch 2.x (default: the wheel's)")
    ap.add_argument("--no-doc", action="store_true")
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
        rows.append((n, ours, ref, floor))
        print(f"N={n:2d}  trainrun {ours[0]*1000:8.1f} ms  cpu {ours[1]*1000:7.1f} ms  rss "
              f"{ours[2]/1024:5.1f} MiB   torchrun {ref[0]*1000:8.1f} ms  cpu {ref[1]*1000:7.1f} ms"
              f"  rss {ref[2]/1024:6.1f} MiB   speed-up {ref[0]/ours[0]:6.0f}x   shell "
              f"{floor[0]*1000:6.1f} ms ({ours[0]/floor[0]:.1f}x)", flush=True)

    table = ["| N | trainrun wall | torchrun wall | speed-up | shell wall | trainrun / shell | "
             "trainrun CPU | torchrun CPU | trainrun peak RSS | torchrun peak RSS |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for n, o, r, f in rows:
        table.append(f"| {n} | {o[0]*1000:.1f} ms | {r[0]*1000:.0f} ms | {r[0]/o[0]:.0f}x | "
                     f"{f[0]*1000:.1f} ms | {o[0]/f[0]:.1f} | "
                     f"{o[1]*1000:.1f} ms | {r[1]*1000:.0f} ms | {o[2]/1024:.1f} MiB | "
                     f"{r[2]/1024:.0f} MiB |")
    body = f"""## Launch overhead

`bench/launch_overhead.py` — `trainrun --standalone --nproc-per-node=N /bin/true` against
`torchrun113.py --standalone --nproc_per_node=N --monitor_interval 0.1 --no_python /bin/true`.
Medians of {args.runs} (trainrun) and {args.reference_runs} (torchrun) runs; CPU is user+system
time of the launcher and the workers it reaped; peak RSS is the largest resident set of the
launcher or any of its workers, measured with GNU time (`%M`). The shell is the floor: `sh -c
'/bin/true & ... /bin/true & wait'` starting the same N programs. Machine: {machine()}.
Targets: at least 50x faster wall time than torchrun, within 2x of the shell at N = 4, under
10 MiB peak RSS.

""" + "\n".join(table)
    if not args.no_doc:
        write_section("launch_overhead", body)
    write_json(args.json, "launch_overhead", [
        {"workers": n, "trainrun": {"wall_s": o[0], "cpu_s": o[1], "peak_rss_kib": o[2]},
         "torchrun": {"wall_s": r[0], "cpu_s": r[1], "peak_rss_kib": r[2]},
         "shell": {"wall_s": f[0], "cpu_s": f[1], "peak_rss_kib": f[2]}} for n, o, r, f in rows],
        runs=args.runs, reference_runs=args.reference_runs)
    print(body)


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
        rows.append((n, cmake, wheel, ref))
        print(f"N={n:2d}  CMake build {cmake[0]*1000:8.1f} ms  wheel {wheel[0]*1000:8.1f} ms "
              f"({wheel[0]/cmake[0]:.2f}x)  torchrun 2.x {ref[0]*1000:8.1f} ms", flush=True)
    table = ["| N | CMake build wall | wheel wall | wheel / CMake | torchrun 2.x wall | "
             "CMake build CPU | wheel CPU | CMake build peak RSS | wheel peak RSS |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n, c, w, r in rows:
        table.append(f"| {n} | {c[0]*1000:.1f} ms | {w[0]*1000:.1f} ms | {w[0]/c[0]:.2f} | "
                     f"{r[0]*1000:.0f} ms | {c[1]*1000:.1f} ms | {w[1]*1000:.1f} ms | "
                     f"{c[2]/1024:.1f} MiB | {w[2]/1024:.1f} MiB |")
    torchrun_python = ("the same environment's Python" if not args.torchrun2_python
                       else f"`{os.path.relpath(args.torchrun2_python, ROOT)}`")
    body = f"""## Launch overhead of the wheel

`bench/launch_overhead.py --wheel` — `trainrun --standalone --nproc-per-node=N /bin/true` from the
CMake build (`{os.path.relpath(args.trainrun, ROOT)}`, GCC, shared libraries) and from the wheel
(the static zig-built binary, a unity build at `-Os`, that `pip install` put in the virtual
environment's `bin/`), and `python -m torch.distributed.run` (torchrun 2.x) of {torchrun_python}. Medians of
{args.runs} (trainrun) and {args.reference_runs} (torchrun) runs, CPU and peak RSS as above.
Machine: {machine()}. Target: the wheel within 10% of the CMake build.

""" + "\n".join(table)
    if not args.no_doc:
        write_section("launch_overhead_wheel", body)
    write_json(args.json, "launch_overhead_wheel", [
        {"workers": n, "cmake": {"wall_s": c[0], "cpu_s": c[1], "peak_rss_kib": c[2]},
         "wheel": {"wall_s": w[0], "cpu_s": w[1], "peak_rss_kib": w[2]},
         "torchrun2": {"wall_s": r[0], "cpu_s": r[1], "peak_rss_kib": r[2]}}
        for n, c, w, r in rows], runs=args.runs, reference_runs=args.reference_runs)
    print(body)


if __name__ == "__main__":
    main()
