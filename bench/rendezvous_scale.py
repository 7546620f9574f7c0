#!/usr/bin/python3
"""Rendezvous scale: runs bench/rendezvous_scale (the built-in server and N simulated agents)
--runs times for each size, with and without --preflight, and keeps every run's values; the
"Rendezvous scale" section of docs/benchmarks.md is rendered from them.

Usage: bench/rendezvous_scale.py [--build build] [--sizes 16,256,1024,4096,16384]
                                 [--preflight-sizes 1024,16384] [--runs 5] [--json PATH]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import (add_json_option, heading, provenance, publish, record,  # noqa: E402
                       rendezvous_bench, spread)


def one_run(binary, nodes, preflight):
    """One size, one run: the binary's own row, with the load before and after it."""
    before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        p = subprocess.run([binary, "--sizes", str(nodes), "--json", f.name]
                           + (["--preflight"] if preflight else []),
                           capture_output=True, text=True, timeout=600)
        row = json.load(open(f.name))["results"][0] if os.path.getsize(f.name) else {}
    return {"nodes": nodes, "preflight": preflight, "exit_code": p.returncode,
            "load_before": before, "load_after": [round(x, 2) for x in os.getloadavg()],
            "stderr": p.stderr.strip()[-2000:], **row}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--sizes", default="16,256,1024,4096,16384")
    ap.add_argument("--preflight-sizes", default="1024,16384")
    ap.add_argument("--runs", type=int, default=5)
    add_json_option(ap)
    args = ap.parse_args()
    binary = rendezvous_bench(args.build, "rendezvous_scale")
    sizes = [int(x) for x in args.sizes.split(",")]
    preflight_sizes = [int(x) for x in args.preflight_sizes.split(",") if x]
    runs = []
    for i in range(args.runs):
        # Each size with and without the preflight in turn, so that both see the same load.
        for n in sizes:
            runs.append(one_run(binary, n, False))
            if n in preflight_sizes:
                runs.append(one_run(binary, n, True))
            print(f"run {i + 1}, {n} nodes: round {runs[-1].get('round_s')}", flush=True)
    publish("rendezvous_scale", record("rendezvous_scale", runs, {
        "runs": args.runs, "sizes": sizes, "preflight_sizes": preflight_sizes}), args.json)


def by_size(runs, preflight):
    out = {}
    for r in runs:
        if r["preflight"] == preflight:
            out.setdefault(r["nodes"], []).append(r)
    return out


def s3(xs):
    return spread(xs, "{:.3f}") if xs else "failed"


def render(rec):
    s, runs = rec["settings"], rec["results"]
    table = ["| nodes | runs | round formed (s) | exit barrier (s) | host memory per agent (KiB) |",
             "|---:|---:|---:|---:|---:|"]
    for n, rows in sorted(by_size(runs, False).items()):
        ok = [r for r in rows if r.get("ok")]
        table.append(f"| {n:,} | {len(ok)}/{len(rows)} | {s3([r['round_s'] for r in ok])} | "
                     f"{s3([r['barrier_s'] for r in ok])} | "
                     f"{spread([r['rss_per_agent_kib'] for r in ok]) if ok else ''} |")
    pre = ["| nodes | runs | round formed (s), without | with `--preflight` | rank 0 checked by "
           "all (s) | exit barrier (s), with |", "|---:|---:|---:|---:|---:|---:|"]
    plain = by_size(runs, False)
    for n, rows in sorted(by_size(runs, True).items()):
        ok = [r for r in rows if r.get("ok")]
        without = [r["round_s"] for r in plain.get(n, []) if r.get("ok")]
        pre.append(f"| {n:,} | {len(ok)}/{len(rows)} | {s3(without)} | "
                   f"{s3([r['round_s'] for r in ok])} | {s3([r['preflight_s'] for r in ok])} | "
                   f"{s3([r['barrier_s'] for r in ok])} |")
    largest = max(s["preflight_sizes"]) if s["preflight_sizes"] else None
    total = ""
    if largest:
        ok = [r for r in by_size(runs, True).get(largest, []) if r.get("ok")]
        if ok:
            sums = [r["round_s"] + r["preflight_s"] for r in ok]
            total = (f"\n\nWith the preflight's connections counted, a round of {largest:,} formed "
                     f"and was checked in {spread(sums, '{:.2f}')} s in all (the round with every "
                     "join carrying an offer, then every node's check of rank 0).")
    loads = [r["load_before"][0] for r in runs] + [r["load_after"][0] for r in runs]
    return heading("Rendezvous scale (`bench/rendezvous_scale`)", rec) + f"""
Time for the built-in rendezvous server to form one round, and then to pass the exit barrier
(every node reports done, every node is told), with N protocol clients in a second process on
loopback, each connecting to an address of its own in 127.0.0.0/8 as agents on distinct hosts
come from distinct addresses (the host's memory is its own: resident set growth from before the
server starts to its peak, per agent); each client connects, completes the handshake, joins and
heartbeats like an agent. Median (min–max) of {s['runs']} runs of `build/bench/rendezvous/rendezvous_scale
--sizes N` for each size, the sizes in turn; runs: those that formed the round / all. Targets:
under 2 s at 1,024, under 5 s at 16,384.

""" + "\n".join(table) + """

With `--preflight` (`bench/preflight_cost.py` measures real agents): every join carries an offer
(about 300 bytes), and once the round has formed every node but rank 0 opens a connection to rank
0's preflight port (a real `PreflightListener` on the host's event loop, beside its rendezvous
server, as in an agent) and reads its greeting, all at once, from a third process; each size
with and without it in turn:

""" + "\n".join(pre) + total + f"""

The load average (one minute) was {min(loads):.1f} to {max(loads):.1f} over the runs; every run's
values and load are in `bench/results/rendezvous_scale.json`. """ + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
