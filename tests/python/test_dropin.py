"""trainrun as a drop-in for torchrun: the same environment, real collectives, no port races."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from agents import Agents  # noqa: E402
from ports import free_port, held_port, standalone_args  # noqa: E402

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
# The reference torchrun, a script run by PY: 1.13's, or torchrun_current.py for PY's own.
TORCHRUN = os.environ.get("REFERENCE_TORCHRUN", os.path.join(HERE, "../../../shared/peer/torchrun113.py"))
ALLREDUCE_DEMO = os.environ.get("ALLREDUCE_DEMO_BIN", "")
PY = os.environ.get("TEST_PYTHON", "/usr/bin/python3")
ENV = dict(os.environ, PYTHON_EXEC=PY)

# The reference's major version: this file compares the environment with torchrun 1.13;
# test_torchrun2.py compares it with 2.x, values that differ by design included.
REFERENCE_MAJOR = int(subprocess.run([PY, "-c", "import torch; print(torch.__version__)"],
                                     capture_output=True, text=True).stdout.split(".")[0] or 0)
# Set by torchrun releases newer than 1.13 (and so by trainrun), or per-run by design.
NEWER_ONLY = {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE"}
FORM_ONLY = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}


def run(cmd, timeout=300, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=ENV, **kw)


def dump_env(launcher, nproc, out_dir):
    os.makedirs(out_dir)
    script = os.path.join(HERE, "env_dump.py")
    if launcher == "trainrun":
        cmd = [TRAINRUN, "--standalone", f"--nproc-per-node={nproc}", script, out_dir]
    else:
        cmd = [PY, TORCHRUN, *standalone_args(), f"--nproc_per_node={nproc}",
               "--monitor_interval=0.1", script, out_dir]
    r = run(cmd)
    assert r.returncode == 0, r.stderr
    envs = {}
    for rank in range(nproc):
        with open(os.path.join(out_dir, f"{rank}.json")) as f:
            envs[rank] = json.load(f)
    return envs


@pytest.mark.skipif(not os.path.exists(TORCHRUN),
                    reason=f"the reference torchrun is not at {TORCHRUN} (set REFERENCE_TORCHRUN)")
@pytest.mark.skipif(REFERENCE_MAJOR >= 2,
                    reason="torchrun 2.x: compared by test_torchrun2.py (python_torchrun2)")
@pytest.mark.parametrize("nproc", [1, 2, 4])
def test_environment_matches_torchrun(nproc, tmp_path):
    ours = dump_env("trainrun", nproc, str(tmp_path / "ours"))
    theirs = dump_env("torchrun", nproc, str(tmp_path / "theirs"))
    launcher_env = set(ENV)
    for rank in range(nproc):
        a, b = ours[rank], theirs[rank]
        # The worker's own interpreter and launcher path differ by nature.
        a.pop("_", None), b.pop("_", None)
        added_a = {k for k in a if k not in launcher_env or a[k] != ENV.get(k)}
        added_b = {k for k in b if k not in launcher_env or b[k] != ENV.get(k)}
        assert added_a - NEWER_ONLY == added_b - NEWER_ONLY, (rank, added_a ^ added_b)
        for k in added_b - FORM_ONLY:
            assert a[k] == b[k], (rank, k, a[k], b[k])
        assert a["MASTER_ADDR"] and 0 < int(a["MASTER_PORT"]) < 65536
        assert a["TORCHELASTIC_RUN_ID"] and a["TORCHELASTIC_RUN_ID"] != "none"
        assert a["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{rank}/error.json")
        assert a["TORCHELASTIC_ERROR_FILE"].split("/attempt_0/")[0].split("/")[-1].startswith(
            a["TORCHELASTIC_RUN_ID"] + "_")
    # One job: the same store address for every worker.
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"]) for e in ours.values()}) == 1


@pytest.mark.skipif(not os.path.exists(TORCHRUN),
                    reason=f"the reference torchrun is not at {TORCHRUN} (set REFERENCE_TORCHRUN)")
def test_local_rank_in_arguments_is_substituted_as_torchrun_does():
    # torchrun uses string.Template: "$local_rankX" names another variable and stays as it is.
    args = ["$local_rankX", "$local_rank", "${local_rank}X", "$$local_rank", "$LOCAL_RANK",
            "${local_rankX}", "a$$b", "$", "$local_rank_1", "$local_rank.x", "${local_rank"]
    ours = run([TRAINRUN, "--standalone", "--nproc-per-node=1", "--no-python", "/bin/echo", *args])
    theirs = run([PY, TORCHRUN, *standalone_args(), "--nproc_per_node=1", "--no_python",
                  "/bin/echo", *args])
    assert ours.returncode == theirs.returncode == 0, (ours.stderr, theirs.stderr)
    assert ours.stdout == theirs.stdout
    assert ours.stdout == "$local_rankX 0 0X $local_rank $LOCAL_RANK ${local_rankX} a$b $ " \
                          "$local_rank_1 0.x ${local_rank\n"


def test_gloo_all_reduce_with_four_workers():
    r = run([TRAINRUN, "--nproc-per-node=4", os.path.join(HERE, "allreduce.py")])
    assert r.returncode == 0, r.stderr
    lines = sorted(r.stdout.splitlines())
    assert lines == [f"rank {i}/4: sum=10 expected=10" for i in range(4)]


def test_cxx_worker_all_reduce():
    if not ALLREDUCE_DEMO:
        pytest.skip("allreduce_demo not built (LibTorch missing)")
    r = run([TRAINRUN, "--nproc-per-node=2", ALLREDUCE_DEMO])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [
        "rank 0/2: all_reduce sum=3 (expected 3) ok", "rank 1/2: all_reduce sum=3 (expected 3) ok"]


def test_unmodified_ddp_script():
    r = run([TRAINRUN, "--standalone", "--nproc-per-node=2", os.path.join(HERE, "ddp_train.py")])
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert len(out) == 2 and all("in_sync=True" in line for line in out), r.stdout


def test_module_mode():
    r = run([TRAINRUN, "--nproc_per_node=2", "-m", "mypkg.train", "--lr", "0.1"], cwd=HERE)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [
        "module rank=0 args=['--lr', '0.1']", "module rank=1 args=['--lr', '0.1']"]


def test_sixteen_jobs_at_once_never_collide_on_ports():
    script = os.path.join(HERE, "allreduce.py")
    procs = [subprocess.Popen([TRAINRUN, "--standalone", "--nproc-per-node=2", script],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
             for _ in range(16)]
    failures = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0 or "address already in use" in (out + err).lower():
            failures.append((p.returncode, err[-2000:]))
    assert not failures, failures


@pytest.mark.parametrize("context", ["spawn", "fork"])
def test_sigusr1_reaches_the_workers_not_their_dataloaders(context, tmp_path):
    # The loader's processes (and, with spawn, Python's resource tracker) keep SIGUSR1's default
    # action: the signal must reach the workers alone, or it kills the loader and the job.
    p = subprocess.Popen([TRAINRUN, "--nproc-per-node=2", os.path.join(HERE, "loader_usr1.py"),
                          str(tmp_path), context], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=ENV)
    ready = [tmp_path / f"ready.{rank}" for rank in range(2)]
    deadline = time.monotonic() + 120
    while not all(r.exists() for r in ready) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGUSR1)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert "killed by signal" not in err, err
    assert [(tmp_path / f"result.{rank}").read_text() for rank in range(2)] == ["1 32\n"] * 2


def test_explicit_master_port_in_use_is_refused_before_start():
    with held_port("0.0.0.0") as s:
        s.listen()
        port = s.getsockname()[1]
        r = run([TRAINRUN, f"--master-port={port}", "/bin/true"])
        assert r.returncode == 1
        assert f"MASTER_PORT {port} is not free" in r.stderr


def test_gloo_all_reduce_across_two_agents(tmp_path):
    port = free_port()
    script = os.path.join(HERE, "allreduce.py")
    common = ["--nnodes=2", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
              "--rdzv-id=pyjob"]
    with Agents(TRAINRUN, tmp_path, env=ENV) as agents:
        a = agents("a", [*common, "--nproc-per-node=2", script])
        b = agents("b", [*common, "--nproc-per-node=1", script])
        assert a.wait(300) == 0, a.err
        assert b.wait(300) == 0, b.err
        lines = sorted((a.out + b.out).splitlines())
    assert lines == [f"rank {i}/3: sum=6 expected=6" for i in range(3)]
