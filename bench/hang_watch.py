#!/usr/bin/python3
"""What the roll call and the hang watch cost:
 (a) `trainrun --stacks` of 16 local Python workers, with py-spy and without it (eu-stack);
 (b) the same of 2 x 8 workers over two agents on this machine (the other node asked through the
     built-in rendezvous), with py-spy;
 (c) the launcher's CPU and wake-ups while 8 silent workers sleep, without and with
     --hang-timeout (600 s: the watch waits, no roll call falls in the window).

Usage: bench/hang_watch.py [--trainrun PATH] [--worker PATH] [--py-spy PATH] [--runs N]
                           [--idle-seconds S] [--json PATH]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from bench_doc import ROOT, add_json_option, heading, provenance, publish, record, spread  # noqa: E402
from ports import free_port  # noqa: E402

JOB = os.path.join(ROOT, "tests", "e2e", "stacks_job.py")


def without_py_spy(path):
    return os.pathsep.join(d for d in path.split(os.pathsep)
                           if not os.path.exists(os.path.join(d, "py-spy")))


def tools_env(base, with_py_spy):
    env = dict(base)
    env["PATH"] = without_py_spy(env.get("PATH", ""))
    if with_py_spy:
        env["PATH"] = os.path.dirname(ARGS.py_spy) + os.pathsep + env["PATH"]
    return env


def wait_ready(ready, count, procs, timeout=300):
    deadline = time.monotonic() + timeout
    while len(os.listdir(ready)) < count:
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            raise SystemExit(f"the job did not get ready ({len(os.listdir(ready))} of {count})")
        time.sleep(0.1)


def roll_calls(nodes, nproc, with_py_spy, runs):
    """Wall seconds of each `trainrun --stacks` of a job of `nodes` agents x `nproc` workers."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TRAINRUN_RUNTIME_DIR=os.path.join(tmp, "runtime"),
                   PYTHON_EXEC=ARGS.python)
        env = tools_env(env, with_py_spy)
        release, ready = os.path.join(tmp, "release"), os.path.join(tmp, "ready")
        os.mkdir(ready)
        common = [f"--nproc-per-node={nproc}", f"--log-dir={tmp}/logs"]
        if nodes > 1:
            common += [f"--nnodes={nodes}", "--rdzv-backend=static",
                       f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-id=bench"]
        procs = []
        for node in range(nodes):
            rank = [f"--node-rank={node}"] if nodes > 1 else []
            procs.append(subprocess.Popen([ARGS.trainrun, *common, *rank, JOB, release, ready],
                                          env=env, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        try:
            wait_ready(ready, nodes * nproc, procs)
            walls = []
            for _ in range(runs):
                t0 = time.perf_counter()
                r = subprocess.run([ARGS.trainrun, f"--stacks={procs[0].pid}"], env=env,
                                   capture_output=True, text=True, timeout=300)
                walls.append(time.perf_counter() - t0)
                if r.returncode != 0 or f"{nodes * nproc} ranks on {nodes} node" not in r.stdout:
                    raise SystemExit(f"trainrun --stacks failed:\n{r.stdout}{r.stderr}")
            return walls
        finally:
            open(release, "w").close()
            for p in procs:
                p.wait(timeout=120)


def thread_stats(pid):
    """(CPU seconds from schedstat, voluntary context switches) summed over `pid`'s threads."""
    cpu, switches = 0, 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                cpu += int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        switches += int(line.split()[1])
        except OSError:
            pass
    return cpu / 1e9, switches


def idle(extra, seconds):
    """The launcher's CPU seconds and wake-ups (voluntary context switches) while 8 workers
    sleep, from 1 s after the start to 1 s before they end."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TRAINRUN_RUNTIME_DIR=os.path.join(tmp, "runtime"))
        p = subprocess.Popen([ARGS.trainrun, "--nproc-per-node=8", *extra, f"--log-dir={tmp}/logs",
                              ARGS.worker, "sleep", str(seconds)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        cpu0, sw0 = thread_stats(p.pid)
        time.sleep(seconds - 2.0)
        cpu1, sw1 = thread_stats(p.pid)
        p.wait(timeout=120)
        return cpu1 - cpu0, sw1 - sw0, seconds - 2.0


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainrun", default=os.path.join(ROOT, "build", "apps", "trainrun", "trainrun"))
    ap.add_argument("--worker", default=os.path.join(ROOT, "build", "tests", "workers", "test_worker"))
    ap.add_argument("--py-spy", default=shutil.which("py-spy") or "")
    ap.add_argument("--python", default="/usr/bin/python3")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    add_json_option(ap)
    ARGS = ap.parse_args()
    if not ARGS.py_spy:
        raise SystemExit("py-spy not found: give --py-spy PATH")

    stacks = {}
    for name, nodes, nproc, py_spy in (("16 local, py-spy", 1, 16, True),
                                       ("16 local, eu-stack", 1, 16, False),
                                       ("2 x 8 over two agents, py-spy", 2, 8, True)):
        stacks[name] = roll_calls(nodes, nproc, py_spy, ARGS.runs)
        print(f"{name}: {', '.join(f'{w:.2f}' for w in stacks[name])} s", flush=True)
    idles = {}
    for _ in range(ARGS.runs):
        for name, extra in (("without --hang-timeout", []),
                            ("--hang-timeout=600", ["--hang-timeout=600"])):
            cpu, wakeups, window = idle(extra, ARGS.idle_seconds)
            runs = idles.setdefault(name, {"cpu_s": [], "wakeups": [], "window_s": window})
            runs["cpu_s"].append(cpu), runs["wakeups"].append(wakeups)
            print(f"{name}: {cpu * 1000:.3f} ms CPU, {wakeups} wake-ups over {window:.0f} s",
                  flush=True)
    publish("hang_watch", record("hang_watch", {"roll_call_s": stacks, "idle": idles},
                                 {"runs": ARGS.runs}), ARGS.json)


def render(rec):
    s, res = rec["settings"], rec["results"]
    rows = "\n".join(f"| {name} | {spread(w, '{:.2f}')} |" for name, w in res["roll_call_s"].items())
    idle_rows = "\n".join(f"| {name} | {spread(v['cpu_s'], '{:.3f}', 1e3)} | "
                          f"{spread(v['wakeups'], '{:.0f}')} |" for name, v in res["idle"].items())
    window = next(iter(res["idle"].values()))["window_s"]
    return heading("Roll call and hang watch", rec) + f"""
`bench/hang_watch.py` — (a) `trainrun --stacks` of a running job of Python workers
(`tests/e2e/stacks_job.py`, each sleeping in a loop), from the command's start to its exit:
collection on every node, the dumps written, the report printed. (b) The launcher's own threads
while 8 silent workers sleep ({window:.0f} s window, from 1 s after the start): CPU from
`/proc/<pid>/task/*/schedstat`, wake-ups as voluntary context switches. Median (min–max) of
{s['runs']} runs each.

| (a) roll call of | time (s) |
|---|---:|
{rows}

| (b) 8 sleeping workers | launcher CPU (ms) | wake-ups |
|---|---:|---:|
{idle_rows}

Each agent runs the tools of up to 8 workers at a time (py-spy pauses each worker for the
milliseconds it reads it); on two agents each node collects its own at the same time. Without
`--hang-timeout` the agent has no timer at all; with it, one timer that waits for the timeout
(re-armed when output came meanwhile, never sooner than a second away).

""" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
