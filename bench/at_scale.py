"""A restart and a hang report at scale: runs bench/rendezvous_scale --restart and
bench/rollcall_scale several times for each size, keeps every run's values with the load before
and after each, and renders docs/benchmarks.md's "At scale" section from the JSON.

    python3 bench/at_scale.py --build build --runs 5 --json bench/results/at_scale.json
    python3 bench/at_scale.py --render   # the section only, from bench/results/at_scale.json
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_doc  # noqa: E402


def sizes(text):
    return [int(x) for x in text.split(",") if x]


def run(cmd, timeout=900):
    """(exit code, stdout, stderr, load before, load after) of one run."""
    before = list(os.getloadavg())
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        code, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        code, out, err = -1, e.stdout or "", f"timed out after {timeout} s"
    return code, out, err, before, list(os.getloadavg())


def restart_run(binary, nodes, failing):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        code, _, err, before, after = run([binary, "--sizes", str(nodes), "--restart", failing,
                                           "--json", f.name])
        row = json.load(open(f.name))["results"][0] if os.path.getsize(f.name) else {}
    return {"nodes": nodes, "exit_code": code, "load_before": before, "load_after": after,
            "stderr": err.strip()[-2000:], **row}


def first_round_run(binary, nodes):
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        code, _, err, before, after = run([binary, "--sizes", str(nodes), "--json", f.name])
        row = json.load(open(f.name))["results"][0] if os.path.getsize(f.name) else {}
    return {"nodes": nodes, "exit_code": code, "load_before": before, "load_after": after,
            "stderr": err.strip()[-2000:], **row}


def rollcall_run(binary, nodes):
    code, out, err, before, after = run([binary, "--nodes", str(nodes)])
    try:
        row = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        row = {"nodes": nodes, "ok": False}
    return {"exit_code": code, "load_before": before, "load_after": after,
            "stderr": err.strip()[-2000:], **row}


def by_size(runs):
    out = {}
    for r in runs:
        out.setdefault(r["nodes"], []).append(r)
    return out


def loaded(record):
    """Whether anything besides the runs loaded the machine: a 1-minute load average of its CPUs
    or more before or after them."""
    loads = [record["load_before"][0], record["load_after"][0]]
    return max(loads) >= record["machine"]["cpus"]


def cell(values, digits=3):
    if not values:
        return "failed"
    return bench_doc.spread(values, f"{{:.{digits}f}}")


def loads(runs):
    values = [r["load_before"][0] for r in runs] + [r["load_after"][0] for r in runs]
    return f"{min(values):.1f}–{max(values):.1f}"


def render(record):
    res = record["results"]
    lines = [
        bench_doc.heading("At scale: a restart and a hang report (`bench/at_scale.py`)",
                          record),
        "![Seconds against N, log-log: the job's store under N ranks' start-up, trainrun's and "
        "torch's libuv server; a restart and a hang report against N nodes](img/at_scale.png)",
        "",
        "Left, from `bench/results/store_scale.json` (\"The job's store at scale\", above): N "
        "ranks' start-up against the store trainrun's agent serves and torch's libuv server, "
        "NCCL's pattern (filled) and Gloo's (hollow); a cross marks a size whose runs all timed "
        "out, at the time bound; sizes not run are not drawn; a size run at several accept queues "
        "(somaxconn), at its largest. Right, from this section's record: "
        "the restart (a worker failed, a node lost) and the hang report (ask to verdict) against "
        "N nodes, with the targets. Median and min–max of the runs that counted; "
        "`bench/plot.py` draws it from the two records.",
        "",
        bench_doc.provenance(record) + (
            " **The machine was loaded while it ran.**" if loaded(record) else "") +
        " The 1-minute load average before and after each run is in the tables ("
        f"{record['machine']['cpus']} CPUs: a load of 10 leaves a process about a fifth of one). "
        "Runs: those that finished / all. Each cell: the median of the runs, (min–max); every "
        "run's values are in `bench/results/at_scale.json`.",
        "",
        "**The restart** (`rendezvous_scale --restart failure|lost`): N simulated agents (full "
        "protocol clients, in one process) form a round; then the agent in the middle reports a "
        "worker's failure (every node restarts) or leaves (the others restart without it); each "
        "other agent joins again with its rank, as an agent does; measured to the last agent's "
        "next assignment. The job's c10d store is not in that simulation (its clients are the "
        "workers): the host's clear of it between attempts (close every rank's connection, then "
        "empty it) is timed apart, on a real `StoreServer` holding a connection and the key "
        "Gloo's `init_process_group` leaves for each rank, 8 ranks a node (torch 2.15: one key a "
        "rank, `0//cpu//0/R`, of 154 + 8 x ranks bytes). Targets: 1,024 nodes under 1 s, 16,384 "
        "under 3 s.",
        "",
        "| nodes | runs | restart, failure (s) | restart, lost (s) | store close (s) | "
        "store clear (s) | first round (s) | load |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    failure = by_size(res["restart_failure"])
    lost = by_size(res.get("restart_lost", []))
    for n in sorted(failure):
        runs = failure[n]
        ok = [r for r in runs if r.get("ok")]
        store = [r["store"] for r in ok if r.get("store")]
        skipped = next((s["skipped"] for s in store if s.get("skipped")), "")
        close = cell([s["close_s"] for s in store if s.get("close_s", -1) >= 0])
        clear = cell([s["clear_s"] for s in store if s.get("clear_s", -1) >= 0])
        if skipped:
            close, clear = f"n/a: {skipped}", "n/a"
        lost_ok = [r["restart_s"] for r in lost.get(n, []) if r.get("ok")]
        lines.append(
            f"| {n:,} | {len(ok)}/{len(runs)} | {cell([r['restart_s'] for r in ok])} | "
            f"{cell(lost_ok) if n in lost else '—'} | {close} | {clear} | "
            f"{cell([r['round_s'] for r in ok])} | {loads(runs + lost.get(n, []))} |")
    first = by_size(res.get("first_round", []))
    if first:
        lines += ["", "The first round at larger sizes (`rendezvous_scale --sizes N`; target: "
                  "65,536 under 5 s):", "", "| nodes | runs | first round (s) | load | note |",
                  "|---:|---:|---:|---|---|"]
        for n in sorted(first):
            runs = first[n]
            ok = [r["round_s"] for r in runs if r.get("ok")]
            note = next((r["stderr"].splitlines()[-1] for r in runs
                         if not r.get("ok") and r["stderr"]), "")
            lines.append(f"| {n:,} | {len(runs)} | {cell(ok)} | {loads(runs)} | {note} |")
    lines += [
        "",
        "**The hang report** (`rollcall_scale --nodes N`): N nodes of 8 ranks, each answering the "
        "roll call with py-spy-like stacks (4 threads, 10 frames on the main one) and flight "
        "recorder dumps (the default group's last all_reduces and its node's own tensor-parallel "
        "group: N + 1 groups), one rank in its data loading and behind in collective #42. The "
        "real server relays both roll calls to the asking agent (node 0, the server on its loop "
        "as in the hosting agent); `judge_first`, `judge_second` and `hang_report` give the "
        "verdict. Ask to verdict: both roll calls, both judgements and the report, without the "
        "3 s the watch waits between the roll calls (`kHangConfirmGap`) and without each node's "
        "collection of its own stacks (done by all nodes at once: `bench/hang_watch.py`). A run "
        "counts (runs: counted/all) when its verdict names the rank, its host, group 0, #42 and "
        "all_reduce, and no node was missing. The longest verdict: the longest the verdict ran in "
        "one piece (`judge_second` and `hang_report` back to back), on the watch's own thread: the "
        "asking agent's loop (which serves the rendezvous and the store) does not wait for it. "
        "Target: under 30 s at 1,024 nodes.",
        "",
        "| nodes | ranks | runs | ask to verdict (s) | one roll call (s) | judgements (s) | "
        "report (s) | longest verdict, off the loop (s) | answers (MB) | report lines | report (KB) "
        "| load |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for n, runs in sorted(by_size(res["rollcall"]).items()):
        ok = [r for r in runs if r.get("ok")]
        if not ok:
            lines.append(f"| {n:,} | | {len(runs)} | failed | | | | | | | | {loads(runs)} |")
            continue
        lines.append(
            f"| {n:,} | {ok[0]['ranks']:,} | {len(ok)}/{len(runs)} | "
            f"{cell([r['ask_to_verdict_s'] for r in ok], 2)} | "
            f"{cell([s for r in ok for s in r['roll_call_s']], 2)} | "
            f"{cell([r['judge_s'] for r in ok], 2)} | {cell([r['report_s'] for r in ok], 2)} | "
            f"{cell([r['longest_stall_s'] for r in ok], 2)} | "
            f"{ok[0]['answers_bytes'] / 1e6:.1f} | {ok[0]['report_lines']} | "
            f"{ok[0]['report_bytes'] / 1e3:.1f} | {loads(runs)} |")
    lines += ["", targets(res)]
    return "\n".join(lines) + "\n"


def targets(res):
    """The targets' verdicts, from the medians of the runs that counted."""
    failure = by_size(res["restart_failure"])

    def restart(n, bound, more=""):
        times = [r["restart_s"] for r in failure.get(n, []) if r.get("ok")]
        if not times:
            return f"no run finished at {n:,} nodes"
        t = bench_doc.median(times)
        return f"{t:.2f} s at {n:,} nodes ({'under' if t < bound else 'over'} {bound} s{more})"

    small = [r["store"] for r in failure.get(1024, []) if r.get("ok") and r.get("store")]
    close = [x["close_s"] for x in small if x.get("close_s", -1) >= 0]
    clear = [x["clear_s"] for x in small if x.get("clear_s", -1) >= 0]
    store = (f"; the store's close and clear on the host, {bench_doc.median(close):.2f} + "
             f"{bench_doc.median(clear):.2f} s more" if close and clear else "")
    calls = [r for r in by_size(res["rollcall"]).get(1024, []) if r.get("ok")]
    verdict = [r["ask_to_verdict_s"] for r in calls]
    stall = [r["longest_stall_s"] for r in calls]
    text = (f"**Targets**, in the medians: the restart took {restart(1024, 1, store)} and "
            f"{restart(16384, 3)}; the slowest runs are in the table. The restart costs less than "
            "the first round (no connection, no handshake).")
    if verdict:
        text += (f" The hang report at 1,024 nodes: {bench_doc.median(verdict):.1f} s from the ask "
                 f"to the verdict ({'under' if bench_doc.median(verdict) < 30 else 'over'} 30 s), "
                 f"{max(verdict):.1f} s in the slowest run; the longest verdict in one piece "
                 f"took {bench_doc.median(stall):.1f} s ({min(stall):.1f} s at the least).")
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--restart-sizes", type=sizes, default=sizes("1024,4096,16384"))
    ap.add_argument("--lost-sizes", type=sizes, default=sizes("1024,16384"))
    ap.add_argument("--first-round-sizes", type=sizes, default=sizes("65536"))
    ap.add_argument("--rollcall-sizes", type=sizes, default=sizes("256,1024"))
    ap.add_argument("--render", action="store_true",
                    help="only render the section from bench/results/at_scale.json")
    bench_doc.add_json_option(ap)
    args = ap.parse_args()
    if args.render:
        bench_doc.Tree(bench_doc.ROOT).write_section("at_scale")
        return
    rdzv = os.path.join(args.build, "bench", "rendezvous", "rendezvous_scale")
    rollcall = os.path.join(args.build, "bench", "rendezvous", "rollcall_scale")
    for path in (rdzv, rollcall):
        if not os.path.exists(path):
            sys.exit(f"at_scale: {path} is not there: build the rendezvous_scale and "
                     "rollcall_scale targets")
    results = {"restart_failure": [], "restart_lost": [], "first_round": [], "rollcall": []}
    for _ in range(args.runs):
        for n in args.restart_sizes:
            results["restart_failure"].append(restart_run(rdzv, n, "failure"))
        for n in args.lost_sizes:
            results["restart_lost"].append(restart_run(rdzv, n, "lost"))
        for n in args.rollcall_sizes:
            results["rollcall"].append(rollcall_run(rollcall, n))
    # A size the machine may not hold: tried once per run, the reason kept when it fails.
    for _ in range(args.runs):
        for n in args.first_round_sizes:
            results["first_round"].append(first_round_run(rdzv, n))
            if not results["first_round"][-1].get("ok"):
                break
    bench_doc.publish("at_scale", bench_doc.record("at_scale", results, {"runs": args.runs}),
                      args.json)

if __name__ == "__main__":
    main()
