#!/usr/bin/python3
"""Warm starts: what `--preload torch` saves a PyTorch job, against torchrun 2.x, in one run.

- start: 8 Gloo workers (--workers), from the launch to every rank past init_process_group;
- memory: the same workers' proportional set size (PSS, /proc/PID/smaps_rollup), summed, once
  every rank is past init_process_group (pages of torch a template shares count once);
- restart: 2 workers, rank 1 fails once past init_process_group; from its failure to every rank
  of the next attempt past init_process_group (--max-restarts=1).
Each launcher runs alternately, --runs times; every run is kept. The job is a script written here.

Usage: bench/warm_start.py --python VENV/bin/python [--trainrun PATH] [--workers 8] [--runs 5]
                           [--json PATH]
--python: an interpreter with torch 2.x (the workers' PYTHON_EXEC, and torchrun's).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import ROOT, add_json_option, heading, median, provenance, publish, record, spread  # noqa: E402

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
if mode == "restart" and attempt == "0" and rank == 1:
    with open(os.path.join(out, "failed"), "w") as f:
        f.write(repr(time.time()))
    sys.exit(1)
dist.barrier()
dist.destroy_process_group()
'''


def launchers(args):
    ours = [args.trainrun, "--standalone", "--monitor-interval=0.1"]
    return {
        "trainrun": ours,
        "trainrun --preload torch": ours + ["--preload", "torch"],
        "torchrun 2.x": [args.python, "-m", "torch.distributed.run", "--standalone",
                         "--monitor-interval=0.1"],
    }


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class JobFailed(Exception):
    pass


def kill_job(proc, out):
    """The launcher, and every process of its job (a launcher that ends may leave its workers:
    torchrun's, in sessions of their own, hang on in a Gloo connect)."""
    proc.kill()
    proc.wait()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if out.encode() in f.read():
                    os.kill(int(pid), 9)
        except OSError:
            pass


def wait_for(paths, proc, out, log, timeout=300):
    deadline = time.time() + timeout
    while not all(os.path.exists(p) for p in paths):
        if proc.poll() is not None or time.time() > deadline:
            kill_job(proc, out)
            log.seek(0)
            raise JobFailed(f"the job ended (exit {proc.returncode}) before every rank was past "
                            f"init_process_group: {log.read().decode()[-4000:]}")
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


def run_restart(cmd, job, env):
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd + ["--nproc-per-node=2", "--max-restarts=1", job, out,
                                       "restart"], env=env, stdout=subprocess.DEVNULL, stderr=log)
        files = [os.path.join(out, f"1_{r}") for r in range(2)] + [os.path.join(out, "failed")]
        wait_for(files, proc, out, log)
        failed = float(open(files[-1]).read())
        back = max(json.load(open(f))["past_init"] for f in files[:2])
        if proc.wait(timeout=120) != 0:
            kill_job(proc, out)
            raise JobFailed(f"{' '.join(cmd)} exited {proc.returncode}")
        return back - failed


def retried(name, what, failures, run):
    for _ in range(5):
        try:
            return run()
        except JobFailed as e:
            failures[f"{name} ({what})"] = failures.get(f"{name} ({what})", 0) + 1
            print(f"{name}: a {what} run failed, again: {str(e)[-300:]}", file=sys.stderr)
    sys.exit(f"warm_start: {name}'s {what} run failed five times in a row")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", required=True, help="an interpreter with torch 2.x")
    ap.add_argument("--trainrun", default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--only", help="comma-separated launcher names to run (default: all)")
    add_json_option(ap)
    args = ap.parse_args()
    version = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    if not version.startswith("2."):
        sys.exit(f"warm_start: {args.python} has no torch 2.x (found {version or 'none'})")
    env = dict(os.environ, PYTHON_EXEC=args.python, OMP_NUM_THREADS="1")
    chosen = launchers(args)
    if args.only:
        chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
    samples = {name: {"start": [], "pss": [], "restart": []} for name in chosen}
    failures = {}
    with tempfile.TemporaryDirectory() as tmp:
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        for _ in range(args.runs):
            for name, cmd in chosen.items():
                # A job that fails is counted and run again (four times at most): torchrun
                # 2.x's restarted Gloo ranks may find the last attempt's addresses in its store
                # and fail to connect ("Connection refused").
                start, pss = retried(name, "start", failures,
                                     lambda: run_start(cmd, job, args.workers, env))
                restart = retried(name, "restart", failures, lambda: run_restart(cmd, job, env))
                for key, value in (("start", start), ("pss", pss), ("restart", restart)):
                    samples[name][key].append(value)
                print(f"{name:26s} start {start:6.2f} s  PSS {pss / 1024:7.0f} MiB  restart "
                      f"{restart:5.2f} s", flush=True)
    publish("warm_start", record("warm_start", samples, {
        "runs": args.runs, "workers": args.workers, "torch": version}, failures=failures),
        args.json)


def render(rec):
    s, res = rec["settings"], rec["results"]
    base = res.get("trainrun")
    table = ["| launcher | start (s) | start / trainrun | workers' PSS (MiB) | restart (s) |",
             "|---|---:|---:|---:|---:|"]
    for name, r in res.items():
        ratio = f"{median(r['start']) / median(base['start']):.2f}" if base else "—"
        table.append(f"| {name} | {spread(r['start'], '{:.2f}')} | {ratio} | "
                     f"{spread(r['pss'], '{:.0f}', 1 / 1024)} | {spread(r['restart'], '{:.2f}')} |")
    failures = ", ".join(f"{k}: {v}" for k, v in rec["failures"].items()) or "none"
    text = heading("Warm starts", rec) + f"""
`bench/warm_start.py` — a Gloo job (import torch, `init_process_group`, one all-reduce) with
PyTorch {s['torch']} on {s['workers']} workers: **start** is from the launch to every rank past
`init_process_group`; **PSS** is the workers' proportional set size summed, once every rank is
past it; **restart** is 2 workers, rank 1 failing once past `init_process_group`, from its failure
to both ranks of the next attempt past it (`--max-restarts=1`). Median (min–max) of {s['runs']}
runs, each launcher in turn; the ratio is of the medians. Target: a restart under 1 s with
`--preload torch`. Jobs that failed and were run again: {failures}.

""" + "\n".join(table) + "\n"
    pre = res.get("trainrun --preload torch")
    if base and pre:
        restart = median(pre["restart"])
        text += f"""
With `--preload torch` the workers are forked from one interpreter that imported torch once: the
start took {median(pre['start']) / median(base['start']):.2f} of the plain start's time, the
workers' PSS {median(pre['pss']) / median(base['pss']):.2f} of theirs (the template's pages of
torch shared), and a restart forks two fresh workers instead of importing torch again
({restart:.2f} s in the median, {'under' if restart < 1 else 'over'} the 1 s target).
"""
    return text + "\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
