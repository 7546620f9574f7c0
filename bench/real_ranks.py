#!/usr/bin/python3
"""Real ranks: a torch 2.x Gloo job of 64 ranks on one machine, from the launch to every rank past
init_process_group, under trainrun (with and without --preload torch) and torchrun 2.x, with one
agent of 64 ranks and with two agents of 32 ranks each (a c10d rendezvous on 127.0.0.1).

Each rank is one process of one thread (OMP_NUM_THREADS=1 and the other pools' variables) that
imports torch, calls init_process_group("gloo"), writes the time, waits until the bench has read
every rank's memory, then passes a barrier and exits. Measured: from the launch (the first agent's
start) to the last rank past init_process_group, and the first; the ranks' proportional set size
(PSS, /proc/PID/smaps_rollup) summed once every rank is past it. The launchers run alternately,
--runs times; every run is kept. Before each run the bench waits (up to 3 minutes) until the
machine has the memory the job needs (the last run's PSS of it, or an estimate), else skips that
run and says why in the record; it stops a job whose machine runs short of memory during the run,
and runs that configuration no more: the record says so, with why.

Usage: bench/real_ranks.py --python VENV/bin/python [--trainrun PATH] [--ranks 64] [--runs 3]
                           [--only NAME]... [--json PATH]
--python: an interpreter with torch 2.x (the workers' PYTHON_EXEC, and torchrun's).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))
from ports import free_port  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import (ROOT, add_json_option, heading, kill_naming, median,  # noqa: E402
                       provenance, pss_kib, publish, record, spread)

JOB = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
out = sys.argv[1]
imported = time.time()
dist.init_process_group("gloo")
past_init = time.time()
rank = dist.get_rank()
path = os.path.join(out, f"rank_{rank}")
with open(path + ".tmp", "w") as f:
    json.dump({"imported": imported, "past_init": past_init, "pid": os.getpid(),
               "threads": torch.get_num_threads(), "world_size": dist.get_world_size()}, f)
os.rename(path + ".tmp", path)
deadline = time.time() + 300  # until the bench has read every rank's memory
while not os.path.exists(os.path.join(out, "go")) and time.time() < deadline:
    time.sleep(0.05)
dist.barrier()
dist.destroy_process_group()
'''

# One thread per rank: the pools torch and the libraries under it start.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
              "NUMEXPR_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1"}
# Memory: a rank of torch 2.15 on CPU holds about 290 MiB of its own (anonymous memory and heap)
# when it is started the ordinary way, far less when forked from a template that imported torch.
ESTIMATE_GIB = {False: 0.30, True: 0.06}
# Beside the ranks: torchrun's agent imports torch, and so does trainrun's --preload template.
AGENT_GIB = 0.35
SPARE_GIB = 1.0  # left to the machine's other users before a run starts
MEMORY_WAIT_S = 180  # a run waits this long for the memory it needs, else it is skipped
FLOOR_GIB = 1.0  # a job that leaves the machine less than this is stopped
RUN_TIMEOUT_S = 900


class JobFailed(Exception):
    pass


class OutOfMemory(Exception):
    pass


def mem_available_gib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def wait_for_memory(need):
    """The memory available once it is `need` GiB or more, or the most seen in MEMORY_WAIT_S."""
    deadline, have = time.time() + MEMORY_WAIT_S, mem_available_gib()
    while have < need and time.time() < deadline:
        time.sleep(2)
        have = max(have, mem_available_gib())
    return have


def configurations(args):
    """Name -> (preload, agents, function of the run's rendezvous port to each agent's argv)."""
    ours = [args.trainrun, "--monitor-interval=0.1"]
    theirs = [args.python, "-m", "torch.distributed.run", "--monitor-interval=0.1"]
    n, half = args.ranks, args.ranks // 2

    def one(cmd):
        return lambda port: [cmd + ["--standalone", f"--nproc-per-node={n}"]]

    def two(cmd, node_rank):
        def agents(port):
            rdzv = ["--nnodes=2", f"--nproc-per-node={half}", "--rdzv-backend=c10d",
                    f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id=real_ranks_{port}"]
            return [cmd + rdzv + ([f"--node-rank={i}"] if node_rank else []) for i in (0, 1)]
        return agents

    preload = ["--preload", "torch"]
    return {
        "trainrun": (False, 1, one(ours)),
        "trainrun --preload torch": (True, 1, one(ours + preload)),
        "torchrun": (False, 1, one(theirs)),
        "trainrun, 2 agents": (False, 2, two(ours, True)),
        "trainrun --preload torch, 2 agents": (True, 2, two(ours + preload, True)),
        "torchrun, 2 agents": (False, 2, two(theirs, False)),
    }


def kill_job(procs, out):
    """The agents, and every process of the job (each names the run's directory)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()
    kill_naming(out)


def log_tail(logs):
    text = ""
    for log in logs:
        log.seek(0)
        text += log.read().decode(errors="replace")[-2000:]
    return text


def run_once(agent_argvs, job, ranks, env):
    """(last rank past init_process_group, first rank past it, last rank's import done: seconds
    from the launch; the ranks' PSS summed, KiB; the least memory available during the run,
    GiB)."""
    with tempfile.TemporaryDirectory(prefix="real_ranks_") as out:
        logs = [tempfile.TemporaryFile() for _ in agent_argvs]
        procs = []
        least = mem_available_gib()
        try:
            t0 = time.time()
            for argv, log in zip(agent_argvs, logs):
                procs.append(subprocess.Popen(argv + [job, out], env=env, cwd=out,
                                              stdout=subprocess.DEVNULL, stderr=log))
            files = [os.path.join(out, f"rank_{r}") for r in range(ranks)]
            deadline = t0 + RUN_TIMEOUT_S
            while not all(os.path.exists(p) for p in files):
                least = min(least, mem_available_gib())
                if least < FLOOR_GIB:
                    kill_job(procs, out)
                    raise OutOfMemory(f"stopped: the machine's available memory fell to "
                                      f"{least:.1f} GiB with "
                                      f"{sum(map(os.path.exists, files))} of {ranks} ranks past "
                                      "init_process_group")
                ended = [p.returncode for p in procs if p.poll() is not None]
                if ended or time.time() > deadline:
                    kill_job(procs, out)
                    raise JobFailed(f"the job ended (exit {ended or 'none: timed out'}) before "
                                    f"every rank was past init_process_group: {log_tail(logs)}")
                time.sleep(0.02)
            rows = [json.load(open(f)) for f in files]
            pss = sum(pss_kib(r["pid"]) for r in rows)
            least = min(least, mem_available_gib())
            open(os.path.join(out, "go"), "w").close()
            for p in procs:
                try:
                    code = p.wait(timeout=300)
                except subprocess.TimeoutExpired:
                    code = "none: timed out"
                if code != 0:
                    kill_job(procs, out)
                    raise JobFailed(f"{' '.join(p.args[:3])} exited {code}: {log_tail(logs)}")
            if any(r["threads"] != 1 or r["world_size"] != ranks for r in rows):
                raise JobFailed(f"a rank had {max(r['threads'] for r in rows)} threads or a "
                                f"world of {rows[0]['world_size']}")
            return {"start_s": max(r["past_init"] for r in rows) - t0,
                    "first_s": min(r["past_init"] for r in rows) - t0,
                    "imported_s": max(r["imported"] for r in rows) - t0,
                    "pss_kib": pss, "least_available_gib": round(least, 2)}
        finally:
            for log in logs:
                log.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="an interpreter with torch 2.x")
    ap.add_argument("--trainrun",
                    default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--ranks", type=int, default=64, help="ranks in all (even: two agents share "
                    "them)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="a configuration to run, as the record names it; again for another "
                         "(default: all)")
    add_json_option(ap)
    args = ap.parse_args()
    if args.ranks < 2 or args.ranks % 2:
        sys.exit(f"real_ranks: --ranks must be an even number of 2 or more, not {args.ranks}")
    if args.runs < 1:
        sys.exit(f"real_ranks: --runs must be 1 or more, not {args.runs}")
    if not os.access(args.trainrun, os.X_OK):
        sys.exit(f"real_ranks: {args.trainrun} is not there: build the trainrun target")
    chosen = configurations(args)
    if args.only:
        names = args.only
        unknown = [n for n in names if n not in chosen]
        if unknown:
            sys.exit(f"real_ranks: no configuration {unknown[0]!r} (there are: "
                     f"{', '.join(chosen)})")
        chosen = {k: v for k, v in chosen.items() if k in names}
    try:
        version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                                 capture_output=True, text=True).stdout.strip()
    except OSError as e:
        sys.exit(f"real_ranks: cannot run {args.python}: {e.strerror}")
    if not version.startswith("2."):
        sys.exit(f"real_ranks: {args.python} has no torch 2.x (found {version or 'none'})")
    env = dict(os.environ, PYTHON_EXEC=args.python, **ONE_THREAD)
    results = {name: {"agents": agents, "ranks": args.ranks, "preload": preload, "runs": []}
               for name, (preload, agents, _) in chosen.items()}
    failures, not_run, skipped = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="real_ranks_job_") as tmp:
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        for _ in range(args.runs):
            for name, (preload, agents, argvs) in chosen.items():
                if name in not_run:
                    continue
                runs = results[name]["runs"]
                per_rank = (runs[-1]["pss_kib"] / 2**20 / args.ranks if runs
                            else ESTIMATE_GIB[preload])
                overhead = AGENT_GIB * agents if preload or name.startswith("torchrun") else 0
                need = per_rank * args.ranks + overhead + SPARE_GIB
                have = wait_for_memory(need)
                if have < need:
                    why = (f"{have:.1f} GiB available (at most, in {MEMORY_WAIT_S} s), and it "
                           f"needs about {need:.1f} GiB ({args.ranks} ranks of "
                           f"{per_rank * 1024:.0f} MiB, {overhead:.2f} GiB for its agents, "
                           f"{SPARE_GIB} GiB spare)")
                    skipped.setdefault(name, []).append(why)
                    print(f"{name}: a run skipped: {why}", file=sys.stderr)
                    continue
                for attempt in range(3):
                    try:
                        row = run_once(argvs(free_port()), job, args.ranks, env)
                    except OutOfMemory as e:
                        not_run[name] = str(e)
                        print(f"{name}: {e}", file=sys.stderr)
                        break
                    except JobFailed as e:
                        failures.setdefault(name, []).append(str(e)[-600:])
                        print(f"{name}: a run failed: {str(e)[-400:]}", file=sys.stderr)
                        continue
                    runs.append(row)
                    print(f"{name:36s} last rank past init {row['start_s']:6.2f} s  first "
                          f"{row['first_s']:6.2f} s  PSS {row['pss_kib'] / 2**20:5.1f} GiB  "
                          f"available at least {row['least_available_gib']:.1f} GiB", flush=True)
                    break
                else:
                    not_run[name] = f"failed three times in a row: {failures[name][-1][-300:]}"
    publish("real_ranks", record("real_ranks", results, {
        "runs": args.runs, "ranks": args.ranks, "torch": version,
        "threads_per_rank": ONE_THREAD}, failures=failures, not_run=not_run, skipped=skipped),
        args.json)


def render(rec):
    s, res = rec["settings"], rec["results"]
    base = res.get("trainrun", {}).get("runs")
    table = ["| launcher | agents × ranks | runs | last rank past init (s) | / trainrun | "
             "first rank past init (s) | last import done (s) | ranks' PSS (GiB) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for name, r in res.items():
        shape = f"{r['agents']} × {r['ranks'] // r['agents']}"
        runs = r["runs"]
        if not runs:
            why = rec["not_run"].get(name, "no run")
            table.append(f"| {name} | {shape} | 0 | {why} | | | | |")
            continue
        start = [x["start_s"] for x in runs]
        ratio = (f"{median(start) / median([x['start_s'] for x in base]):.2f}" if base else "—")
        table.append(
            f"| {name} | {shape} | {len(runs)} | {spread(start, '{:.1f}')} | {ratio} | "
            f"{spread([x['first_s'] for x in runs], '{:.1f}')} | "
            f"{spread([x['imported_s'] for x in runs], '{:.1f}')} | "
            f"{spread([x['pss_kib'] for x in runs], '{:.1f}', 1 / 2**20)} |")
    failures = "; ".join(f"{k}: {len(v)}" for k, v in rec["failures"].items()) or "none"
    skipped = "; ".join(f"{k}: {len(v)} ({v[-1]})" for k, v in rec["skipped"].items()) or "none"
    stopped = [f"{k} ({v})" for k, v in rec["not_run"].items() if res[k]["runs"]]
    intro = f"""`bench/real_ranks.py` — a Gloo job of PyTorch {s['torch']} with {s['ranks']} ranks on
this machine, each rank one process of one thread (`OMP_NUM_THREADS=1` and the other pools'
variables): it imports torch, calls `init_process_group("gloo")` and writes the time, then passes
a barrier once the bench has read its memory. Under one agent (`--standalone
--nproc-per-node={s['ranks']}`) and under two agents of {s['ranks'] // 2} ranks each on the same
machine (`--nnodes=2`, a c10d rendezvous on 127.0.0.1: trainrun's own, with `--node-rank` 0 and
1; torchrun's c10d); torchrun is `python -m torch.distributed.run` of the same PyTorch. With
torch 2.x both launchers' agents serve the job's store (the agent of node rank 0 holds it, and every rank connects to it). **Last rank past init**: from the launch
(the first agent's start) to the last rank past `init_process_group`; **first**, to the first;
**last import done**, to the last rank done importing torch (with `--preload torch` the ranks are
forked from a template that imported it: there, the last rank's start); **PSS**: the
ranks' proportional set size summed once every rank is past `init_process_group`. Median
(min–max) of the runs, the launchers in turn; the ratio is of the medians. Jobs that failed and
were run again: {failures}. Runs skipped for want of memory: {skipped}."""
    paragraphs = [intro, "\n".join(table)]
    if stopped:
        paragraphs.append("Stopped after some runs: " + "; ".join(stopped) + ".")
    plain, pre, theirs = (res.get(k, {}).get("runs") for k in
                          ("trainrun", "trainrun --preload torch", "torchrun"))
    def m(runs, key="start_s"):
        return median([x[key] for x in runs])

    def ranges(a, b):
        lo = round(max(min(x["start_s"] for x in a), min(x["start_s"] for x in b)), 1)
        hi = round(min(max(x["start_s"] for x in a), max(x["start_s"] for x in b)), 1)
        return f"overlap ({lo:.1f}–{hi:.1f} s)" if lo < hi else (
            f"meet at {lo:.1f} s" if lo == hi else "do not overlap")

    two_plain, two_theirs = (res.get(k, {}).get("runs") for k in
                             ("trainrun, 2 agents", "torchrun, 2 agents"))
    if plain and theirs and two_plain and two_theirs:
        paragraphs.append(
            "Without `--preload` nearly all of the time is the ranks' own: the last rank was "
            f"past `init_process_group` {m(plain) - m(plain, 'imported_s'):.1f} s after the last "
            f"import of torch was done under trainrun, {m(theirs) - m(theirs, 'imported_s'):.1f} "
            "s under torchrun (medians, one agent). The runs' times under the two launchers "
            f"{ranges(plain, theirs)} with one agent and {ranges(two_plain, two_theirs)} with two: "
            f"{s['ranks']} imports of torch on {rec['machine']['cpus']} CPUs of a shared machine "
            "vary from run to run by more than a launcher's own start-up (\"Launch overhead\").")
    if plain and pre and theirs:
        paragraphs.append(
            "With `--preload torch` the template imports torch once and the ranks are forked "
            "from it: "
            f"every rank was past `init_process_group` in {m(pre) / m(plain):.2f} of the plain "
            f"start's time and {m(pre) / m(theirs):.2f} of torchrun's, and the ranks' PSS was "
            f"{m(pre, 'pss_kib') / m(plain, 'pss_kib'):.2f} of the plain ranks'.")
    paragraphs.append(provenance(rec))
    text = heading("Real ranks: 64 Gloo ranks on one machine", rec) + "\n"
    for para in paragraphs:
        text += (para if para.startswith("|") else
                 textwrap.fill(" ".join(para.split()), width=100, break_long_words=False,
                               break_on_hyphens=False)) + "\n\n"
    return text



if __name__ == "__main__":
    main()
