#!/usr/bin/python3
"""Warm starts: what `--preload torch` saves a PyTorch job, against torchrun 2.x, in one run.

- start: 8 Gloo workers (--workers), from the launch to every rank past init_process_group;
- memory: the same workers' proportional set size (PSS, /proc/PID/smaps_rollup), summed, once
  every rank is past init_process_group (pages of torch a template shares count once);
- restart: the same number of workers run a training script (a small model in DDP, one SGD step;
  rank 0 saves a checkpoint atomically, then rank 1 fails with sys.exit(1)); the next attempt
  builds the model again, loads that checkpoint and takes one step (--max-restarts=1). Timed from
  the failing worker's exit, as the kernel reports it to a pidfd this program holds on it (the
  instant the process ended, before any launcher reaps it), to every rank of the next attempt past
  init_process_group, and past its first optimizer step. For trainrun, the restart line it prints
  (`attempt 1: ... ranks at the store ... s; from rank 1's exit`) is kept too, and the instant its
  summary (--summary-file) says the failing worker ended: the same exit, as trainrun reaped it.
Each launcher runs alternately, --runs times; every run is kept. The jobs are scripts written here.

Usage: bench/warm_start.py --python VENV/bin/python [--trainrun PATH] [--workers 8] [--runs 5]
                           [--json PATH]
--python: an interpreter with torch 2.x (the workers' PYTHON_EXEC, and torchrun's).
"""
import argparse
import datetime
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import (ROOT, add_json_option, heading, kill_naming, median,  # noqa: E402
                       provenance, pss_kib, publish, record, spread)

JOB = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
out, mode = sys.argv[1], sys.argv[2]
dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
path = os.path.join(out, f"{attempt}_{rank}")
with open(path + ".tmp", "w") as f:
    json.dump({"past_init": time.time(), "pid": os.getpid()}, f)
os.rename(path + ".tmp", path)
dist.all_reduce(torch.ones(1))
if mode == "hold":  # until the bench has read every worker's memory
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(out, "go")) and time.time() < deadline:
        time.sleep(0.01)
dist.barrier()
dist.destroy_process_group()
'''

# The restart's job, as a training script is: each attempt builds its model, wraps it in DDP,
# loads the checkpoint the last attempt saved (if any) and takes one optimizer step. In attempt 0,
# rank 0 then saves a checkpoint (a temporary file, then renamed) and rank 1 fails with
# sys.exit(1) once the bench holds a pidfd on it; the other ranks train on until stopped.
TRAIN_JOB = r'''
import json, os, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def mark(name, **values):
    path = os.path.join(out, name)
    with open(path + ".tmp", "w") as f:
        json.dump(values, f)
    os.rename(path + ".tmp", path)


out = sys.argv[1]
dist.init_process_group("gloo")
rank, attempt = dist.get_rank(), int(os.environ["TORCHELASTIC_RESTART_COUNT"])
past_init = time.time()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(),
    torch.nn.Linear(256, 10)))
past_model = time.time()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
checkpoint = os.path.join(out, "checkpoint.pt")
step = 0
if os.path.exists(checkpoint):
    state = torch.load(checkpoint, map_location="cpu")
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = state["step"]


def train_step():
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


train_step()
step += 1
mark(f"{attempt}_{rank}", past_init=past_init, past_model=past_model, past_step=time.time(),
     step=step, pid=os.getpid())
if attempt == 0:
    if rank == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step}, checkpoint + ".tmp")
        os.replace(checkpoint + ".tmp", checkpoint)
    dist.barrier()
    deadline = time.time() + 120
    if rank == 1:
        mark("failing", pid=os.getpid())
        while not os.path.exists(os.path.join(out, "armed")) and time.time() < deadline:
            time.sleep(0.001)
        with open(os.path.join(out, "exiting"), "w") as f:
            f.write(repr(time.time()))
        sys.exit(1)
    while time.time() < deadline:
        train_step()
    sys.exit(2)
dist.barrier()
dist.destroy_process_group()
'''


def launchers(args):
    ours = [args.trainrun, "--standalone", "--monitor-interval=0.1"]
    return {
        "trainrun": ours,
        "trainrun --preload torch": ours + ["--preload", "torch"],
        # DDP's constructor imports torch._dynamo (some 900 modules), which `import torch` does not.
        "trainrun --preload torch,torch._dynamo": ours + ["--preload", "torch,torch._dynamo"],
        "torchrun 2.x": [args.python, "-m", "torch.distributed.run", "--standalone",
                         "--monitor-interval=0.1"],
    }


class JobFailed(Exception):
    pass


def kill_job(proc, out):
    """The launcher, and every process of its job (a launcher that ends may leave its workers:
    torchrun's, in sessions of their own, hang on in a Gloo connect)."""
    proc.kill()
    proc.wait()
    kill_naming(out)


def wait_for(paths, proc, out, log, timeout=300):
    deadline = time.time() + timeout
    while not all(os.path.exists(p) for p in paths):
        if proc.poll() is not None or time.time() > deadline:
            kill_job(proc, out)
            log.seek(0)
            raise JobFailed(f"the job ended (exit {proc.returncode}) before every rank was where "
                            f"the bench waits for it: {log.read().decode()[-4000:]}")
        time.sleep(0.005)


def run_start(cmd, job, workers, env):
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile() as log:
        t0 = time.time()
        proc = subprocess.Popen(cmd + [f"--nproc-per-node={workers}", job, out, "hold"], env=env,
                                stdout=subprocess.DEVNULL, stderr=log)
        files = [os.path.join(out, f"0_{r}") for r in range(workers)]
        wait_for(files, proc, out, log)
        ranks = [json.load(open(f)) for f in files]
        start = max(r["past_init"] for r in ranks) - t0
        pss = sum(pss_kib(r["pid"]) for r in ranks)
        open(os.path.join(out, "go"), "w").close()
        if proc.wait(timeout=120) != 0:
            kill_job(proc, out)
            raise JobFailed(f"{' '.join(cmd)} exited {proc.returncode}")
        return start, pss


class ExitWatch(threading.Thread):
    """When process `pid` ends, as the kernel tells a pidfd held on it: the instant it exited,
    whoever reaps it and whenever."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.fd = os.pidfd_open(pid)
        self.at = None
        self.start()

    def run(self):
        if select.select([self.fd], [], [], 300)[0]:
            self.at = time.time()
        os.close(self.fd)


# trainrun's line for the restart's start-up (docs/cli.md, "Start-up").
RESTART_LINE = re.compile(r"^trainrun: attempt 1: round (\S+) s, workers started (\S+) s, ranks at "
                          r"the store (\S+) s.*; from (.+)$", re.M)


def unix(iso):
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def run_restart(cmd, job, workers, env, ours):
    """One restart: the seconds from the failing worker's exit to every rank of the next attempt
    past init_process_group and past its first step; for trainrun, its own line's figures."""
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile() as log:
        summary = os.path.join(out, "summary.json")
        proc = subprocess.Popen(cmd + ([f"--summary-file={summary}"] if ours else []) + [
            f"--nproc-per-node={workers}", "--max-restarts=1", job, out], env=env,
            stdout=subprocess.DEVNULL, stderr=log)
        wait_for([os.path.join(out, "failing")], proc, out, log)
        watch = ExitWatch(json.load(open(os.path.join(out, "failing")))["pid"])
        open(os.path.join(out, "armed"), "w").close()
        files = [os.path.join(out, f"1_{r}") for r in range(workers)]
        # A torchrun 2.x restart may hang in the Gloo group's connect (the last attempt's
        # addresses in its store): a restart takes seconds here, 90 s is a failure.
        wait_for(files, proc, out, log, timeout=90)
        if proc.wait(timeout=120) != 0:
            kill_job(proc, out)
            raise JobFailed(f"{' '.join(cmd)} exited {proc.returncode}")
        watch.join(10)
        if watch.at is None:
            raise JobFailed("the failing worker's exit was not seen")
        ranks = [json.load(open(f)) for f in files]
        if any(r["step"] != 2 for r in ranks):
            raise JobFailed(f"the next attempt did not resume from the checkpoint: {ranks}")
        exited = watch.at
        got = {"restart": max(r["past_step"] for r in ranks) - exited,
               "restart_init": max(r["past_init"] for r in ranks) - exited,
               "restart_model": max(r["past_model"] for r in ranks) - exited,
               "exit_after_call": exited - float(open(os.path.join(out, "exiting")).read())}
        if ours:
            log.seek(0)
            text = log.read().decode(errors="replace")
            m = RESTART_LINE.search(text)
            if not m:
                sys.exit(f"warm_start: trainrun said no restart line: {text[-2000:]}")
            got.update(line_workers=float(m.group(2)), line_store=float(m.group(3)),
                       line_from=m.group(4))
            first = json.load(open(summary))["attempts"][0]
            [failed] = [w for w in first["workers"] if w["rank"] == 1]
            got["reaped_after_exit"] = unix(failed["ended_at"]) - exited
        return got


def retried(name, what, failures, run, tries=5, give_up=False):
    """run()'s value, run again where the job failed (counted in `failures`); after `tries`
    failures in a row, None where `give_up`, else the bench ends."""
    for _ in range(tries):
        try:
            return run()
        except JobFailed as e:
            failures[f"{name} ({what})"] = failures.get(f"{name} ({what})", 0) + 1
            print(f"{name}: a {what} run failed: {str(e)[-300:]}", file=sys.stderr)
    if give_up:
        return None
    sys.exit(f"warm_start: {name}'s {what} run failed {tries} times in a row")


# What a restart run keeps, each launcher; trainrun's line and summary for trainrun's.
RESTART_KEYS = ("restart", "restart_init", "restart_model", "exit_after_call")
LINE_KEYS = ("line_workers", "line_store", "line_from", "reaped_after_exit")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="an interpreter with torch 2.x")
    ap.add_argument("--trainrun", default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", action="append", metavar="NAME",
                    help="a launcher to run, by its name in the table; again for another "
                         "(default: all)")
    add_json_option(ap)
    args = ap.parse_args()
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    if not version.startswith("2."):
        sys.exit(f"warm_start: {args.python} has no torch 2.x (found {version or 'none'})")
    env = dict(os.environ, PYTHON_EXEC=args.python, OMP_NUM_THREADS="1")
    chosen = launchers(args)
    if args.only:
        unknown = [n for n in args.only if n not in chosen]
        if unknown:
            sys.exit(f"warm_start: --only {unknown[0]!r}: no such launcher (one of "
                     f"{', '.join(map(repr, chosen))})")
        chosen = {k: v for k, v in chosen.items() if k in args.only}
    samples = {name: {"start": [], "pss": []} for name in chosen}
    failures = {}
    with tempfile.TemporaryDirectory() as tmp:
        job, train = os.path.join(tmp, "job.py"), os.path.join(tmp, "train.py")
        for path, text in ((job, JOB), (train, TRAIN_JOB)):
            with open(path, "w") as f:
                f.write(text)
        for _ in range(args.runs):
            for name, cmd in chosen.items():
                # A job that fails is counted and run again (a start four times at most). A
                # restart is tried three times: torchrun 2.x's restarted Gloo ranks may find the
                # last attempt's addresses in its store and fail to connect ("Connection
                # refused") or hang; a run whose three tries failed keeps None.
                start, pss = retried(name, "start", failures,
                                     lambda: run_start(cmd, job, args.workers, env))
                ours = name.startswith("trainrun")
                restart = retried(name, "restart", failures, lambda: run_restart(
                    cmd, train, args.workers, env, ours), tries=3, give_up=True)
                got = restart or {}
                for key, value in [("start", start), ("pss", pss)] + [
                        (k, got.get(k)) for k in RESTART_KEYS + (LINE_KEYS if ours else ())]:
                    samples[name].setdefault(key, []).append(value)
                said = "restart: three tries failed" if restart is None else (
                    f"restart: init {got['restart_init']:5.2f} s, first step "
                    f"{got['restart']:5.2f} s")
                if "line_store" in got:
                    said += (f", its line: ranks at the store {got['line_store']:.2f} s "
                             f"({got['line_from']})")
                print(f"{name:26s} start {start:6.2f} s  PSS {pss / 1024:7.0f} MiB  {said}",
                      flush=True)
    publish("warm_start", record("warm_start", samples, {
        "runs": args.runs, "workers": args.workers, "torch": version}, failures=failures),
        args.json)


def kept(xs):
    """The values of the runs that have one (a restart whose tries all failed has None)."""
    return [x for x in xs if x is not None]


def render(rec):
    s, res = rec["settings"], rec["results"]
    base = res.get("trainrun")

    def ratio(r, key):
        if not base or not kept(r[key]) or not kept(base[key]):
            return "—"
        return f"{median(kept(r[key])) / median(kept(base[key])):.2f}"

    def cell(xs):
        got = kept(xs)
        if not got:
            return f"— (no restart in {len(xs)} runs)"
        missing = len(xs) - len(got)
        return spread(got, "{:.2f}") + (f", {missing} of {len(xs)} runs none" if missing else "")

    start = ["| launcher | start (s) | start / trainrun | workers' PSS (MiB) |",
             "|---|---:|---:|---:|"]
    restart = ["| launcher | to every rank past `init_process_group` (s) | to every model in DDP (s) "
               "| to every rank past its first step (s) | first step / trainrun | trainrun's line: "
               "ranks at the store (s) |",
               "|---|---:|---:|---:|---:|---:|"]
    for name, r in res.items():
        start.append(f"| {name} | {spread(r['start'], '{:.2f}')} | {ratio(r, 'start')} | "
                     f"{spread(r['pss'], '{:.0f}', 1 / 1024)} |")
        line = cell(r["line_store"]) if "line_store" in r else "—"
        restart.append(f"| {name} | {cell(r['restart_init'])} | {cell(r['restart_model'])} | "
                       f"{cell(r['restart'])} | {ratio(r, 'restart')} | {line} |")
    failures = ", ".join(f"{k}: {v}" for k, v in rec["failures"].items()) or "none"
    lag = kept([x for r in res.values() for x in r["exit_after_call"]])
    reaped = kept([x for r in res.values() for x in r.get("reaped_after_exit", [])])
    said = sorted(set(kept([x for r in res.values() for x in r.get("line_from", [])])))
    text = heading("Warm starts", rec) + f"""
`bench/warm_start.py` — PyTorch {s['torch']}, {s['workers']} Gloo workers, each launcher in
turn; median (min–max) of {s['runs']} runs, ratios of the medians. Jobs that failed and were run
again: {failures}.

**Start and memory**: a job that imports torch, calls `init_process_group` and all-reduces once.
**start** is from the launch to every rank past `init_process_group`; **PSS** is the workers'
proportional set size summed, once every rank is past it.

""" + "\n".join(start) + f"""

**Restart**: a training script. Each attempt builds a small model (three `Linear` layers) in
DDP, loads the checkpoint the last attempt saved and takes one SGD step (forward, backward,
step). In the first attempt rank 0 saves the checkpoint (a temporary file, then renamed), then
rank 1 fails with `sys.exit(1)` while the other ranks train on until they are stopped;
`--max-restarts=1`. Every interval starts at the failing worker's exit: the instant the kernel
reports its end to a pidfd the bench holds on it, whichever launcher reaps it (the call to
`sys.exit` came {spread(lag, '{:.2f}')} s before it: the interpreter's teardown, not in the
intervals). It ends when the last rank of the next attempt is past `init_process_group`, has
its model built and wrapped in DDP, or is past its first `optimizer.step()` after loading the
checkpoint: the restart as a user lives it. A restart is tried three times in a run (a try
that fails or hangs for 90 s counts as a failure above); a run whose three tries failed has
none. **trainrun's line** is trainrun's own figure for the same restart (`trainrun: attempt 1:
round ..., ranks at the store ... s; from {' / '.join(said) or '...'}` on stderr, and the
summary's `startup` of attempt 1): from the same exit as trainrun reaped it to the last rank's
first request to the job's store, in `init_process_group`. The summary's `ended_at` of that
worker (to the millisecond) and the bench's pidfd instant were at most
{max(abs(x) for x in reaped) * 1000 if reaped else 0:.0f} ms apart in any run: each is taken
when its process next runs on the loaded CPUs.

""" + "\n".join(restart) + "\n"
    pre = res.get("trainrun --preload torch")
    dynamo = res.get("trainrun --preload torch,torch._dynamo")
    torchrun = res.get("torchrun 2.x")
    if base and pre and kept(pre["restart"]) and kept(base["restart"]):
        step = median(kept(pre["restart"]))
        text += f"""
With `--preload torch` the workers are forked from one interpreter that imported torch once: the
start took {median(pre['start']) / median(base['start']):.2f} of the plain start's time, the
workers' PSS {median(pre['pss']) / median(base['pss']):.2f} of theirs (the template's pages of
torch shared), and a restart forks {s['workers']} fresh workers instead of importing torch again:
from the failing worker's exit to every rank past `init_process_group`,
{median(kept(pre['restart_init'])):.2f} s in the median against
{median(kept(base['restart_init'])):.2f} s without it. To every rank past its first step it took
{step:.2f} s against {median(kept(base['restart'])):.2f} s without it"""
        if torchrun and kept(torchrun["restart"]):
            text += f" and {median(kept(torchrun['restart'])):.2f} s with torchrun 2.x"
        after = step - median(kept(pre["restart_init"]))
        ddp = median(kept(pre["restart_model"])) - median(kept(pre["restart_init"]))
        text += f""" ({'under' if step < 1 else 'over'} the 1 s target for a restart with `--preload
torch`, on {rec['machine']['cpus']} CPUs shared by {s['workers']} workers). Of its {after:.2f} s
after `init_process_group`, {ddp:.2f} s went to building the model in DDP, whose constructor
imports `torch._dynamo` (some 900 modules) in every worker: `import torch` leaves it out."""
        if dynamo and kept(dynamo["restart"]):
            text += f""" Preloaded as well (`--preload torch,torch._dynamo`),
every rank was past its first step {median(kept(dynamo['restart'])):.2f} s after the exit."""
        text += "\n"
    if torchrun:
        ok = len(kept(torchrun["restart"]))
        tries = ok + rec["failures"].get("torchrun 2.x (restart)", 0)
        text += f"""
torchrun 2.x restarted the job in {ok} of {tries} tries: in {'each' if ok == 0 else 'each other'}
the next attempt failed, or hung for 90 s, before every rank was past its first step. Its
agent's store keeps the last attempt's keys, so a restarted Gloo group can try the last
attempt's addresses ([cli.md](cli.md#where-trainrun-differs-from-torchrun)): run by hand, such a
restart's ranks failed with `Gloo connectFullMesh failed ... Connection refused`.
"""
    return text + "\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
