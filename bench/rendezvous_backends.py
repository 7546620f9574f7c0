#!/usr/bin/python3
"""Rendezvous backends: the built-in rendezvous against etcd, through bench/rendezvous_backends (N
agents' rendezvous handlers on one event loop), with an etcd of its own started here (one member
on loopback, data in a temporary directory). Each run is one round of each backend at each size;
every run's values are kept.

Usage: bench/rendezvous_backends.py [--build build] [--etcd /usr/bin/etcd] [--sizes 2,8,64]
                                    [--runs 5] [--json PATH]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from bench_doc import (add_json_option, heading, provenance, publish, record,  # noqa: E402
                       rendezvous_bench, spread)
from ports import free_port  # noqa: E402

ROW = re.compile(r"^\| (\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", re.M)


def seconds(cell):
    cell = cell.strip()
    return None if cell == "failed" else float(cell.split()[0]) / 1e3


def start_etcd(etcd, data):
    client, peer = free_port(), free_port()
    proc = subprocess.Popen(
        [etcd, "--name", "bench", "--data-dir", data,
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"bench=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    version = subprocess.run([etcd, "--version"], capture_output=True, text=True).stdout
    deadline = time.time() + 30
    while time.time() < deadline:
        r = subprocess.run(["curl", "-s", f"http://127.0.0.1:{client}/health"],
                           capture_output=True, text=True)
        if '"health":"true"' in r.stdout:
            return proc, client, version.splitlines()[0] if version else etcd
        time.sleep(0.2)
    proc.kill()
    sys.exit("rendezvous_backends: etcd did not become healthy within 30 s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--etcd", default="/usr/bin/etcd")
    ap.add_argument("--sizes", default="2,8,64")
    ap.add_argument("--runs", type=int, default=5)
    add_json_option(ap)
    args = ap.parse_args()
    binary = rendezvous_bench(args.build, "rendezvous_backends")
    rows = {}
    with tempfile.TemporaryDirectory() as data:
        etcd, port, version = start_etcd(args.etcd, data)
        try:
            for i in range(args.runs):
                for n in (int(x) for x in args.sizes.split(",")):
                    r = subprocess.run([binary, "--etcd", f"127.0.0.1:{port}", "--sizes", str(n),
                                        "--runs", "1"], capture_output=True, text=True,
                                       timeout=600)
                    m = ROW.search(r.stdout)
                    if not m:
                        sys.exit(f"rendezvous_backends: no result from {binary}:\n{r.stdout}"
                                 f"{r.stderr}")
                    row = rows.setdefault(n, {"agents": n, "builtin_round_s": [],
                                              "etcd_round_s": [], "builtin_barrier_s": [],
                                              "etcd_barrier_s": []})
                    for key, cell in zip(("builtin_round_s", "etcd_round_s",
                                          "builtin_barrier_s", "etcd_barrier_s"), m.groups()[1:]):
                        row[key].append(seconds(cell))
                    print(f"run {i + 1}, {n} agents: {m.group(0)}", flush=True)
        finally:
            etcd.terminate()
            etcd.wait()
    publish("rendezvous_backends", record("rendezvous_backends", list(rows.values()), {
        "runs": args.runs, "etcd": version}), args.json)


def ms(xs):
    ok = [x for x in xs if x is not None]
    failed = len(xs) - len(ok)
    text = spread(ok, "{:.1f}", 1e3) if ok else "failed"
    return text + (f", {failed} failed" if failed and ok else "")


def render(rec):
    s = rec["settings"]
    table = ["| agents | built-in: round formed (ms) | etcd: round formed (ms) | built-in: exit "
             "barrier (ms) | etcd: exit barrier (ms) |", "|---:|---:|---:|---:|---:|"]
    for row in rec["results"]:
        table.append(f"| {row['agents']} | {ms(row['builtin_round_s'])} | "
                     f"{ms(row['etcd_round_s'])} | {ms(row['builtin_barrier_s'])} | "
                     f"{ms(row['etcd_barrier_s'])} |")
    return heading("Rendezvous backends: built-in against etcd (`bench/rendezvous_backends`)",
                   rec) + f"""
N agents' rendezvous handlers (the interface the agent uses, `RendezvousHandler`) in one process
on one event loop, each joining like an agent (one worker, its own reserved port); round formed:
from `start()` to the last assignment; exit barrier: from the first `report_done()` to the last
stop. Median (min–max) of {s['runs']} rounds of each backend at each size, each with a fresh run
id, the backends and sizes in turn. The built-in rendezvous is hosted by the first handler; etcd
is {s['etcd'].replace('etcd Version: ', 'etcd ')}, one member on loopback, data in a temporary directory, started by the benchmark.
The aim: a round of 64 formed in under 250 ms with the exit barrier under 250 ms.

""" + "\n".join(table) + "\n\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
