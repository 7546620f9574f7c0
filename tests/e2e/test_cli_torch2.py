"""The command line of torchrun 2.x: `--`, virtual local ranks, duplicate filters, the shutdown
timeout from the environment, xpu, completion scripts, and the options that only warn."""
import glob
import os
import subprocess

import pytest

from conftest import TRAINRUN, read_envs, read_pids, run

BAD = [
    (["--event-log-handler=syslog", "/bin/true"], "--event-log-handler=syslog", {}),
    (["--numa-binding=all", "/bin/true"], "--numa-binding=all", {}),
    (["--print-completion=fish"], "--print-completion=fish", {}),
    (["--nproc-per-node=npu", "/bin/true"], "xpu", {}),
    (["/bin/true"], "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=-1", {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "-1"}),
    (["/bin/true"], "TORCH_ELASTIC_SHUTDOWN_TIMEOUT=soon",
     {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "soon"}),
    (["--virtual-local-rank", "--nproc-per-node=3", "/bin/true"], "CUDA_VISIBLE_DEVICES=0,1",
     {"CUDA_VISIBLE_DEVICES": "0,1"}),
    (["--virtual-local-rank", "--nproc-per-node=2", "/bin/true"], "HIP_VISIBLE_DEVICES=4",
     {"HIP_VISIBLE_DEVICES": "4"}),
    (["--standalone", "--"], "no entrypoint", {}),
]


@pytest.mark.parametrize("args,needle,env", BAD)
def test_bad_input_is_one_line_and_exit_2(args, needle, env):
    r = run(args, env=env)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainrun: "), r.stderr
    assert needle in lines[0], lines[0]


def test_xpu_without_one_is_refused_in_one_line():
    if glob.glob("/sys/class/drm/renderD*"):
        pytest.skip("this machine has render nodes; the count depends on them")
    r = run(["--nproc-per-node=xpu", "/bin/true"])
    assert r.returncode == 2
    assert r.stderr == ("trainrun: --nproc-per-node=xpu: no Intel XPU found on this node; use an "
                        "integer, cpu or gpu\n")


def test_double_dash_before_the_entrypoint(tmp_path):
    r = run(["--nproc-per-node=2", "--no-python", "--", "/bin/sh", "-c",
             'echo "rank=$RANK args=$*"', "sh", "--", "-x"])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == ["rank=0 args=-- -x", "rank=1 args=-- -x"]
    # An entrypoint that starts with a dash is reachable only after "--".
    prog = tmp_path / "-prog"
    prog.write_text("#!/bin/sh\necho ran $LOCAL_RANK\n")
    prog.chmod(0o755)
    r = run(["--no-python", "--", "-prog"], cwd=tmp_path, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran 0\n"


@pytest.mark.parametrize("visible,expected", [(None, ["0", "1", "2"]), ("7, 3,5", ["7", "3", "5"])])
def test_virtual_local_rank_gives_each_worker_one_gpu(worker, tmp_path, visible, expected):
    # Without CUDA_VISIBLE_DEVICES in trainrun's environment, worker i gets GPU i.
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")}
    if visible:
        env["CUDA_VISIBLE_DEVICES"] = visible
    r = subprocess.run([TRAINRUN, "--virtual-local-rank", "--nproc-per-node=3", worker, "env",
                        str(tmp_path / "env")], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0, r.stderr
    envs = read_envs(tmp_path)
    for rank in range(3):
        assert envs[rank]["LOCAL_RANK"] == "0"
        assert envs[rank]["LOCAL_WORLD_SIZE"] == "3"
        assert envs[rank]["CUDA_VISIBLE_DEVICES"] == expected[rank]


def test_without_virtual_local_rank_local_ranks_and_gpus_are_inherited(worker, tmp_path):
    r = run(["--nproc-per-node=2", worker, "env", str(tmp_path / "env")],
            env={"CUDA_VISIBLE_DEVICES": "4,6"})
    assert r.returncode == 0, r.stderr
    envs = read_envs(tmp_path)
    assert [envs[r]["LOCAL_RANK"] for r in (0, 1)] == ["0", "1"]
    assert {envs[r]["CUDA_VISIBLE_DEVICES"] for r in (0, 1)} == {"4,6"}


def test_signals_to_handle_reach_the_workers_as_given(worker, tmp_path):
    r = run(["--signals-to-handle=SIGTERM,SIGUSR1", worker, "env", str(tmp_path / "a")])
    assert r.returncode == 0, r.stderr
    assert read_envs(tmp_path)[0]["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGUSR1"


def test_a_program_that_is_not_python_hosts_its_own_store(worker, tmp_path):
    # The agent's store speaks torch 2.x's protocol; a native program may link LibTorch 1.x, whose
    # client does not (docs/cli.md, "Workers"), so its RANK 0 hosts the store.
    r = run(["--standalone", "--nproc-per-node=2", worker, "env", str(tmp_path / "env")])
    assert r.returncode == 0, r.stderr
    envs = read_envs(tmp_path)
    assert {envs[rank]["TORCHELASTIC_USE_AGENT_STORE"] for rank in (0, 1)} == {"False"}


LINES = r'''
echo "loss=$RANK"; echo "plain $RANK"; echo "a,b $RANK"
echo "warn $RANK" >&2; echo "quiet $RANK" >&2
printf "last loss $RANK"
'''


def test_duplicate_filters_copy_matching_teed_lines_to_the_attempt_dir(tmp_path):
    logs = tmp_path / "logs"
    r = run(["--nproc-per-node=2", "--tee=3", f"--log-dir={logs}",
             "--duplicate-stdout-filters=loss,a,,b", "--duplicate_stderr_filters=warn",
             "--no-python", "/bin/sh", "-c", LINES])
    assert r.returncode == 0, r.stderr
    # The console still gets every line.
    for rank in (0, 1):
        assert f"[default{rank}]:plain {rank}" in r.stdout
        assert f"[default{rank}]:quiet {rank}" in r.stderr
    [attempt] = glob.glob(str(logs / "*" / "attempt_0"))
    out = sorted(open(os.path.join(attempt, "filtered_stdout.log")).read().splitlines())
    err = sorted(open(os.path.join(attempt, "filtered_stderr.log")).read().splitlines())
    # "loss" and "a,b" (",," is a comma); the last line without its newline counts too.
    assert out == sorted(line for r in (0, 1) for line in (
        f"[default{r}]:loss={r}", f"[default{r}]:a,b {r}", f"[default{r}]:last loss {r}"))
    assert err == ["[default0]:warn 0", "[default1]:warn 1"]


def test_duplicate_filters_without_tee_duplicate_nothing(tmp_path):
    logs = tmp_path / "logs"
    r = run(["--redirects=3", f"--log-dir={logs}", "--duplicate-stdout-filters=loss",
             "--no-python", "/bin/sh", "-c", LINES])
    assert r.returncode == 0, r.stderr
    assert not glob.glob(str(logs / "*" / "attempt_0" / "filtered_*"))
    assert "loss=0" in open(glob.glob(str(logs / "*" / "attempt_0" / "0" / "stdout.log"))[0]).read()


def test_log_line_prefix_template_option_wins_over_the_variable():
    script = "echo hi"
    r = run(["--tee=1", "--log-line-prefix-template=${hostname}:${rank}: ", "--no-python",
             "/bin/sh", "-c", script], env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "no:"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{os.uname().nodename}:0: hi\n"
    r = run(["--tee=1", "--no-python", "/bin/sh", "-c", script],
            env={"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "env:"})
    assert r.stdout == "env:hi\n"


def test_shutdown_timeout_comes_from_torch_elastic_shutdown_timeout(worker, tmp_path):
    pids = tmp_path / "pids"
    # The message names the timeout taken; the run's timeout bounds the wait.
    r = run(["--nproc-per-node=2", worker, "ignore-term", "pidfile", str(pids), "wait-lines",
             str(pids), "2", "rank-exit", "1", "5", "sleep", "600"],
            env={"TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "1"}, timeout=120)
    assert r.returncode == 5, r.stderr
    assert "still running 1 s after the stop signal; sending SIGKILL" in r.stderr
    assert read_pids(pids)


def test_ignored_options_warn_in_one_line_each_and_the_job_runs(tmp_path):
    # A sysfs without GPUs: --numa-binding says in one line that it does nothing here.
    r = run(["--event-log-handler=console", "--numa-binding=socket", "--logs-specs=custom",
             "--start-method=fork", "--monitor-interval=2", "--run-path", "--no-python",
             "/bin/sh", "-c", "echo ran"], env={"TRAINRUN_SYSFS_ROOT": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ran\n"
    lines = r.stderr.splitlines()
    assert len(lines) == 3, r.stderr
    assert all(line.startswith("trainrun: warning: ") for line in lines)
    for name in ("--event-log-handler=console", "--numa-binding=socket", "--logs-specs=custom"):
        assert sum(name in line for line in lines) == 1, r.stderr
    r = run(["--event-log-handler=null", "/bin/true"])
    assert r.returncode == 0 and r.stderr == ""


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_print_completion(shell):
    r = run([f"--print-completion={shell}"])
    assert r.returncode == 0, r.stderr
    assert "--nproc_per_node" in r.stdout or "nproc-per-node" in r.stdout
    if shell == "bash":
        check = subprocess.run(["bash", "-n"], input=r.stdout, text=True, capture_output=True)
        assert check.returncode == 0, check.stderr


def fake_sysfs(root, cpus):
    """Two NUMA nodes of one CPU each (`cpus`, two CPUs this machine has), each with one NVIDIA
    GPU; the GPU of node 1 has the lower PCI address only after the other (device order)."""
    def write(path, text):
        os.makedirs(os.path.dirname(root / path), exist_ok=True)
        (root / path).write_text(text + "\n")
    write("devices/system/node/possible", "0-1")
    for node, cpu in enumerate(cpus):
        write(f"devices/system/node/node{node}/cpulist", str(cpu))
    for address, node in (("0000:1b:00.0", 0), ("0000:9a:00.0", 1)):
        write(f"bus/pci/devices/{address}/vendor", "0x10de")
        write(f"bus/pci/devices/{address}/class", "0x030200")
        write(f"bus/pci/devices/{address}/numa_node", str(node))


def test_numa_binding_binds_each_worker_to_its_gpus_node(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs to bind two workers apart")
    cpus = allowed[:2]
    fake_sysfs(tmp_path / "sys", cpus)
    script = tmp_path / "cpus.sh"
    script.write_text('#!/bin/sh\ngrep Cpus_allowed_list /proc/self/status > "$1/cpus.$LOCAL_RANK"\n')
    script.chmod(0o755)
    r = run(["--numa-binding=node", "--nproc-per-node=3", "-v", "--no-python", str(script),
             str(tmp_path)], env={"TRAINRUN_SYSFS_ROOT": str(tmp_path / "sys")})
    assert r.returncode == 0, r.stderr
    bound = {rank: (tmp_path / f"cpus.{rank}").read_text().split()[-1] for rank in range(3)}
    assert bound[0] == str(cpus[0]) and bound[1] == str(cpus[1]), bound
    assert bound[2] != str(cpus[0]) and bound[2] != str(cpus[1])  # no GPU of its own: unbound
    assert "local rank 0 (GPU 0000:1b:00.0) on CPUs %d" % cpus[0] in r.stderr
    assert "--numa-binding=node: local rank 2 has no GPU of its own (2 GPUs here): not bound" \
        in r.stderr
