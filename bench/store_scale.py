#!/usr/bin/env python3
"""The job's c10d store at scale: N ranks' start-up (bench/store_load.cpp) against the store
trainrun's agent serves and against torch's own TCPStore server with libuv, in turn, each run on
a fresh server. Writes JSON (--json) and the section "The job's store at scale" of
docs/benchmarks.md.

  python3 bench/store_scale.py --build BUILD --python PYTHON [--clients 1024,4096,...]
      [--gloo-clients 1024,2048] [--servers trainrun,libuv] [--repeat R] [--timeout S]
      [--json FILE]

As root it runs in a network namespace of its own (loopback only), so that the kernel's counters
(/proc/net/netstat) are its runs' alone and nothing else on the machine shares its listen queues;
and it raises RLIMIT_NOFILE as far as /proc/sys/fs/nr_open allows, for itself, the generator and
both servers.
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_doc import heading, median, provenance, publish, record  # noqa: E402

NETNS_MARK = "TRAINRUN_STORE_SCALE_NETNS"
# Why the runs have a network namespace of their own, for the section.
NETNS_NOTE = ("In a network namespace of its own (loopback only): torch's libuv server looks up "
              "the name of each client's address on its loop (`getnameinfo`), which fails at "
              "once there; on the host it asked the name server about every 127.x.y.z address, "
              "and a query left unanswered held the whole server until the resolver gave up.")
DESCRIPTORS_SPARE = 256  # beside one per connection: the server's and the generator's own files

# Makes the agent serve the store: it asks the worker's interpreter for torch's version.
TORCH_STUB = "__version__ = '2.5.0'\n"
# trainrun's one worker: says MASTER_PORT and whether the agent serves the store, then waits.
WORKER = """
import os, sys, time
out = sys.argv[1]
with open(out + ".tmp", "w") as f:
    f.write(os.environ["MASTER_PORT"] + " " + os.environ.get("TORCHELASTIC_USE_AGENT_STORE", ""))
os.rename(out + ".tmp", out)
while not os.path.exists(out + ".go"):
    time.sleep(0.1)
"""
# torch's own server, as torchrun 2.x's agent makes it (use_libuv is the default there).
LIBUV = """
import datetime, os, sys
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=True, wait_for_workers=False,
                      timeout=datetime.timedelta(seconds=900))
print(store.port, flush=True)
sys.stdin.read()
"""


def read_text(path, default=""):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


def status_kib(pid, field):
    for line in read_text(f"/proc/{pid}/status").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid):
    """User and system CPU of process `pid` itself (/proc/PID/stat), apart."""
    fields = read_text(f"/proc/{pid}/stat").rpartition(")")[2].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) / tick, int(fields[12]) / tick) if fields else (0.0, 0.0)


def children_cpu_seconds():
    """User and system CPU of this process's reaped children (the generator, once it ended)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime, r.ru_stime


def tcp_counters():
    """The kernel's TcpExt counters of this network namespace (/proc/net/netstat)."""
    lines = read_text("/proc/net/netstat").splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            return dict(zip(names.split()[1:], map(int, values.split()[1:])))
    return {}


def listen_backlog(port):
    """The accept queue's length as the kernel applies it (ss: Send-Q of the listening socket)."""
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                         text=True).stdout.split()
    return int(out[2]) if len(out) > 2 else None


def enter_network_namespace():
    """As root: once, re-run this program in a network namespace of its own, loopback up."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    if os.environ.get(NETNS_MARK) != "1":
        os.environ[NETNS_MARK] = "1"
        os.execvp("unshare", ["unshare", "--net", "--", sys.executable, *sys.argv])
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    return True


def raise_descriptors(need):
    """RLIMIT_NOFILE for `need` descriptors where allowed (as root with CAP_SYS_RESOURCE up to
    fs.nr_open): inherited by the generator and both servers. Returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < need:
        try:
            wanted = min(need, int(read_text("/proc/sys/fs/nr_open", str(hard))))
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            soft = hard = wanted
        except (ValueError, OSError):
            pass  # the hard limit binds: larger runs are not made, and the section says why
    soft = max(soft, min(need, hard))
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return soft, hard


def set_somaxconn(value):
    """net.core.somaxconn of this network namespace: the cap of the accept queue of a server
    started after it (listen() reads it)."""
    with open("/proc/sys/net/core/somaxconn", "w") as f:
        f.write(str(value))


def kernel_limits():
    """The sysctls that bind a burst of connects, as the runs start."""
    names = ["net/core/somaxconn", "net/ipv4/tcp_max_syn_backlog", "net/ipv4/tcp_syncookies",
             "net/ipv4/tcp_abort_on_overflow", "fs/nr_open", "fs/file-max"]
    return {n.replace("/", "."): int(read_text("/proc/sys/" + n, "0").split()[0]) for n in names}


class TrainrunServer:
    """A real trainrun agent whose one worker makes it serve the job's store, then waits."""

    def __init__(self, build, tmp):
        self.dir = tempfile.mkdtemp(dir=tmp)
        stub = os.path.join(self.dir, "stub", "torch")
        os.makedirs(stub)
        open(os.path.join(stub, "__init__.py"), "w").close()
        with open(os.path.join(stub, "version.py"), "w") as f:
            f.write(TORCH_STUB)
        script = os.path.join(self.dir, "worker.py")
        with open(script, "w") as f:
            f.write(WORKER)
        self.out = os.path.join(self.dir, "port")
        self.err = os.path.join(self.dir, "err")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(stub))
        self.proc = subprocess.Popen(
            [os.path.join(build, "apps", "trainrun", "trainrun"), "--standalone",
             "--nproc-per-node=1", script, self.out], env=env, stdout=subprocess.DEVNULL,
            stderr=open(self.err, "w"))
        self.pid = self.proc.pid
        deadline = time.monotonic() + 60
        while not os.path.exists(self.out):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise SystemExit(f"trainrun did not start its worker: {read_text(self.err)}")
            time.sleep(0.05)
        port, shared = read_text(self.out).split()
        if shared != "True":
            self.close()
            raise SystemExit("the agent does not serve the store (TORCHELASTIC_USE_AGENT_STORE="
                             f"{shared!r})")
        self.port = int(port)

    def close(self):
        open(self.out + ".go", "w").close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class LibuvServer:
    """torch's TCPStore server (libuv) in a `python` process of its own."""

    def __init__(self, python):
        self.proc = subprocess.Popen([python, "-c", LIBUV], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.strip().isdigit():
            self.close()
            raise SystemExit(f"{python} did not start torch's TCPStore (exit {self.proc.poll()})")
        self.port = int(line)
        self.pid = self.proc.pid

    def close(self):
        self.proc.kill()
        self.proc.wait()


def one_run(args, server_name, n, pattern, tmp):
    server = (TrainrunServer(args.build, tmp) if server_name == "trainrun"
              else LibuvServer(args.python))
    try:
        backlog = listen_backlog(server.port)
        base_kib = status_kib(server.pid, "VmRSS")
        # VmHWM from here on: the run's peak, not the import's (the libuv server's torch).
        with open(f"/proc/{server.pid}/clear_refs", "w") as f:
            f.write("5")
        cpu0, counters0 = cpu_seconds(server.pid), tcp_counters()
        gen0 = children_cpu_seconds()
        cmd = [os.path.join(args.build, "bench", "store", "store_load"), "--port",
               str(server.port), "--clients", str(n), "--pattern", pattern, "--processes",
               str(args.processes), "--timeout", str(args.timeout)]
        try:
            out = subprocess.run(cmd, capture_output=True, text=True,
                                 timeout=args.timeout + 60).stdout
            result = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            result = {"timed_out": True, "seconds": None}
        counters = tcp_counters()
        gen = [b - a for a, b in zip(gen0, children_cpu_seconds())]
        cpu = [b - a for a, b in zip(cpu0, cpu_seconds(server.pid))]
        peak_kib = status_kib(server.pid, "VmHWM")
        result.update({
            "server": server_name, "clients": n, "pattern": pattern,
            "rss_mib": round(peak_kib / 1024, 1), "rss_base_mib": round(base_kib / 1024, 1),
            "kib_per_connection": round((peak_kib - base_kib) / n, 2),
            "cpu_s": round(sum(cpu), 2), "cpu_system_s": round(cpu[1], 2),
            "generator_cpu_s": round(sum(gen), 2), "generator_system_s": round(gen[1], 2),
            "listen_backlog": backlog})
        for name in ("ListenOverflows", "ListenDrops", "TCPSynRetrans", "TCPReqQFullDrop",
                     "TCPReqQFullDoCookies"):
            result[name] = counters.get(name, 0) - counters0.get(name, 0)
        return result
    finally:
        server.close()


def stats(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    return min(xs), median(xs), max(xs)


def fmt_stats(s, unit="", digits=2):
    if s is None:
        return "—"
    lo, mid, hi = s
    if lo == hi:
        return f"{mid:.{digits}f}{unit}"
    return f"{mid:.{digits}f}{unit} ({lo:.{digits}f}–{hi:.{digits}f})"


def table(runs):
    rows = ["| ranks | pattern | server | time to all past the barrier | request p50 / p99 | "
            "connect p99 | connects retried (SYN resent) | peak RSS | KiB / connection | "
            "server CPU (in the kernel) | generator CPU |",
            "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    def key(r):
        return r["clients"], r["pattern"], r["server"], r.get("somaxconn")

    keys = []
    for r in runs:
        if key(r) not in keys:
            keys.append(key(r))
    several = len({k[3] for k in keys}) > 1
    for n, pattern, server, somaxconn in keys:
        rs = [r for r in runs if key(r) == (n, pattern, server, somaxconn)]
        ranks = f"{n:,}" + (f" (somaxconn {somaxconn:,})" if several else "")
        if all(r.get("skipped") for r in rs):
            rows.append(f"| {ranks} | {pattern} | {server} | not run: {rs[0]['skipped']} "
                        "| | | | | | | |")
            continue
        done = [r for r in rs if r.get("seconds") is not None]
        if not done:
            why = ("timed out" if any(r.get("timed_out") for r in rs) else "failed")
            past = max(r.get("ranks_past_barrier", 0) for r in rs)
            rows.append(f"| {ranks} | {pattern} | {server} | {why} ({past:,} of {n:,} past the "
                        f"barrier in {rs[0].get('timeout', '')} s) | | | | "
                        f"{fmt_stats(stats([r.get('rss_mib') for r in rs]), ' MiB', 0)} | | | |")
            continue
        rows.append(
            f"| {ranks} | {pattern} | {server} | "
            f"{fmt_stats(stats([r['seconds'] for r in done]), ' s')}"
            f"{'' if len(done) == len(rs) else f' ({len(rs) - len(done)} of {len(rs)} timed out)'}"
            f" | {fmt_stats(stats([r['p50_ms'] for r in done]), ' ms')} / "
            f"{fmt_stats(stats([r['p99_ms'] for r in done]), ' ms')} | "
            f"{fmt_stats(stats([r['connect_p99_ms'] for r in done]), ' ms')} | "
            f"{max(r['retried_connects'] for r in done)} "
            f"({max(r['TCPSynRetrans'] for r in done)}) | "
            f"{fmt_stats(stats([r['rss_mib'] for r in done]), ' MiB', 0)} | "
            f"{fmt_stats(stats([r['kib_per_connection'] for r in done]), '', 1)} | "
            f"{fmt_stats(stats([r['cpu_s'] for r in done]), ' s')}{kernel_share(done)} | "
            f"{fmt_stats(stats([r.get('generator_cpu_s') for r in done]), ' s')} |")
    return "\n".join(rows)


def at_largest_queue(runs):
    """Of `runs`, each size's at the largest accept queue (--somaxconn) it ran with."""
    queue = {}
    for r in runs:
        queue[r["clients"]] = max(queue.get(r["clients"], 0), r.get("somaxconn", 0))
    return [r for r in runs if r.get("somaxconn", 0) == queue[r["clients"]]]


def time_bound(runs, cpus):
    """The bullet that says how far below its time any server could take a run here: the CPU the
    kernel spent for the server and the generator's CPU share the machine's CPUs. NCCL's
    pattern from 4,096 ranks, each size at its largest accept queue; medians."""
    done = [r for r in runs if r["pattern"] == "nccl" and r["clients"] >= 4096
            and r.get("seconds") is not None and r.get("cpu_system_s") is not None
            and r.get("generator_cpu_s") is not None]
    done = at_largest_queue(done)
    cells, below = [], []
    for n in sorted({r["clients"] for r in done}):
        at_n = [r for r in done if r["clients"] == n]
        by = {server: [r for r in at_n if r["server"] == server] for server in ("trainrun", "libuv")}
        if not all(by.values()):
            continue
        kernel = min(median([r["cpu_system_s"] for r in rs]) for rs in by.values())
        generator = min(median([r["generator_cpu_s"] for r in rs]) for rs in by.values())
        bound = (kernel + generator) / cpus
        libuv = median([r["seconds"] for r in by["libuv"]])
        trainrun = median([r["seconds"] for r in by["trainrun"]])
        cells.append(f"{n:,} ranks: ({kernel:.2f} s + {generator:.2f} s) / {cpus} = "
                     f"{bound:.2f} s, against libuv's {libuv:.2f} s and trainrun's "
                     f"{trainrun:.2f} s")
        below.append(libuv / 2 < bound)
    if not cells:
        return ""
    verdict = ("half of libuv's time is below that floor at every size here" if all(below) else
               "half of libuv's time is below that floor at " +
               f"{sum(below)} of {len(below)} sizes here")
    return textwrap.fill(
        "- **How fast any server could be here**: the servers' CPU is mostly the kernel's "
        "(the loopback TCP of both ends of each connection), and the generator needs about as "
        f"much again on the same {cpus} CPUs. A server that did nothing of its own would still "
        "leave a run the kernel's part of a server's CPU and the generator's CPU (the smaller "
        f"median of the two servers' runs, each) over {cpus} CPUs: " + "; ".join(cells) +
        f"; {verdict}.", width=100, subsequent_indent="  ")


def kernel_share(runs):
    """' (NN% in the kernel)': the server's system CPU over its whole, of the runs together."""
    total = sum(r["cpu_s"] for r in runs)
    if total <= 0 or any(r.get("cpu_system_s") is None for r in runs):
        return ""
    return f" ({100 * sum(r['cpu_system_s'] for r in runs) / total:.0f}% in the kernel)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", help="the build directory (trainrun, store_load)")
    ap.add_argument("--python", help="a Python with torch 2.x (the libuv server)")
    ap.add_argument("--clients", default="1024,4096,16384,65536,100000",
                    help="ranks of the NCCL pattern, comma-separated")
    ap.add_argument("--gloo-clients", default="1024,2048",
                    help="ranks of the Gloo pattern (N^2 requests), at most 2,048; '' for none")
    ap.add_argument("--servers", default="trainrun,libuv")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each size on each server")
    ap.add_argument("--timeout", type=int, default=120, help="bound of one run, in seconds")
    ap.add_argument("--processes", type=int, default=1, help="processes of the generator")
    ap.add_argument("--somaxconn", default="",
                    help="net.core.somaxconn of the runs' own network namespace, comma-separated "
                         "values: each size runs at the first, and a size of more ranks than the "
                         "first also at each other ('': as it is)")
    ap.add_argument("--json", metavar="PATH",
                    help="write the record to PATH instead of bench/results/store_scale.json, and "
                         "leave docs/benchmarks.md as it is")
    args = ap.parse_args()
    if not args.build or not args.python:
        ap.error("--build and --python are needed to run")
    args.build = os.path.abspath(args.build)
    sizes = [("nccl", int(n)) for n in args.clients.split(",") if n]
    gloo = [int(n) for n in args.gloo_clients.split(",") if n]
    if any(n > 2048 for n in gloo):
        ap.error("--gloo-clients: at most 2,048 (N^2 requests)")
    sizes += [("gloo", n) for n in gloo]
    servers = args.servers.split(",")
    if not set(servers) <= {"trainrun", "libuv"}:
        ap.error("--servers: trainrun, libuv or both")
    try:
        backlogs = [int(v) for v in args.somaxconn.split(",") if v]
    except ValueError:
        ap.error(f"--somaxconn: not a comma-separated list of numbers: {args.somaxconn!r}")
    if any(v < 1 for v in backlogs):
        ap.error("--somaxconn: each value at least 1")
    if backlogs and os.environ.get(NETNS_MARK) != "1" and os.geteuid() != 0:
        ap.error("--somaxconn needs root (a network namespace of the runs' own)")

    netns = enter_network_namespace()
    biggest = max(n for _, n in sizes)
    nofile = raise_descriptors(biggest + DESCRIPTORS_SPARE)
    if not netns:
        backlogs = []
    if backlogs:
        set_somaxconn(backlogs[0])
    limits = kernel_limits()
    somaxconns = backlogs or [limits["net.core.somaxconn"]]
    limits.update({"RLIMIT_NOFILE": list(nofile), "own_network_namespace": netns})
    runs = []
    given_up = {}  # server -> the size at which it timed out: larger sizes are not run
    with tempfile.TemporaryDirectory() as tmp:
        for pattern, n in sizes:
            for somaxconn in somaxconns:
                if somaxconn != somaxconns[0] and n <= somaxconns[0]:
                    continue  # the first already holds every rank's connect
                if backlogs:
                    set_somaxconn(somaxconn)
                for server in servers:
                    for i in range(args.repeat):
                        base = {"server": server, "clients": n, "pattern": pattern, "repeat": i,
                                "timeout": args.timeout, "somaxconn": somaxconn}
                        why = None
                        if n + DESCRIPTORS_SPARE > nofile[0]:
                            why = (f"the server needs a descriptor per rank; RLIMIT_NOFILE is "
                                   f"{nofile[0]:,} and could not be raised")
                        elif (server, pattern) in given_up and n > given_up[(server, pattern)]:
                            why = f"timed out at {given_up[(server, pattern)]:,}"
                        if why:
                            runs.append(dict(base, skipped=why, seconds=None))
                            print(f"{pattern} {server} {n}: not run: {why}", flush=True)
                            continue
                        r = dict(base, **one_run(args, server, n, pattern, tmp))
                        runs.append(r)
                        print(json.dumps(r), flush=True)
                        if r.get("timed_out"):
                            given_up[(server, pattern)] = n

    torch = subprocess.run([args.python, "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True).stdout.strip()
    publish("store_scale", record("store_scale", runs, {
        "repeat": args.repeat, "timeout_s": args.timeout, "generator_processes": args.processes},
        results_key="runs", torch=torch, limits=limits), args.json)


def render(record):
    runs, limits = record["runs"], record["limits"]
    torch = record["torch"]
    timeout, repeat = record["settings"]["timeout_s"], record["settings"]["repeat"]
    cpus = record["machine"]["cpus"]
    queues = {}  # somaxconn -> {server: the accept queue the kernel applied}
    for r in runs:
        if r.get("listen_backlog"):
            queues.setdefault(r.get("somaxconn", limits.get("net.core.somaxconn")), {})[
                r["server"]] = r["listen_backlog"]
    somaxconns = sorted(queues) or [limits.get("net.core.somaxconn")]
    limits_text = textwrap.fill(
        f"- **Limits**: somaxconn {somaxconns[0]:,}"
        + (f" (and {', '.join(f'{v:,}' for v in somaxconns[1:])} where the ranks cell says so: "
           "the runs' own, set before the server starts)" if len(somaxconns) > 1 else "") + ", "
        f"tcp_max_syn_backlog {limits.get('net.ipv4.tcp_max_syn_backlog')}, syncookies "
        f"{limits.get('net.ipv4.tcp_syncookies')}; RLIMIT_NOFILE "
        f"{limits['RLIMIT_NOFILE'][0]:,}; the accept queue as the kernel applies it (`ss`): "
        + ("; ".join(f"somaxconn {v:,}: " + ", ".join(f"{s} {b:,}" for s, b in
                                                      sorted(queues[v].items()))
                     for v in sorted(queues)) or "—") + ". "
        + (NETNS_NOTE if limits.get("own_network_namespace") else ""),
        width=100, subsequent_indent="  ")
    machine_text = textwrap.fill(provenance(record) + " The machine was shared: compare the "
                                 "servers within one run, not across machines.", width=100)
    return heading("The job's store at scale", record) + f"""
N ranks' start-up against the job's c10d store, all ranks at once: `bench/store_load` plays every
rank on a connection of its own from a loopback address of its own, doing what
`init_process_group` does on torch 2.15 with the agent's store: connect, `VALIDATE` and `PING`,
`ADD init/`; NCCL's unique id (rank 0 `SET`s it, every other rank `WAIT`s for it and `GET`s it);
the store-based barrier (`ADD` 1, `ADD` 0, the last rank `SET`s `:last_worker`, every rank
`WAIT`s for it); Gloo's pattern instead of NCCL's where it says gloo (every rank `SET`s its
address and `WAIT`s for and `GET`s every other's). Against the store trainrun's agent serves
(a real `trainrun --standalone` whose worker waits) and torch's own server with libuv
(`TCPStore(..., is_master=True, use_libuv=True)`, torch {torch}), a fresh server for each run,
in turn.

- **Time**: from the first rank's `connect()` to the last rank's barrier `WAIT` answered, on
  the generator's clock (one process of it; runs bounded at {timeout} s, a size not run past one
  that timed out). Median (min–max) of {repeat} run(s) each.
- **Request latency**: of the requests the store answers at once (`PING`, `ADD`, `GET`), from
  the write to the whole reply; `WAIT`s wait for other ranks and are not counted. **Connect**:
  from `connect()` to the connection made, retries included; a connect refused or timed out is
  tried again after a back-off (retried), and SYNs the kernel sent again (dropped from a full
  accept queue) are counted from `/proc/net/netstat` (`TCPSynRetrans`).
- **Server memory and CPU**: from `/proc` of the serving process (the agent; the Python
  process of the libuv server): peak RSS (`VmHWM`, reset before the run), its growth over the RSS
  before the run divided by N, and user+system CPU during the run, with the part spent in the
  kernel (system CPU: the loopback TCP of accepting, reading, writing and closing). **Generator
  CPU**: user+system of `bench/store_load` (its clients' side of the same TCP). Both share the
  machine's {cpus} CPUs, so a run's time is at least the two CPUs together over {cpus}: the
  server's kernel part and the generator bound what any server can do here.
{limits_text}
{time_bound(runs, cpus)}
- **Record**: `bench/results/store_scale.json` keeps every run under `runs` (`clients`, `pattern`,
  `server`, `seconds`, `p50_ms`, `p99_ms`, `rss_mib`, `cpu_s` and the rest of the columns), with
  the machine, date and commit.

{table(runs)}

{machine_text}
"""


if __name__ == "__main__":
    main()
