"""The wheel's build as a new user meets it: a fresh clone of this repository and `pip wheel -v .`,
with ccache off and zig's cache empty, pip fetching its isolated build environment as it does for
anyone (from its download cache when it has one). zig keeps every object it compiles in its global
cache, so a second build of the same sources is mostly cache hits: `--zig-cache both` measures that
rebuild too, in the same cache right after. Reports the wall and CPU time of the whole command
and, from the build directory's .ninja_log, where the time went: the compiles and the two links
(the first link on a machine also has zig build libc++, libunwind and the C library's stubs for
the target).

  python3 bench/wheel_build.py [--zig-cache cold|both] [--python PYTHON] [--json PATH]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import ROOT, add_json_option, heading, provenance, publish, record, run_measured  # noqa: E402

NINJA_STEP = re.compile(r"\[(\d+)/(\d+)\] ")
TARGET_S = 240


def ninja_steps(build_dir):
    """{name: (start s, end s)} of each step ninja ran in build_dir, from its .ninja_log (times
    from ninja's start)."""
    steps = {}
    path = os.path.join(build_dir, ".ninja_log")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if not line.startswith("#"):
                    start, end, _, name, _ = line.rstrip("\n").split("\t")
                    steps[name] = (int(start) / 1000, int(end) / 1000)
    return steps


def one_build(python, zig_cache, label, work):
    clone = os.path.join(work, "clone")
    build_dir = os.path.join(work, "build")
    for d in (clone, build_dir, os.path.join(work, "dist")):
        shutil.rmtree(d, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
    env = dict(os.environ, CCACHE_DISABLE="1", ZIG_GLOBAL_CACHE_DIR=zig_cache)
    env.pop("CMAKE_BUILD_PARALLEL_LEVEL", None)
    out = os.path.join(work, f"pip-{label}.log")
    load_start = os.getloadavg()[0]
    with open(out, "w") as log:
        code, wall, cpu, _ = run_measured(
            [python, "-m", "pip", "wheel", "-v", "--no-deps", ".", "-w", os.path.join(work, "dist"),
             "-C", f"build-dir={build_dir}"], env=env, stdout=log, stderr=subprocess.STDOUT,
            cwd=clone)
    load_end = os.getloadavg()[0]
    text = open(out).read()
    if code != 0:
        sys.exit(f"wheel_build: pip wheel failed with exit {code}; its output is in {out}:\n"
                 + text[-3000:])
    steps = ninja_steps(build_dir)
    compiles = sorted(((n, e - b) for n, (b, e) in steps.items() if n.endswith(".o")),
                      key=lambda x: -x[1])
    runtime = steps.get("zig-runtime/first_link")
    return {"zig_cache": label, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "load_start": round(load_start, 1), "load_end": round(load_end, 1),
            "progress_lines": len(NINJA_STEP.findall(text)),
            "ninja_s": round(max((e for _, e in steps.values()), default=0), 1),
            "compiles": len(compiles), "compile_s": round(sum(s for _, s in compiles), 1),
            "slowest_compile": [compiles[0][0], round(compiles[0][1], 1)] if compiles else None,
            "zig_runtime_s": [round(x, 1) for x in runtime] if runtime else None}


def render(rec):
    results, python = rec["results"], rec["settings"]["python"]
    def runtime(r):
        span = r["zig_runtime_s"]
        return f"{span[0]:.0f}–{span[1]:.0f} s" if span else "-"
    rows = "\n".join(
        f"| zig cache {r['zig_cache']} | {r['wall_s']:.0f} s | {r['cpu_s']:.0f} s "
        f"| {r['wall_s'] - r['ninja_s']:.0f} s | {r['ninja_s']:.0f} s "
        f"| {r['compile_s']:.0f} s ({r['compiles']}) | {runtime(r)} "
        f"| {r['load_start']}, {r['load_end']} |" for r in results)
    cold = results[0]
    verdict = ("within" if cold["wall_s"] < TARGET_S else "over") + f" the {TARGET_S // 60} minutes"
    slow = cold["slowest_compile"]
    return heading("Building the wheel", rec) + f"""
pip: `{python} -m pip`. One build (it takes minutes).

A fresh clone, then `pip wheel -v --no-deps . -w DIR` in it, as a new user builds the wheel:
pip's isolated build environment (scikit-build-core and ziglang from PyPI, through pip's download
cache when it has one), CMake's configure, and the compile of what the wheel holds (`trainrun`,
and `trainrun_docgen` for its man page and completion) with zig's clang for glibc 2.28: each
library as a unity build, Asio, fmt and nlohmann-json in one precompiled header, `-Os`. ccache is
off (`CCACHE_DISABLE=1`) and zig's global cache starts empty (`ZIG_GLOBAL_CACHE_DIR`, a new
directory): zig keeps every object it compiles there, so a build with its cache warm is a
rebuild, most of its compiles cache hits.

"outside ninja" is pip's environment, CMake's configure and, after the build, the wheel's packing;
"ninja" the build itself; "compiles" the sum of ninja's compile steps' durations (their count in
brackets: with more jobs than CPUs, as ninja runs by default, each takes longer than its CPU
time); "zig runtime" when, from ninja's start, the first link built zig's libc++, libc++abi,
libunwind and the C library's stubs for the target (once per machine and zig version), beside
the compiles. The load average is the one-minute figure at the start and the
end.

| build | wall | CPU (user + sys) | outside ninja | ninja | compiles | zig runtime | load average (start, end) |
|---|---:|---:|---:|---:|---:|---:|---|
{rows}

From nothing, the wheel builds in {cold['wall_s']:.0f} s: {verdict}. The slowest compile is
`{slow[0] if slow else '-'}` ({slow[1] if slow else 0:.0f} s). pip printed {cold['progress_lines']}
of ninja's `[n/N]` lines with `-v`.

""" + provenance(rec, "the build") + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--python", default=sys.executable, help="the Python whose pip builds")
    ap.add_argument("--zig-cache", choices=["cold", "both"], default="cold",
                    help="cold: one build with zig's cache empty; both: then a rebuild with it warm")
    ap.add_argument("--keep-wheel", metavar="DIR", help="copy the (first) wheel built into DIR")
    add_json_option(ap)
    args = ap.parse_args()
    if subprocess.run([args.python, "-m", "pip", "--version"], capture_output=True).returncode:
        sys.exit(f"wheel_build: {args.python} has no pip: name a Python that has (--python)")
    with tempfile.TemporaryDirectory(prefix="trainrun-wheel-build-") as work:
        zig_cache = os.path.join(work, "zig-cache")
        results = [one_build(args.python, zig_cache, "cold", work)]
        print(results[-1], flush=True)
        if args.keep_wheel:
            os.makedirs(args.keep_wheel, exist_ok=True)
            for name in os.listdir(os.path.join(work, "dist")):
                shutil.copy(os.path.join(work, "dist", name), args.keep_wheel)
        if args.zig_cache == "both":
            results.append(one_build(args.python, zig_cache, "warm", work))
            print(results[-1], flush=True)
    publish("wheel_build", record("wheel_build", results, {
        "zig_cache": args.zig_cache, "python": args.python}), args.json)


if __name__ == "__main__":
    main()
