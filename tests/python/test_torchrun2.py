"""trainrun against the newest torchrun (PyTorch 2.x): the same worker environment, and every
option of its --help accepted. Run with TRAINRUN_PYTHON, an interpreter that imports torch 2.x."""
import json
import os
import re
import subprocess
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from ports import free_port  # noqa: E402
from torch_store import TorchStore  # noqa: E402

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
PY = os.environ.get("TRAINRUN_PYTHON", "")
ENV = dict(os.environ, PYTHON_EXEC=PY)
SCRIPT = os.path.join(HERE, "env_dump.py")

# Per run by nature: compared by form, not value. MASTER_ADDR is compared exactly: on one node
# both give this machine's name as Python's socket.getfqdn() does (docs/cli.md, "Workers").
FORM_ONLY = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}


def torchrun():
    return [PY, "-m", "torch.distributed.run"]


def test_the_reference_interpreter_has_torch_2():
    # A missing or wrong interpreter fails here rather than skipping the comparison.
    assert PY, "set TRAINRUN_PYTHON to an interpreter with PyTorch 2.x (cmake -DTRAINRUN_PYTHON=...)"
    r = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, f"{PY} cannot import torch:\n{r.stderr}"
    assert int(r.stdout.split(".")[0]) >= 2, r.stdout
    assert TRAINRUN and os.access(TRAINRUN, os.X_OK), "set TRAINRUN_BIN (ctest does)"


def read_dumps(out_dir, ranks):
    envs = {}
    for rank in range(ranks):
        with open(os.path.join(out_dir, f"{rank}.json")) as f:
            envs[rank] = json.load(f)
    return envs


def wait_all(procs, timeout=600):
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        results.append((p.returncode, err))
    for code, err in results:
        assert code == 0, err[-4000:]


def launch(launchers, out_dir):
    os.makedirs(out_dir)
    procs = [subprocess.Popen(cmd + [SCRIPT, out_dir], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=ENV) for cmd in launchers]
    wait_all(procs)


def added(env):
    """What the launcher set or changed, against the environment it was given."""
    env = dict(env)
    env.pop("_", None)  # the worker's own interpreter path differs by nature
    return {k: v for k, v in env.items() if ENV.get(k) != v}


# What trainrun adds on purpose: the flight recorder's buffer, which every torch 2.x process
# group fills (Gloo's too) and the hang report reads (docs/cli.md, "Hangs").
RECORDER = {"TORCH_FR_BUFFER_SIZE": "2000"}


def compare(ours, theirs, by_design=None):
    assert set(ours) == set(theirs)
    for rank in sorted(theirs):
        a, b = added(ours[rank]), added(theirs[rank])
        missing = set(b) - set(a)
        assert not missing, f"rank {rank}: torchrun 2.x sets {sorted(missing)}, trainrun does not"
        for k, v in RECORDER.items():
            assert a.pop(k, None) == v, (rank, k, a.get(k))
        extra = set(a) - set(b)
        assert not extra, f"rank {rank}: trainrun sets {sorted(extra)}, torchrun 2.x does not"
        for k in set(b) - FORM_ONLY:
            expected = (by_design or {}).get(k, b[k])
            assert a[k] == expected, (rank, k, a[k], b[k])
        assert a["MASTER_ADDR"] and 0 < int(a["MASTER_PORT"]) < 65536
        assert a["TORCHELASTIC_RUN_ID"] and a["TORCHELASTIC_RUN_ID"] != "none"
        assert a["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{a['LOCAL_RANK']}/error.json")
    # One job: the same store address for every worker.
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in ours.values()}) == 1


# --standalone, and one node without one (torchrun 2.x then runs its c10d rendezvous on
# localhost:0, as --standalone does).
@pytest.mark.parametrize("args,nproc", [(["--standalone"], 1), (["--standalone"], 2),
                                        (["--standalone"], 4), ([], 2)])
def test_environment_matches_torchrun2_standalone(args, nproc, tmp_path):
    launch([[TRAINRUN, *args, f"--nproc-per-node={nproc}"]], str(tmp_path / "ours"))
    launch([torchrun() + [*args, f"--nproc-per-node={nproc}"]], str(tmp_path / "theirs"))
    compare(read_dumps(str(tmp_path / "ours"), nproc), read_dumps(str(tmp_path / "theirs"), nproc))


# The descriptors a worker can hand on to what it starts (not close-on-exec), with what each is.
INHERITABLE = """\
import fcntl, json, os, sys
found = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        if not fcntl.fcntl(int(fd), fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}").split(":[")[0]
    except OSError:
        pass  # the directory's own descriptor, closed
with open(os.path.join(sys.argv[1], os.environ["RANK"] + ".json"), "w") as f:
    json.dump(found, f)
"""


def test_workers_inherit_no_descriptor_of_the_launchers_as_under_torchrun2(tmp_path):
    # A descriptor the launcher inherited (a shell's, a CI runner's), which torchrun's workers do
    # not get (subprocess' close_fds): a pipe whose reader would otherwise wait for the workers.
    script = tmp_path / "inheritable.py"
    script.write_text(INHERITABLE)
    read_end, write_end = os.pipe()
    try:
        for name, launcher in (("ours", [TRAINRUN]), ("theirs", torchrun())):
            out = tmp_path / name
            out.mkdir()
            r = subprocess.run(launcher + ["--standalone", "--nproc-per-node=2", str(script),
                                           str(out)],
                               capture_output=True, text=True, env=ENV, timeout=300,
                               pass_fds=(write_end,))
            assert r.returncode == 0, r.stderr[-4000:]
        ours, theirs = read_dumps(str(tmp_path / "ours"), 2), read_dumps(str(tmp_path / "theirs"), 2)
        assert ours == theirs
        assert all(str(write_end) not in found for found in theirs.values())
    finally:
        os.close(read_end)
        os.close(write_end)


def two_agents(launcher, run_id):
    # The same signal list on both sides, so that its value is compared as well.
    common = ["--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=127.0.0.1:{free_port()}", f"--rdzv-id={run_id}",
              "--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT"]
    return [launcher + common, launcher + common]


def test_environment_matches_torchrun2_two_nodes_c10d(tmp_path):
    run_id = f"job-{uuid.uuid4().hex[:8]}"
    launch(two_agents([TRAINRUN], run_id), str(tmp_path / "ours"))
    launch(two_agents(torchrun(), run_id), str(tmp_path / "theirs"))
    ours, theirs = read_dumps(str(tmp_path / "ours"), 4), read_dumps(str(tmp_path / "theirs"), 4)
    # On several nodes by design (docs/cli.md): group rank 0's address as the rendezvous saw it,
    # which every node reached; torchrun 2.x gives rank 0's socket.getfqdn(), which the others
    # may not resolve.
    compare(ours, theirs, {"MASTER_ADDR": "127.0.0.1"})
    for rank in range(4):
        assert ours[rank]["TORCHELASTIC_RUN_ID"] == theirs[rank]["TORCHELASTIC_RUN_ID"] == run_id
        assert ours[rank]["GROUP_RANK"] == str(rank // 2)
        assert ours[rank]["LOCAL_RANK"] == str(rank % 2)


# Torch 2.x workers on the store trainrun's agent hosts: the default group, a collective, a barrier
# and a new group, in two attempts; the first fails after it used the store, so the second must
# not meet its keys (torch 2.x's workers no longer prefix them per attempt).
STORE_JOB = r'''
import os, sys
import torch, torch.distributed as dist
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
assert os.environ["TORCHELASTIC_USE_AGENT_STORE"] == "True", os.environ["TORCHELASTIC_USE_AGENT_STORE"]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
dist.barrier()
group = dist.new_group(list(range(world)))
u = torch.tensor([1.0])
dist.all_reduce(u, group=group)
# One write per line: with python -u, print() writes the text and the newline separately.
sys.stdout.write(f"attempt {attempt} rank {rank}: sum={t.item():.0f} group={u.item():.0f}\n")
if attempt == 0 and rank == 1:
    sys.exit(3)
dist.barrier()
dist.destroy_process_group()
'''


def test_workers_use_the_agents_store_across_a_restart(tmp_path):
    script = tmp_path / "store_job.py"
    script.write_text(STORE_JOB)
    r = subprocess.run([TRAINRUN, "--standalone", "--nproc-per-node=2", "--max-restarts=1",
                        str(script)], capture_output=True, text=True, timeout=600, env=ENV)
    assert r.returncode == 0, r.stderr[-4000:]
    assert sorted(r.stdout.splitlines()) == [
        "attempt 0 rank 0: sum=3 group=2", "attempt 0 rank 1: sum=3 group=2",
        "attempt 1 rank 0: sum=3 group=2", "attempt 1 rank 1: sum=3 group=2"], r.stdout
    assert "restarting the worker group (1 of 1 restart)" in r.stderr, r.stderr


def test_two_nodes_use_node_rank_0s_store_across_a_restart(tmp_path):
    # Node rank 0's agent hosts; the other node's workers are its clients in both attempts.
    script = tmp_path / "store_job.py"
    script.write_text(STORE_JOB)
    common = ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
              f"--rdzv-endpoint=127.0.0.1:{free_port()}", f"--rdzv-id=job-{uuid.uuid4().hex[:8]}",
              "--max-restarts=1", str(script)]
    procs = [subprocess.Popen([TRAINRUN, *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=ENV) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-4000:]
    lines = sorted(line for out, _ in outs for line in out.splitlines())
    assert lines == ["attempt 0 rank 0: sum=3 group=2", "attempt 0 rank 1: sum=3 group=2",
                     "attempt 1 rank 0: sum=3 group=2", "attempt 1 rank 1: sum=3 group=2"], lines


def test_torch_disable_share_rdzv_tcp_store_keeps_the_store_of_rank_0(tmp_path):
    env = dict(ENV, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")
    for launcher, out in (([TRAINRUN], "ours"), (torchrun(), "theirs")):
        os.makedirs(tmp_path / out)
        r = subprocess.run(launcher + ["--standalone", "--nproc-per-node=2", SCRIPT,
                                       str(tmp_path / out)], capture_output=True, text=True,
                           timeout=600, env=env)
        assert r.returncode == 0, r.stderr[-4000:]
    for rank in range(2):
        ours, theirs = (read_dumps(str(tmp_path / d), 2)[rank] for d in ("ours", "theirs"))
        assert ours["TORCHELASTIC_USE_AGENT_STORE"] == theirs["TORCHELASTIC_USE_AGENT_STORE"] == \
            "False"


def static_pair(launcher, port):
    """Two nodes of a static job on loopback, the master given only as --rdzv-endpoint."""
    common = ["--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=static",
              f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-conf=join_timeout=120"]
    return [launcher + common + [f"--node-rank={rank}"] for rank in (0, 1)]


def test_static_rdzv_endpoint_is_the_master_as_in_torchrun2(tmp_path):
    # torchrun's get_rdzv_endpoint: with the static backend, --rdzv-endpoint is MASTER_ADDR:PORT.
    port = free_port()
    launch(static_pair([TRAINRUN], port), str(tmp_path / "ours"))
    launch(static_pair(torchrun(), port), str(tmp_path / "theirs"))
    ours, theirs = read_dumps(str(tmp_path / "ours"), 2), read_dumps(str(tmp_path / "theirs"), 2)
    for rank in range(2):
        master = {k: ours[rank][k] for k in ("MASTER_ADDR", "MASTER_PORT", "GROUP_RANK")}
        assert master == {k: theirs[rank][k] for k in master}, (rank, master, theirs[rank])
        assert (master["MASTER_ADDR"], master["MASTER_PORT"]) == ("127.0.0.1", str(port))


def parse_both(*args):
    """trainrun's and torchrun 2.x's answers to one command line."""
    return [subprocess.run(launcher + list(args), capture_output=True, text=True, timeout=300,
                           env=ENV, stdin=subprocess.DEVNULL) for launcher in ([TRAINRUN], torchrun())]


def test_long_options_abbreviate_as_in_torchrun2():
    # argparse's allow_abbrev (on in torchrun's parser): an unambiguous prefix is the option.
    ours, theirs = parse_both("--standal", "--nproc_per=2", "--no-p", "/bin/true")
    assert theirs.returncode == 0, theirs.stderr
    assert ours.returncode == 0, ours.stderr
    # Ambiguous: refused by both, naming the candidates.
    ours, theirs = parse_both("--master=x", "--no-python", "/bin/true")
    assert theirs.returncode == 2 and "ambiguous option: --master=x" in theirs.stderr, theirs.stderr
    assert ours.returncode == 2, ours.stderr
    assert ours.stderr == ("trainrun: ambiguous option --master=x: could be --master-addr, "
                           "--master-port (see trainrun --help)\n")
    # Unknown: refused by both; trainrun names the option meant.
    ours, theirs = parse_both("--standlone", "--no-python", "/bin/true")
    assert theirs.returncode == 2 and "unrecognized arguments: --standlone" in theirs.stderr
    assert ours.returncode == 2, ours.stderr
    assert ours.stderr == ("trainrun: unknown option --standlone; did you mean --standalone? "
                           "(see trainrun --help)\n")


def test_every_prefix_torchrun2_reads_as_one_option_is_accepted(tmp_path):
    # trainrun's own options (--no-preflight, --print-config, --hosts ...) must not make a prefix
    # ambiguous that torchrun 2.x reads as one of its options: for each of its long options, the
    # shortest prefix that starts no spelling of another option.
    r = subprocess.run(torchrun() + ["--help"], capture_output=True, text=True, timeout=300,
                       env=ENV)
    assert r.returncode == 0, r.stderr
    options = {n: m for n, m in parse_help(r.stdout).items() if n.startswith("--")}
    assert "--no-python" in options and "--print-completion" in options, options
    rejected = []
    for name, metavar in sorted(options.items()):
        if name == "--help" or "_" in name:
            continue
        others = [o for o in options if canonical(o) != canonical(name)]
        prefix = next(name[:n] for n in range(3, len(name) + 1)
                      if not any(o.startswith(name[:n]) for o in others))
        if prefix == name:
            continue
        for args in invocations(name, metavar, tmp_path):
            args = [prefix if a == name else a.replace(name + "=", prefix + "=", 1)
                    for a in args]
            run = subprocess.run([TRAINRUN, *args], capture_output=True, text=True, timeout=120,
                                 env=ENV, stdin=subprocess.DEVNULL)
            if run.returncode == 2:
                rejected.append(f"{' '.join(args)}: {run.stderr.strip()}")
    assert not rejected, "prefixes torchrun 2.x accepts, refused:\n" + "\n".join(rejected)


def test_standalone_with_two_nodes_is_refused():
    # torchrun 2.x keeps --nnodes=2 and waits for a second node its localhost rendezvous never
    # sees (until the join timeout); trainrun refuses at once.
    r = subprocess.run([TRAINRUN, "--standalone", "--nnodes=2", "--no-python", "/bin/true"],
                       capture_output=True, text=True, timeout=300, env=ENV,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2, r.stderr
    assert r.stderr == ("trainrun: --nnodes=2: --standalone runs one node; for 2 nodes drop "
                        "--standalone and give every node --rdzv-backend=c10d "
                        "--rdzv-endpoint=HOST:PORT\n")


def test_torch_2_tcpstore_at_the_endpoint_is_named_after_one_handshake_timeout():
    # A torch 2.x TCPStore (torchrun's own c10d rendezvous endpoint, a job's MASTER_PORT) holds
    # the hello without a word; asked in its own protocol, it answers as a store, and is named so.
    store = TorchStore(PY)
    try:
        r = subprocess.run([TRAINRUN, "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                            f"--rdzv-endpoint=127.0.0.1:{store.port}", "--no-python",
                            "--rdzv-conf=join_timeout=300", "/bin/true"],
                           capture_output=True, text=True, timeout=120, env=ENV,
                           stdin=subprocess.DEVNULL)
    finally:
        store.close()
    assert r.returncode == 1, r.stderr
    assert (f"trainrun: rendezvous endpoint 127.0.0.1:{store.port} answers, but not as a trainrun "
            "rendezvous host: it is a torch 2.x c10d TCPStore (it answered a store's ping); check "
            "--rdzv-endpoint, or free the port") in r.stderr.splitlines(), r.stderr


# Values for the options that take one; a new option of torchrun without an entry here fails the
# test below until it is given one. Choices ({a,b}) take their first.
VALUES = {
    "--nnodes": "1",
    "--nproc-per-node": "1",
    "--rdzv-backend": "c10d",
    "--rdzv-endpoint": "localhost:29400",
    "--rdzv-id": "job",
    "--rdzv-conf": "join_timeout=60",
    "--max-restarts": "0",
    "--monitor-interval": "0.5",
    "--event-log-handler": "null",
    "--role": "trainer",
    "--log-dir": None,  # a fresh directory, filled in per run
    "--redirects": "3",
    "--tee": "3",
    "--log-line-prefix-template": "[${rank}]:",
    "--local-ranks-filter": "0",
    "--duplicate-stdout-filters": "loss",
    "--duplicate-stderr-filters": "warn",
    "--node-rank": "0",
    "--master-addr": "127.0.0.1",
    "--master-port": None,  # a free port, per run
    "--local-addr": "127.0.0.1",
    "--logs-specs": "default",
    "--signals-to-handle": "SIGTERM,SIGINT",
    "--shutdown-timeout": "5",
}
SHORT = {"-r": "--redirects", "-t": "--tee"}


def parse_help(text):
    """{spelling: value placeholder or None for a flag} for every option in argparse's help."""
    options = {}
    # argparse names the section "options:" since Python 3.10, "optional arguments:" before.
    section = re.split(r"\n(?:options|optional arguments):\n", text, maxsplit=1)[1]
    for line in section.splitlines():
        m = re.match(r"^  (-\S.*?)(?:\s{2,}\S.*)?$", line)
        if not m:
            continue
        for spelling in m.group(1).split(", "):
            name, _, metavar = spelling.partition(" ")
            options[name] = metavar or None
    return options


def canonical(name):
    name = SHORT.get(name, name)
    return name.replace("_", "-") if name.startswith("--") else name


def value_for(name, metavar, tmp_path):
    if metavar.startswith("{"):
        return metavar.strip("{}").split(",")[0]
    key = canonical(name)
    assert key in VALUES, f"no test value for torchrun's {name}: add one to VALUES"
    if key == "--log-dir":
        return str(tmp_path / f"logs-{uuid.uuid4().hex[:6]}")
    if key == "--master-port":
        return str(free_port())
    return VALUES[key]


def invocations(name, metavar, tmp_path):
    """Command lines (after trainrun) that give `name` a valid value in each form."""
    entry = ["--no-python", "/bin/true"]
    if canonical(name) in ("-m", "--module"):
        entry = ["this"]  # a module that exists and exits 0
    elif canonical(name) == "--no-python":
        entry = ["/bin/true"]
    if metavar is None:
        return [["--standalone", name, *entry]]
    value = value_for(name, metavar, tmp_path)
    forms = [[name, value]]
    if name.startswith("--"):
        forms.append([f"{name}={value}"])
    return [["--standalone", *form, *entry] for form in forms]


def test_every_option_of_torchrun2_help_is_accepted(tmp_path):
    r = subprocess.run(torchrun() + ["--help"], capture_output=True, text=True, timeout=300,
                       env=ENV)
    assert r.returncode == 0, r.stderr
    options = parse_help(r.stdout)
    # The help parser must see what argparse itself knows, or the check below proves nothing.
    known = subprocess.run(
        [PY, "-c", "from torch.distributed.run import get_args_parser as g\n"
         "print('\\n'.join(s for a in g()._actions for s in a.option_strings))"],
        capture_output=True, text=True, timeout=300, env=ENV)
    assert known.returncode == 0, known.stderr
    assert set(options) == set(known.stdout.split()), set(options) ^ set(known.stdout.split())
    assert "--nproc_per_node" in options and "--virtual-local-rank" in options

    rejected = []
    for name, metavar in sorted(options.items()):
        for args in invocations(name, metavar, tmp_path):
            run = subprocess.run([TRAINRUN, *args], capture_output=True, text=True, timeout=120,
                                 env=ENV, stdin=subprocess.DEVNULL)
            if run.returncode == 2 or "unknown option" in run.stderr:
                rejected.append(f"{' '.join(args)}: exit {run.returncode}: {run.stderr.strip()}")
    assert not rejected, "trainrun rejects torchrun 2.x options:\n" + "\n".join(rejected)


# TorchElastic's file timer, through torch's own client: rank 1 stays in a scope of `after`
# seconds for `stay` seconds; rank 0 ends at once.
FILE_TIMER = r'''
import os, sys, time
from torch.distributed.elastic.timer import FileTimerClient, configure, expires
rank = int(os.environ["RANK"])
configure(FileTimerClient(os.environ["TORCHELASTIC_TIMER_FILE"]))
if rank == 1:
    with expires(after=float(sys.argv[1]), scope="stuck"):
        time.sleep(float(sys.argv[2]))
print(f"rank {rank} done", flush=True)
'''


def shell_status(code):
    """A status as a shell sees it: torchrun 2.x kills itself with the worker's signal."""
    return 128 - code if code < 0 else code


def both_with_file_timer(tmp_path, *args):
    script = tmp_path / "timer.py"
    script.write_text(FILE_TIMER)
    env = dict(ENV, TORCHELASTIC_ENABLE_FILE_TIMER="1", TMPDIR=str(tmp_path))
    results = []
    for launcher in ([TRAINRUN], torchrun()):
        results.append(subprocess.run(
            launcher + ["--standalone", "--nproc-per-node=2", str(script), *args],
            capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path))
    return results


def test_an_expired_file_timer_kills_the_worker_as_under_torchrun2(tmp_path):
    ours, theirs = both_with_file_timer(tmp_path, "2", "600")
    # torchrun 2.x kills the worker with SIGKILL, then itself (file_based_local_timer.py):
    # 137 to a shell. trainrun stops the job as after any worker failure, with that status.
    assert shell_status(theirs.returncode) == 137, theirs.stderr
    assert ours.returncode == 137, ours.stderr
    for r in (ours, theirs):
        assert "rank 0 done" in r.stdout and "rank 1 done" not in r.stdout, (r.stdout, r.stderr)
    assert "file timer: scope 'stuck' of rank 1 (local rank 1, pid " in ours.stderr, ours.stderr
    assert "  rank      : 1 (local_rank: 1)\n  exitcode  : -9 " in ours.stderr, ours.stderr


def test_a_file_timer_scope_left_in_time_ends_as_under_torchrun2(tmp_path):
    ours, theirs = both_with_file_timer(tmp_path, "60", "1")
    assert theirs.returncode == 0, theirs.stderr
    assert ours.returncode == 0, ours.stderr
    assert sorted(ours.stdout.splitlines()) == sorted(theirs.stdout.splitlines()) == [
        "rank 0 done", "rank 1 done"]
    assert "file timer" not in ours.stderr, ours.stderr
