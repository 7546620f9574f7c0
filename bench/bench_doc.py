"""Shared by the benchmark programs: timing helpers and docs/benchmarks.md section updates."""
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
HEADER = ("# Benchmarks\n\nEach section is written by the program named in it; rerun that program "
          "to refresh it. Numbers are from one run on the machine described in the section, with "
          "trainrun and the reference torchrun (Debian's PyTorch 1.13 launcher, "
          "`shared/peer/torchrun113.py`) measured side by side in that run.\n")


def machine_record():
    """The machine as JSON wants it: CPU model, CPUs, memory, kernel."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu_model": model, "arch": platform.machine(), "cpus": os.cpu_count(),
            "memory_gib": round(mem, 2), "kernel": platform.release()}


def machine():
    m = machine_record()
    return f"{m['arch']}, {m['cpus']} CPUs, {m['memory_gib']:.0f} GiB, Linux {m['kernel']}"


def git_commit():
    """The checkout's commit, with "-dirty" where files differ from it; "" outside git."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True).stdout
    commit = git("rev-parse", "HEAD").strip()
    return commit + ("-dirty" if commit and git("status", "--porcelain", "--untracked-files=no")
                     else "")


def machine_details():
    """The machine a result came from: CPU model and count, memory, kernel."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu_model": model, "cpus": os.cpu_count(), "memory_gib": round(mem, 1),
            "kernel": platform.release()}


def git_commit():
    """The checkout's commit, with "-dirty" when it has changes."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "HEAD")
    return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def spread(values):
    """(min, median, max) of the runs' values."""
    return min(values), median(values), max(values)


def run_measured(cmd, env=None, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=None):
    """Runs cmd; returns (exit code, wall s, CPU s of it and its reaped children, peak RSS KiB)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, cwd=cwd)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss


def peak_rss_kib(cmd, env=None):
    """Peak RSS of the command's own process tree, through GNU time, which forks from a small
    process: a Python parent's memory would otherwise count, since a child's peak survives exec."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", "--"] + list(cmd), env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return int(r.stderr.strip().splitlines()[-1])


def torch_config(python):
    """(description, section suffix, title suffix) of the PyTorch that `python` imports: Debian's
    1.13 keeps the plain section names, another release (PyPI's 2.x) gets sections of its own."""
    version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    if not version:
        raise SystemExit(f"{python} cannot import torch")
    if version.startswith("1.13"):
        return "Debian's LibTorch and PyTorch 1.13 (CPU)", "", ""
    major = version.split(".")[0]
    return (f"PyPI's PyTorch {version} and its LibTorch (scripts/setup.sh --torch=pypi; CPU)",
            f"_torch{major}", f", PyTorch {major}.x")


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def command_line():
    """How this benchmark was run, from the repository root: for the reader to run it again."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    args = [os.path.relpath(a, ROOT) if os.path.isabs(a) and a.startswith(ROOT) else a
            for a in sys.argv[1:]]
    return shlex.join(["python3", script] + args)


def write_section(name, body):
    """Replaces (or appends) the section `name` of docs/benchmarks.md, with the command that
    produced it under its title."""
    title, _, rest = body.partition("\n")
    if title.startswith("## "):
        body = f"{title}\n\nRun as `{command_line()}`.\n{rest}"
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    text = open(DOC).read() if os.path.exists(DOC) else HEADER
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}"
    if start in text:
        text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    with open(DOC, "w") as f:
        f.write(text)


def add_json_option(parser):
    """--json PATH: the benchmark's results, machine-readable, beside the text (bench/plot.py)."""
    parser.add_argument("--json", metavar="PATH",
                        help="also write the results as JSON to PATH (read by bench/plot.py)")


def write_json(path, name, results, fields=None, **settings):
    """Writes one benchmark's results with the command, settings and machine they came from;
    `fields`: entries of the record's top level beside those, or in their place."""
    if not path:
        return
    record = {"benchmark": name,
              "command": " ".join(["bench/" + os.path.basename(sys.argv[0]), *sys.argv[1:]]),
              "machine": machine(), "load_average_at_end": list(os.getloadavg()),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "settings": settings, "results": results}
    record.update(fields or {})
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
