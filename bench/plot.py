#!/usr/bin/python3
"""Draws the plots of docs/benchmarks.md from the benchmarks' JSON results (--json PATH).

Reads DATA/<benchmark>.json for each benchmark below (a missing file skips its plots, and says so)
and writes PNGs at 100 DPI into OUT. Needs matplotlib (Debian: python3-matplotlib).

Usage: bench/plot.py [--data bench/results] [--out docs/img]
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

from store_scale import at_largest_queue  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS, THEIRS = "#1f77b4", "#d62728"  # trainrun / C++ runtime; torchrun / Python


def figure(title, subtitle=None, ncols=1):
    fig, axes = plt.subplots(1, ncols, figsize=(6.4 * ncols if ncols > 1 else 6.4, 4.0),
                             squeeze=False)
    fig.suptitle(title, fontsize=11)
    if subtitle:
        fig.text(0.5, 0.005, subtitle, ha="center", va="bottom", fontsize=7, color="#555555")
    return fig, list(axes[0])


def save(fig, out, name):
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.path.join(out, name)
    # No software version or date in the file: the same records draw the same bytes.
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    print(f"plot: wrote {os.path.relpath(path, ROOT)}")


def note(record):
    """Which program and machine: the exact commands are in docs/benchmarks.md."""
    words = record["command"].split()
    program = words[1] if words[0] == "python3" and len(words) > 1 else words[0]
    m = record.get("machine")
    if isinstance(m, dict):
        m = f"{m['cpus']} CPUs, {m['memory_gib']:.0f} GiB, Linux {m['kernel']}"
    text = f"{program}" + (f"; {m}" if m else "")
    if "load_before" in record:
        return text + (f"; load average {record['load_before'][0]:.1f} before, "
                       f"{record['load_after'][0]:.1f} after; {record['date'][:10]}")
    load = record.get("load_average_at_end")
    return text + (f"; load average {load[0]:.1f} at the end" if load else "")


def mid(xs):
    """The median of a run's values; a single value as it is (older records kept medians)."""
    if not isinstance(xs, list):
        return xs
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def span(xs, scale=1.0):
    """Error bars from the median to the min and the max."""
    xs = [x * scale for x in (xs if isinstance(xs, list) else [xs])]
    m = mid(xs)
    return [m - min(xs)], [max(xs) - m]


def errorbars(ax, x, series, scale, color):
    lo = [span(s, scale)[0][0] for s in series]
    hi = [span(s, scale)[1][0] for s in series]
    ax.errorbar(x, [mid(s) * scale for s in series], yerr=[lo, hi], fmt="none", ecolor=color,
                capsize=3, alpha=0.8)


def ratios(ax, x, ours, theirs):
    """Writes theirs/ours above each pair of points: the speed-up."""
    for xi, o, t in zip(x, ours, theirs):
        ax.annotate(f"{t / o:.0f}x", (xi, o * 2.2), ha="center", fontsize=8, color="#333333")


def log_ticks(ax, values):
    """Log x axis labelled at the measured values only."""
    ax.set_xscale("log")
    ax.set_xticks(values, [str(v) for v in values])
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def launch_overhead(r, out):
    rows = r["results"]
    n = [row["workers"] for row in rows]
    fig, (ax,) = figure("Launch time: start N workers of /bin/true, wait for them", note(r))
    ours = [mid(row["trainrun"]["wall_s"]) * 1e3 for row in rows]
    theirs = [mid(row["torchrun"]["wall_s"]) * 1e3 for row in rows]
    ax.plot(n, ours, "o-", color=OURS, label="trainrun")
    ax.plot(n, theirs, "s-", color=THEIRS, label="torchrun 1.13")
    errorbars(ax, n, [row["trainrun"]["wall_s"] for row in rows], 1e3, OURS)
    errorbars(ax, n, [row["torchrun"]["wall_s"] for row in rows], 1e3, THEIRS)
    ratios(ax, n, ours, theirs)
    ax.set(yscale="log", xlabel="workers", ylabel="wall time (ms, median, min–max)",
           ylim=(min(ours) / 2, max(theirs) * 2))
    log_ticks(ax, n)
    ax.legend(loc="center right", fontsize=8), ax.grid(True, which="both", alpha=0.3)
    ax.text(0.01, 0.99, "labels: torchrun time / trainrun time", transform=ax.transAxes,
            va="top", fontsize=7, color="#555555")
    save(fig, out, "launch_time.png")


def supervision(r, out):
    res = r["results"]
    kinds = [("trainrun", OURS, "trainrun"), ("torchrun", THEIRS, "torchrun 1.13\n(--monitor_interval 0.1)")]
    fig, (ax,) = figure("Failure to exit: a worker dies, how long until the launcher has exited",
                        note(r))
    for x, (kind, color, label) in enumerate(kinds):
        samples = [s * 1e3 for s in res[kind]["death_to_exit_s"]]
        ax.scatter([x] * len(samples), samples, color=color, alpha=0.6, zorder=3)
        med = mid(res[kind]["death_to_exit_s"]) * 1e3
        ax.hlines(med, x - 0.2, x + 0.2, color=color, linewidth=2, zorder=4)
        ax.annotate(f"median {med:.0f} ms", (x + 0.22, med), va="center", fontsize=8)
    ax.set_xticks(range(len(kinds)), [k[2] for k in kinds])
    ax.set(yscale="log", ylabel="worker death → launcher exit (ms)", xlim=(-0.6, 1.9))
    ax.grid(True, axis="y", which="both", alpha=0.3)
    save(fig, out, "failure_to_exit.png")

    fig, (ax,) = figure("Console throughput: --tee 3, 4 workers printing 100-byte lines", note(r))
    walls = [res[k]["tee_wall_s"] for k, _, _ in kinds]
    walls = [w if isinstance(w, list) else [w] for w in walls]
    runs = [[res[k]["tee_bytes"] / w / 1e6 for w in ws] for (k, _, _), ws in zip(kinds, walls)]
    rates = [mid(r) for r in runs]
    bars = ax.bar([k[2] for k in kinds], rates, color=[k[1] for k in kinds], width=0.5,
                  yerr=[[mid(r) - min(r) for r in runs], [max(r) - mid(r) for r in runs]],
                  capsize=4)
    ax.bar_label(bars, [f"{x:,.0f} MB/s" for x in rates], fontsize=8)
    ax.set(ylabel="MB/s through the launcher (median, min–max)")
    ax.grid(True, axis="y", alpha=0.3)
    save(fig, out, "tee_throughput.png")


def rendezvous(compare, scale, out):
    panels = [p for p in (compare, scale) if p]
    fig, axes = figure("Rendezvous: time to form a job against the number of agents",
                       "\n".join(note(p) for p in panels if "command" in p), ncols=len(panels))
    axes = iter(axes)
    if compare:
        ax = next(axes)
        rows = compare["results"]
        n = [row["agents"] for row in rows]
        for kind, color, label in (("trainrun", OURS, "trainrun"), ("torchrun", THEIRS, "torchrun 1.13")):
            ax.plot(n, [mid(row[kind]["started_s"]) * 1e3 for row in rows], "o-", color=color,
                    label=f"{label}: all workers started")
            ax.plot(n, [mid(row[kind]["exited_s"]) * 1e3 for row in rows], "o--", color=color,
                    alpha=0.6, label=f"{label}: all agents exited")
            errorbars(ax, n, [row[kind]["started_s"] for row in rows], 1e3, color)
        ratios(ax, n, [mid(row["trainrun"]["started_s"]) * 1e3 for row in rows],
               [mid(row["torchrun"]["started_s"]) * 1e3 for row in rows])
        ax.set(yscale="log", xlabel="agents (processes on one machine)",
               ylabel="ms from the first agent's start", title="real agents, one worker each")
        log_ticks(ax, n)
        ax.legend(loc="center left", fontsize=7), ax.grid(True, which="both", alpha=0.3)
    if scale:
        ax = next(axes)
        by_size = {}
        for row in scale["results"]:
            if row.get("ok") and not row.get("preflight"):
                by_size.setdefault(row["nodes"], []).append(row)
        n = sorted(by_size)
        rounds = [[r["round_s"] for r in by_size[k]] for k in n]
        barriers = [[r["barrier_s"] for r in by_size[k]] for k in n]
        ax.plot(n, [mid(x) for x in rounds], "o-", color=OURS, label="round formed")
        ax.plot(n, [mid(x) for x in barriers], "s--", color=OURS, alpha=0.6,
                label="exit barrier")
        errorbars(ax, n, rounds, 1, OURS)
        errorbars(ax, n, barriers, 1, OURS)
        ax.set(yscale="log", xlabel="protocol clients", ylabel="seconds (median, min–max)",
               title="trainrun's server, protocol clients in one process")
        log_ticks(ax, n)
        ax.legend(fontsize=7), ax.grid(True, which="both", alpha=0.3)
    save(fig, out, "rendezvous.png")


def allreduce(r, out):
    rows = r["results"]
    size = [row["bytes"] for row in rows]
    workers = r["settings"]["workers"]
    fig, (ax,) = figure(f"All-reduce bandwidth, Gloo on CPU, {workers} workers over loopback",
                        note(r))
    for impl, style, color, label in (
            ("runtime", "o-", OURS, "C++: trainrun::runtime::get_process_group()"),
            ("torch", "s--", THEIRS, "Python: torch.distributed.all_reduce")):
        if f"{impl}_s" in rows[0]:  # every run's time: the bandwidth of the median, and its range
            bw = [[row["bytes"] / t / 1e9 for t in row[f"{impl}_s"]] for row in rows]
            ax.plot(size, [mid(b) for b in bw], style, color=color, label=label)
            errorbars(ax, size, bw, 1, color)
        else:
            ax.plot(size, [row[impl]["algbw_gbps"] for row in rows], style, color=color,
                    label=label)
    ax.set(xscale="log", yscale="log", xlabel="tensor size (bytes)", ylabel="algbw (GB/s, median)")
    ax.legend(fontsize=8), ax.grid(True, which="both", alpha=0.3)
    save(fig, out, "allreduce_bandwidth.png")


def fashion_mnist(r, out):
    res, s = r["results"], r["settings"]
    fig, (loss_ax, speed_ax) = figure(
        f"FashionMNIST ResNet-18: {s['workers']} workers, {s['subset']} images per epoch",
        note(r), ncols=2)
    for name, color, label in (("cpp", OURS, "C++ (LibTorch + runtime)"),
                               ("python", THEIRS, "Python (PyTorch DDP)")):
        runs = res[name]
        if "epochs" not in runs[0]:  # an older record: one median per epoch
            runs = [{"epochs": runs}]
        epochs = [e["epoch"] for e in runs[0]["epochs"]]
        loss = [[run["epochs"][i]["loss"] for run in runs] for i in range(len(epochs))]
        speed = [[run["epochs"][i]["images_per_s"] for run in runs] for i in range(len(epochs))]
        loss_ax.plot(epochs, [mid(x) for x in loss], "o-", color=color, label=label)
        speed_ax.plot(epochs, [mid(x) for x in speed], "o-", color=color, label=label)
        if len(runs) > 1:
            errorbars(speed_ax, epochs, speed, 1, color)
    loss_ax.set(xlabel="epoch", ylabel="training loss", title="loss")
    speed_ax.set(xlabel="epoch", ylabel="images/s (all workers)", title="speed", ylim=(0, None))
    for ax in (loss_ax, speed_ax):
        ax.set_xticks(epochs)
        ax.legend(fontsize=8), ax.grid(True, alpha=0.3)
    save(fig, out, "fashion_mnist.png")


def at_scale(store, scale, out):
    """Seconds against N, log-log: the job's store under N ranks' start-up (both servers, each
    pattern), and a restart and a hang report against N nodes."""
    panels = [p for p in (store, scale) if p]
    fig, axes = figure("At scale: time against N", "\n".join(note(p) for p in panels),
                       ncols=len(panels))
    axes = iter(axes)
    if store:
        ax = next(axes)
        timeout = store["settings"]["timeout_s"]
        sizes = set()
        for pattern, style, face in (("nccl", "-", None), ("gloo", "--", "none")):
            for server, color, marker, cross, label in (
                    ("trainrun", OURS, "o", "x", "trainrun's agent"),
                    ("libuv", THEIRS, "s", "+", "torch's libuv server")):
                rows = [r for r in store["runs"]
                        if r["server"] == server and r["pattern"] == pattern]
                rows = at_largest_queue(rows)
                if not rows:
                    continue
                done, timed_out = {}, set()
                for r in rows:
                    if r.get("timed_out"):
                        timed_out.add(r["clients"])
                    elif r.get("seconds") is not None and not r.get("failed"):
                        done.setdefault(r["clients"], []).append(r["seconds"])
                n = sorted(done)
                sizes.update(n, timed_out)
                ax.plot(n, [mid(done[k]) for k in n], marker + style, color=color,
                        markerfacecolor=face or color, label=f"{label}, {pattern}")
                errorbars(ax, n, [done[k] for k in n], 1, color)
                if timed_out:
                    ax.plot(sorted(timed_out), [timeout] * len(timed_out), cross, color=color,
                            markersize=9, label=f"{label}, {pattern}: timed out ({timeout} s)")
        ax.set(yscale="log", xlabel="ranks (store clients)", ylabel="seconds (median, min–max)",
               title="the job's store: N ranks' start-up")
        log_ticks(ax, sorted(sizes))
        ax.legend(loc="center", fontsize=7), ax.grid(True, which="both", alpha=0.3)
    if scale:
        ax = next(axes)
        res = scale["results"]
        sizes = set()
        for key, field, marker, style, label in (
                ("restart_failure", "restart_s", "o", "-", "restart, a worker failed"),
                ("restart_lost", "restart_s", "o", "--", "restart, a node lost"),
                ("rollcall", "ask_to_verdict_s", "D", "-", "hang report, ask to verdict")):
            done = {}
            for r in res.get(key, []):
                if r.get("ok"):
                    done.setdefault(r["nodes"], []).append(r[field])
            n = sorted(done)
            sizes.update(n)
            color = OURS if key != "rollcall" else "#2ca02c"
            ax.plot(n, [mid(done[k]) for k in n], marker + style, color=color,
                    alpha=1 if style == "-" else 0.7, label=label)
            errorbars(ax, n, [done[k] for k in n], 1, color)
        targets = [(1024, 1), (16384, 3), (1024, 30)]
        ax.plot([t[0] for t in targets], [t[1] for t in targets], "_", color="#555555",
                markersize=16, markeredgewidth=2, label="targets")
        ax.set(yscale="log", xlabel="nodes", ylabel="seconds (median, min–max)",
               title="a restart and a hang report")
        log_ticks(ax, sorted(sizes))
        ax.legend(fontsize=7), ax.grid(True, which="both", alpha=0.3)
    save(fig, out, "at_scale.png")


def load(data, name):
    path = os.path.join(data, f"{name}.json")
    if not os.path.exists(path):
        print(f"plot: {os.path.relpath(path, ROOT)} missing: its plots are skipped "
              f"(run bench/{name} with --json {path})", file=sys.stderr)
        return None
    with open(path) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "img"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    records = {name: load(args.data, name) for name in
               ("launch_overhead", "supervision", "rendezvous_compare", "rendezvous_scale",
                "allreduce_bandwidth", "fashion_mnist_speed", "store_scale", "at_scale")}
    if not any(records.values()):
        sys.exit(f"plot: no results in {args.data}")
    if records["launch_overhead"]:
        launch_overhead(records["launch_overhead"], args.out)
    if records["supervision"]:
        supervision(records["supervision"], args.out)
    if records["rendezvous_compare"] or records["rendezvous_scale"]:
        rendezvous(records["rendezvous_compare"], records["rendezvous_scale"], args.out)
    if records["allreduce_bandwidth"]:
        allreduce(records["allreduce_bandwidth"], args.out)
    if records["fashion_mnist_speed"]:
        fashion_mnist(records["fashion_mnist_speed"], args.out)
    if records["store_scale"] or records["at_scale"]:
        at_scale(records["store_scale"], records["at_scale"], args.out)


if __name__ == "__main__":
    main()
