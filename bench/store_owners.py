#!/usr/bin/env python3
"""What naming the store's connections costs (lib/launch/src/agent: connection_owner,
store_owners, store_asker): the lines of code, the time the agent's loop spends naming each
connection to the job's store (bench/store_owner_trace.cpp: W workers, each holding F more
descriptors), and, in real jobs on this machine (stub workers that speak the store's protocol),
how long after the last rank reached the store node 0's agent had named them all (its start-up
line): one node of 4 workers, where it names them itself, and 2 nodes of 2, where it asks node
1 through the roll call.

  python3 bench/store_owners.py --build build [--workers 8,64] [--fds 64] [--repeat 5] [--runs 5]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from ports import free_port  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import add_json_option, heading, median, provenance, publish, record, spread  # noqa: E402

# The code that names the store's connections, and nothing else.
FILES = [f"lib/launch/src/agent/{name}.{ext}" for name in
         ("connection_owner", "store_owners", "store_asker") for ext in ("hpp", "cpp")]

# A worker that speaks torch 2.x's store protocol as its client does in init_process_group:
# VALIDATE, ADD init/ 1, then waits for the others; it keeps its connection a while, so that a
# node asked about it still finds it.
WORKER = """
import os, socket, struct, time
world = int(os.environ["WORLD_SIZE"])
s = socket.create_connection((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
def add(n):
    s.sendall(b"\\x04" + struct.pack("<Q", 5) + b"init/" + struct.pack("<q", n))
    got = b""
    while len(got) < 8:
        got += s.recv(8 - len(got))
    return struct.unpack("<q", got)[0]
s.sendall(b"\\x00" + struct.pack("<I", 0x3C85F7CE))
add(1)
deadline = time.monotonic() + 60
while add(0) < world and time.monotonic() < deadline:
    time.sleep(0.02)
time.sleep(2)
"""
STARTUP_LINE = "trainrun: attempt 0: round "


def lines_of_code():
    out = {}
    for path in FILES:
        with open(os.path.join(ROOT, path)) as f:
            out[path] = sum(1 for _ in f)
    return out


def trace(build, workers, fds, repeat):
    binary = os.path.join(build, "bench", "store", "store_owner_trace")
    if not os.access(binary, os.X_OK):
        sys.exit(f"store_owners: {binary} is not there: build the store_owner_trace target")
    r = subprocess.run([binary, "--workers", str(workers), "--fds", str(fds), "--repeat",
                        str(repeat)], capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"store_owners: store_owner_trace failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def unix(iso):
    return datetime.datetime.strptime(iso, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def agent(trainrun, args, env):
    """An agent whose stderr lines are kept with the unix time each came."""
    p = subprocess.Popen([trainrun, "-v", *args], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    lines = []

    def read():
        for line in p.stderr:
            lines.append((time.time(), line.rstrip("\n")))
    t = threading.Thread(target=read, daemon=True)
    t.start()
    return p, t, lines


def one_job(trainrun, nodes, directory):
    """(last rank at the store, line's delay after it), in seconds, on node 0's agent."""
    script = os.path.join(directory, "job.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(directory, "stub"))
    if nodes == 1:
        shapes = [["--standalone", "--nproc-per-node=4"]]
    else:
        endpoint = f"127.0.0.1:{free_port()}"
        shapes = [[f"--nnodes={nodes}", "--nproc-per-node=2", "--rdzv-backend=c10d",
                   f"--rdzv-endpoint={endpoint}", "--rdzv-id=owners"]] * nodes
    agents = []
    for i, shape in enumerate(shapes):
        summary = os.path.join(directory, f"summary{i}.json")
        agents.append((summary, *agent(trainrun, [*shape, f"--summary-file={summary}", script],
                                       env)))
    for summary, p, t, lines in agents:
        p.wait(timeout=300)
        t.join(timeout=30)
        if p.returncode != 0:
            sys.exit(f"store_owners: an agent failed ({p.returncode}):\n" +
                     "\n".join(line for _, line in lines))
    for summary, p, t, lines in agents:
        with open(summary) as f:
            s = json.load(f)["attempts"][0]["startup"]
        if s["store"] != "this node":
            continue
        at = [x["at_store_s"] for x in s["ranks"]]
        if len(at) != 4 or None in at or s["unattributed_store_connections"] != 0:
            sys.exit(f"store_owners: node 0 did not name every rank: {s}")
        said = [when for when, line in lines if line.startswith(STARTUP_LINE)]
        if len(said) != 1:
            sys.exit("store_owners: node 0 said no start-up line")
        last = unix(s["counted_from"]["at"]) + max(at)
        return max(at), said[0] - last
    sys.exit("store_owners: no agent served the store")


def count(text, low, high):
    """`text` as a whole number in low..high, else argparse's one-line refusal."""
    try:
        n = int(text)
    except ValueError:
        n = None
    if n is None or not low <= n <= high:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number in {low}..{high}")
    return n


def counts(text):
    return [count(x, 1, 1024) for x in text.split(",")]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--build", required=True)
    p.add_argument("--workers", type=counts, default="8,64",
                   help="the workers of the trace, comma-separated (1..1024 each)")
    p.add_argument("--fds", type=lambda t: count(t, 0, 4096), default=64)
    p.add_argument("--repeat", type=lambda t: count(t, 1, 1000), default=5)
    p.add_argument("--runs", type=lambda t: count(t, 1, 100), default=5)
    add_json_option(p)
    o = p.parse_args()
    trainrun = os.path.join(o.build, "apps", "trainrun", "trainrun")
    if not os.access(trainrun, os.X_OK):
        sys.exit(f"store_owners: {trainrun} is not there: build the trainrun target")
    traces = []
    for w in o.workers:
        t = trace(o.build, w, o.fds, o.repeat)
        traces.append(t)
        print(f"{w} workers: {median(t['sock_diag_us']):.1f} µs a connection (sock_diag), "
              f"{median(t['table_us']):.1f} µs (tables)", flush=True)
    jobs = []
    with tempfile.TemporaryDirectory(prefix="trainrun-store-owners-") as directory:
        stub = os.path.join(directory, "stub", "torch")
        os.makedirs(stub)
        open(os.path.join(stub, "__init__.py"), "w").close()
        with open(os.path.join(stub, "version.py"), "w") as f:
            f.write("__version__ = '2.5.0'\n")
        with open(os.path.join(directory, "job.py"), "w") as f:
            f.write(WORKER)
        for nodes in (1, 2):
            runs = [one_job(trainrun, nodes, directory) for _ in range(o.runs)]
            jobs.append({"nodes": nodes, "workers": 4, "last_at_store_s": [r[0] for r in runs],
                         "named_after_s": [r[1] for r in runs]})
            print(f"{nodes} node(s): named {median([r[1] for r in runs]) * 1e3:.1f} ms after "
                  "the last rank", flush=True)
    rec = record("store_owners", {"lines": lines_of_code(), "trace": traces, "jobs": jobs},
                 {"fds": o.fds, "repeat": o.repeat, "runs": o.runs})
    publish("store_owners", rec, o.json)


def naming_cost(rec, workers):
    """The median time the loop spends naming one connection with `workers` workers."""
    t = next(t for t in rec["results"]["trace"] if t["workers"] == workers)
    return f"{median(t['sock_diag_us']) / 1e3:.1f} ms"


def named_after(rec, nodes):
    """The median time from the last rank at the store to node 0's naming them all."""
    j = next(j for j in rec["results"]["jobs"] if j["nodes"] == nodes)
    return f"{median(j['named_after_s']) * 1e3:.1f} ms"


def render(rec):
    res = rec["results"]
    s = rec["settings"]
    table = ["| workers on the node | naming one connection, sock_diag (µs) | "
             "all W connections (ms) | the fallback's table read (µs) |",
             "|---:|---:|---:|---:|"]
    for t in res["trace"]:
        w = t["workers"]
        table.append(f"| {w} | {spread(t['sock_diag_us'], '{:.0f}')} | "
                     f"{median(t['sock_diag_us']) * w / 1e3:.2f} | "
                     f"{spread(t['table_us'], '{:.0f}')} |")
    jobs = ["| job | last rank at the store (s) | all named, after it (ms) |", "|---|---:|---:|"]
    for j in res["jobs"]:
        shape = "1 node of 4 workers" if j["nodes"] == 1 else f"{j['nodes']} nodes of 2 workers"
        jobs.append(f"| {shape} | {spread(j['last_at_store_s'], '{:.2f}')} | "
                    f"{spread(j['named_after_s'], '{:.1f}', 1e3)} |")
    lines = sum(res["lines"].values())
    return heading("Naming the store's connections", rec) + f"""
`bench/store_owners.py` — what it costs that node 0's agent names the worker behind each
connection to the job's store ([architecture.md](architecture.md#naming-the-stores-connections)
says why it is done so): {lines} lines in `connection_owner`, `store_owners` and `store_asker`.
On the agent's lookup thread (the loop answers meanwhile), at each connection's first request:
one sock_diag lookup and the workers' `/proc/PID/fd` read (`bench/store_owner_trace`, W workers of this node each holding
{s['fds']} more descriptors, every connection named {s['repeat']} times; median (min–max) per
connection); where a kernel has no sock_diag, `/proc/net/tcp` and `tcp6` are read whole instead
(the last column: that read and the search for the socket, on this machine's tables).

""" + "\n".join(table) + f"""

In real jobs on this machine (stub workers that speak the store's protocol, {s['runs']} runs
each): how long after the last rank reached the store node 0's agent had named every rank (its
start-up line; with 2 nodes, after asking node 1 through the roll call, which holds no worker:
the store answers while it goes on).

""" + "\n".join(jobs) + "\n\n" + provenance(rec) + "\n"


if __name__ == "__main__":
    main()
