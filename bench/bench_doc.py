#!/usr/bin/python3
"""The benchmarks' records, and docs/benchmarks.md rendered from them.

Every benchmark program writes its record, bench/results/NAME.json: the machine, the load average
before and after, the date, the commit, the command and every run's raw values (`record`). Each
section of docs/benchmarks.md between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->` is the text
its renderer (SECTIONS) makes of bench/results/NAME.json; the plots of docs/img are bench/plot.py's
drawings of the same records; the figures other pages quote are QUOTES, rendered alike.

Usage: bench/bench_doc.py --check   one line per figure, section or plot that is not what its
                                    record renders, exit 1 if any
       bench/bench_doc.py --write   rewrites the sections, the quotes and the plots from the records
       [--root DIR]                 the source tree to check (default: this one)
"""
import argparse
import filecmp
import glob
import importlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "bench")
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
# The load when the benchmark program started: it imports this module first.
LOAD_BEFORE = [round(x, 2) for x in os.getloadavg()]
REQUIRED = ("benchmark", "command", "machine", "load_before", "load_after", "date", "commit")
# Where a record keeps its runs: "results"; "runs" in store_scale's (docs/benchmarks.md names it so).
RESULTS_KEYS = ("results", "runs")
MACHINE_FIELDS = ("cpu_model", "cpus", "memory_gib", "kernel")


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


def describe_machine(m):
    return f"{m['cpu_model']}, {m['cpus']} CPUs, {m['memory_gib']:.0f} GiB, Linux {m['kernel']}"


def git_commit():
    """The checkout's commit, with "-dirty" where files differ from it; "" outside git."""
    def git(*args):
        return subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True).stdout
    commit = git("rev-parse", "HEAD").strip()
    return commit + ("-dirty" if commit and git("status", "--porcelain", "--untracked-files=no")
                     else "")


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


def kill_naming(text):
    """SIGKILL to every process whose command line holds `text` (a run's own directory): what a
    launcher that was killed, or that ended, left of its job."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    os.kill(int(pid), 9)
        except OSError:
            pass


def pss_kib(pid):
    """A process's proportional set size (pages it shares count in part), in KiB; 0 once gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def spread(xs, fmt="{:.1f}", scale=1.0):
    """`median (min–max)` of raw values, each scaled and formatted alike; one value alone."""
    xs = [x * scale for x in xs]
    if len(xs) == 1:
        return fmt.format(xs[0])
    return f"{fmt.format(median(xs))} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def command_line():
    """How this benchmark was run, from the repository root: for the reader to run it again."""
    script = os.path.relpath(os.path.abspath(sys.argv[0]), ROOT)
    args = [os.path.relpath(a, ROOT) if os.path.isabs(a) and a.startswith(ROOT) else a
            for a in sys.argv[1:]]
    return shlex.join(["python3", script] + args)


def rendezvous_bench(build, name):
    """The path of bench/rendezvous's program `name` in the build directory; exits with one line
    where it is not built."""
    binary = os.path.join(build, "bench", "rendezvous", name)
    if not os.access(binary, os.X_OK):
        sys.exit(f"{name}: {binary} is not there: build the {name} target")
    return binary


def add_json_option(parser):
    """--json PATH: where the record goes (default bench/results/NAME.json)."""
    parser.add_argument("--json", metavar="PATH",
                        help="write the record to PATH instead of bench/results/NAME.json, and "
                             "leave docs/benchmarks.md as it is")


def record(name, results, settings=None, results_key="results", **fields):
    """One benchmark's record: its raw results (under `results_key`) with the machine, load,
    date, commit and command they came from."""
    rec = {"benchmark": name, "command": command_line(), "machine": machine_record(),
           "load_before": LOAD_BEFORE, "load_after": [round(x, 2) for x in os.getloadavg()],
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": git_commit(),
           "settings": settings or {}}
    rec.update(fields)
    rec[results_key] = results
    return rec


def publish(name, rec, json_path=None):
    """Writes the record; to bench/results/NAME.json (unless json_path names another file), and
    then the section of docs/benchmarks.md rendered from it."""
    path = json_path or os.path.join(ROOT, "bench", "results", f"{name}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(rec, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{name}: wrote {os.path.relpath(path, ROOT)}")
    if not json_path:
        doc = Tree(ROOT)
        doc.write_section(name)
        print(f"{name}: rendered its section of docs/benchmarks.md")


def provenance(rec, what="the runs"):
    """The line every section ends with: where, when, at which commit, and how loaded."""
    lb, la = rec["load_before"], rec["load_after"]
    return (f"Machine: {describe_machine(rec['machine'])}; load average {lb[0]:.1f} before "
            f"{what} and {la[0]:.1f} after; {rec['date'][:10]}, commit `{rec['commit'][:10]}`"
            f"{' (with changes)' if rec['commit'].endswith('-dirty') else ''}.")


def heading(title, rec):
    return f"## {title}\n\nRun as `{rec['command']}`.\n"


# Section name -> (bench module, renderer): the renderer makes the section's markdown of its
# record bench/results/<section>.json.
SECTIONS = {
    "launch_overhead": ("launch_overhead", "render"),
    "rendezvous_scale": ("rendezvous_scale", "render"),
    "rendezvous_backends": ("rendezvous_backends", "render"),
    "rendezvous_compare": ("rendezvous_compare", "render"),
    "supervision": ("supervision", "render"),
    "fashion_mnist_accuracy": ("fashion_mnist_speed", "render_accuracy"),
    "allreduce_bandwidth": ("allreduce_bandwidth", "render"),
    "fashion_mnist_speed": ("fashion_mnist_speed", "render"),
    "fashion_mnist_speed_torch2": ("fashion_mnist_speed", "render"),
    "allreduce_bandwidth_torch2": ("allreduce_bandwidth", "render"),
    "launch_overhead_wheel": ("launch_overhead", "render_wheel"),
    "hang_watch": ("hang_watch", "render"),
    "preflight_cost": ("preflight_cost", "render"),
    "compare_builds": ("compare_builds", "render"),
    "wheel_build": ("wheel_build", "render"),
    "warm_start": ("warm_start", "render"),
    "flight_recorder": ("flight_recorder", "render"),
    "store_scale": ("store_scale", "render"),
    "at_scale": ("at_scale", "render"),
    "real_ranks": ("real_ranks", "render"),
    "store_owners": ("store_owners", "render"),
}

# Figures other pages quote: (page, pattern with one group, the record it comes from, what the
# group should be). A pattern not found on its page is a mismatch too.
QUOTES = [
    ("docs/cli.md", r"\(about (\S+ s) each for 16 Python workers with py-spy", "hang_watch",
     lambda r: roll_call(r, "16 local, py-spy")),
    ("docs/hangs.md", r"Python workers takes about (\S+ s) with py-spy", "hang_watch",
     lambda r: roll_call(r, "16 local, py-spy")),
    ("docs/hangs.md", r"with py-spy \((\S+ s) with eu-stack\)", "hang_watch",
     lambda r: roll_call(r, "16 local, eu-stack")),
    ("docs/install.md", r"precompiled once, at `-Os`: about (\S+ minutes) on two cores", "wheel_build",
     lambda r: f"{r['results'][0]['wall_s'] / 60:.1f} minutes"),
    ("docs/install.md", r"from a fresh clone, (\S+ minutes) of\s+CPU time", "wheel_build",
     lambda r: f"{r['results'][0]['cpu_s'] / 60:.1f} minutes"),
    ("docs/multinode.md", r"check of rank 0 took (\S+ s) in all", "rendezvous_scale",
     lambda r: preflight_in_all(r)),
    ("docs/benchmarks.md", r"launched in (\S+ ms) with trainrun", "launch_overhead",
     lambda r: f"{median(r['results'][0]['trainrun']['wall_s']) * 1e3:.1f} ms"),
    ("docs/benchmarks.md", r"with trainrun and (\S+ ms) with torchrun", "launch_overhead",
     lambda r: f"{median(r['results'][0]['torchrun']['wall_s']) * 1e3:,.0f} ms"),
    ("docs/benchmarks.md", r"the load average was between (\S+ and \S+), and one worker",
     "launch_overhead", lambda r: load_range(r)),
    ("docs/architecture.md", r"takes (\S+ ms) a connection with 8 workers",
     "store_owners", lambda r: bench_function("store_owners", "naming_cost")(r, 8)),
    ("docs/architecture.md", r"and (\S+ ms) a connection with 64 workers", "store_owners",
     lambda r: bench_function("store_owners", "naming_cost")(r, 64)),
    ("docs/architecture.md", r"named them all (\S+ ms) after the last rank", "store_owners",
     lambda r: bench_function("store_owners", "named_after")(r, 2)),
    ("docs/architecture.md", r"the three pairs of files, (\d+ lines)", "store_owners",
     lambda r: f"{sum(r['results']['lines'].values())} lines"),
]


def preflight_in_all(rec):
    """The least and the most, over the runs at the largest size, of the round with --preflight
    and every node's check of rank 0 together."""
    runs = [r for r in rec["results"] if r.get("preflight") and r.get("ok")]
    largest = max(r["nodes"] for r in runs)
    sums = [r["round_s"] + r["preflight_s"] for r in runs if r["nodes"] == largest]
    return f"{min(sums):.1f}–{max(sums):.1f} s"


def roll_call(rec, name):
    return f"{median(rec['results']['roll_call_s'][name]):.1f} s"


def load_range(rec):
    loads = [rec["load_before"][0], rec["load_after"][0]]
    return f"{min(loads):.1f} and {max(loads):.1f}"


def lacks(rec):
    """What a record lacks of what every record holds."""
    missing = [k for k in REQUIRED if k not in rec]
    if not any(k in rec for k in RESULTS_KEYS):
        missing.append(" or ".join(RESULTS_KEYS))
    if isinstance(rec.get("machine"), dict):
        missing += [f"machine.{k}" for k in MACHINE_FIELDS if k not in rec["machine"]]
    elif "machine" in rec:
        missing.append("machine (CPU model, CPUs, memory, kernel)")
    return missing


def bench_function(module, function):
    """A function of the bench program bench/MODULE.py."""
    if BENCH not in sys.path:
        sys.path.insert(0, BENCH)
    return getattr(importlib.import_module(module), function)


def renderer(name):
    return bench_function(*SECTIONS[name])


class Tree:
    """A source tree's docs and records: what --check compares and --write rewrites."""

    def __init__(self, root):
        self.root = root
        self.doc_path = os.path.join(root, "docs", "benchmarks.md")
        self.results = os.path.join(root, "bench", "results")

    def record(self, name):
        path = os.path.join(self.results, f"{name}.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)

    def blocks(self, text):
        """(name, body) of each section block of docs/benchmarks.md, in order."""
        return re.findall(r"<!-- bench:(\w+) -->\n(.*?)\n?<!-- /bench:\1 -->", text, flags=re.S)

    def render(self, name):
        rec = self.record(name)
        return renderer(name)(rec).rstrip() if rec else None

    def write_section(self, name):
        text = open(self.doc_path).read()
        start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
        block = f"{start}\n{self.render(name)}\n{end}"
        if start in text:
            text = re.sub(re.escape(start) + ".*?" + re.escape(end), lambda _: block, text,
                          flags=re.S)
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        with open(self.doc_path, "w") as f:
            f.write(text)

    def problems(self):
        """One line per figure, section or plot that is not what its record renders."""
        out = []
        text = open(self.doc_path).read()
        blocks = self.blocks(text)
        for name, body in blocks:
            out += self.section_problems(name, body)
        out += self.unrendered_sections(text)
        out += self.quote_problems()
        out += self.plot_problems()
        return out

    def section_problems(self, name, body):
        if name not in SECTIONS:
            return [f"docs/benchmarks.md: section {name} has no renderer in bench/bench_doc.py"]
        rec = self.record(name)
        if rec is None:
            return [f"docs/benchmarks.md: section {name} has no record bench/results/{name}.json"]
        missing = lacks(rec)
        if missing:
            return [f"bench/results/{name}.json: lacks {', '.join(missing)}"]
        want = renderer(name)(rec).rstrip()
        if want == body.rstrip():
            return []
        have_lines, want_lines = body.rstrip().splitlines(), want.splitlines()
        for i, (h, w) in enumerate(zip(have_lines, want_lines)):
            if h != w:
                return [f"docs/benchmarks.md: section {name}, line {i + 1}: {h!r}, "
                        f"rendered: {w!r}"]
        return [f"docs/benchmarks.md: section {name} has {len(have_lines)} lines, "
                f"rendered {len(want_lines)}"]

    def unrendered_sections(self, text):
        """Outside the blocks, a heading with figures under it has no record to come from."""
        outside = re.sub(r"<!-- bench:(\w+) -->\n.*?\n?<!-- /bench:\1 -->", "", text, flags=re.S)
        out = []
        for quote in QUOTES:  # the quoted figures themselves are checked by quote_problems
            if quote[0] == "docs/benchmarks.md":
                outside = re.sub(quote[1], lambda m: m.group(0).replace(m.group(1), "", 1),
                                 outside)
        outside = re.sub(r"```.*?```", "", outside, flags=re.S)
        title = "(top)"
        for line in outside.splitlines():
            if line.startswith("#"):
                title = line.lstrip("# ")
            for m in FIGURE.finditer(line):
                out.append(f"docs/benchmarks.md: \"{title}\" quotes {m.group(0)!r} outside a "
                           "rendered section")
        return out

    def quote_problems(self):
        out = []
        for page, pattern, name, want in QUOTES:
            text = open(os.path.join(self.root, page)).read()
            m = re.search(pattern, text)
            rec = self.record(name)
            if not m:
                out.append(f"{page}: no figure matching {pattern!r}")
            elif rec is None:
                out.append(f"{page}: quotes {m.group(1)!r}, and bench/results/{name}.json is "
                           "missing")
            elif m.group(1).replace("\n", " ") != want(rec):
                out.append(f"{page}: quotes {m.group(1)!r}; bench/results/{name}.json renders "
                           f"{want(rec)!r}")
        return out

    def write_quotes(self):
        for page, pattern, name, want in QUOTES:
            path = os.path.join(self.root, page)
            text = open(path).read()
            rec = self.record(name)
            m = re.search(pattern, text)
            if m and rec and not lacks(rec):
                text = text[:m.start(1)] + want(rec) + text[m.end(1):]
                with open(path, "w") as f:
                    f.write(text)

    def draw(self, out):
        r = subprocess.run([PLOT_PYTHON, os.path.join(BENCH, "plot.py"), "--data", self.results,
                            "--out", out], capture_output=True, text=True)
        return r

    def plot_problems(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = self.draw(tmp)
            if r.returncode != 0:
                return [f"bench/plot.py failed: {r.stderr.strip()}"]
            out = []
            for path in sorted(glob.glob(os.path.join(tmp, "*.png"))):
                name = os.path.basename(path)
                have = os.path.join(self.root, "docs", "img", name)
                if not os.path.exists(have):
                    out.append(f"docs/img/{name}: missing")
                elif not filecmp.cmp(path, have, shallow=False):
                    out.append(f"docs/img/{name}: not what bench/plot.py draws of bench/results")
            return out

    def write(self):
        for name in SECTIONS:  # a section without a whole record stays as it is
            rec = self.record(name)
            if rec is not None and not lacks(rec):
                self.write_section(name)
        self.write_quotes()
        r = self.draw(os.path.join(self.root, "docs", "img"))
        if r.returncode != 0:
            sys.exit(f"bench/plot.py failed: {r.stderr.strip()}")


# A figure with a unit, as the prose quotes measurements.
FIGURE = re.compile(r"(?<![\w.])\d[\d,.]*(?:–\d[\d,.]*)? ?(?:ms|µs|s|MiB|KiB|MB/s|GB/s|minutes)\b")
# Debian's Python, with python3-matplotlib (scripts/setup.sh).
PLOT_PYTHON = "/usr/bin/python3"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--check", action="store_true",
                       help="say where the docs are not what the records render; exit 1 if so")
    group.add_argument("--write", action="store_true", help="render the docs from the records")
    ap.add_argument("--root", default=ROOT, help="the source tree (default: this one)")
    args = ap.parse_args()
    tree = Tree(os.path.abspath(args.root))
    if args.write:
        tree.write()
        return 0
    problems = tree.problems()
    for p in problems:
        print(p)
    if problems:
        print(f"bench_doc: {len(problems)} figure(s) not what bench/results renders; "
              "python3 bench/bench_doc.py --write renders them", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
