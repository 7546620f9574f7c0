"""Command line: validation, help, version, PET_* defaults, entrypoint checks."""
import os
import re
import resource
import shutil
import subprocess

import pytest

from conftest import TRAINRUN, run

BAD = [
    (["--nnodes=0", "x"], "--nnodes=0"),
    (["--nnodes=3:2", "x"], "MIN must not exceed MAX"),
    (["--nnodes=x", "x"], "--nnodes=x"),
    (["--nproc-per-node=0", "x"], "--nproc-per-node=0"),
    (["--nproc_per_node=-2", "x"], "--nproc-per-node=-2"),
    (["--nproc-per-node=abc", "x"], "--nproc-per-node=abc"),
    (["--max-restarts=-1", "x"], "--max-restarts=-1"),
    (["--redirects=5", "x"], "--redirects=5"),
    (["--redirects=0:7", "x"], "--redirects=0:7"),
    (["--tee=1:", "x"], "--tee=1:"),
    (["--rdzv-conf=join_timeout", "x"], "join_timeout"),
    (["--rdzv-conf=join_timeout=soon", "x"], "join_timeout"),
    (["--master-port=70000", "x"], "--master-port=70000"),
    (["--rdzv-backend=zookeeper", "x"], "zookeeper"),
    (["--shutdown-timeout=-3", "x"], "--shutdown-timeout"),
    (["--signals-to-handle=SIGFOO", "x"], "SIGFOO"),
    (["--local-ranks-filter=a", "x"], "--local-ranks-filter"),
    (["-m", "--no-python", "x"], "--no-python"),
    ([], "no entrypoint"),
    (["--bogus-option", "x"], "--bogus-option"),
    (["--rdzv-id=", "--max-restarts=3", "x"], "--rdzv-id=: must not be empty"),
    (["--rdzv-id=r\udcff", "x"], "--rdzv-id=r...: byte 0xFF is not UTF-8"),
]


@pytest.mark.parametrize("args,needle", BAD)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    r = run(args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("trainrun: ")
    assert needle in lines[0]
    assert "what()" not in r.stderr


def test_gpu_without_gpu_is_refused():
    if os.path.exists("/proc/driver/nvidia/gpus"):
        pytest.skip("this machine has NVIDIA GPUs")
    r = run(["--nproc-per-node=gpu", "/bin/true"], env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 2
    assert "no NVIDIA GPU" in r.stderr


def test_pet_variables_supply_defaults_and_are_validated(worker, tmp_path):
    r = run(["--no-python", worker, "env", str(tmp_path / "env")],
            env={"PET_NPROC_PER_NODE": "3", "PET_MAX_RESTARTS": "2"})
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["env.0", "env.1", "env.2"]
    text = (tmp_path / "env.0").read_text()
    assert "TORCHELASTIC_MAX_RESTARTS=2\n" in text
    r = run(["/bin/true"], env={"PET_NNODES": "4:1"})
    assert r.returncode == 2 and "PET_NNODES=4:1" in r.stderr
    r = run(["/bin/true"], env={"PET_STANDALONE": "maybe"})
    assert r.returncode == 2 and "PET_STANDALONE" in r.stderr


def test_command_line_wins_over_pet(tmp_path, worker):
    r = run(["--nproc-per-node=1", worker, "env", str(tmp_path / "env")],
            env={"PET_NPROC_PER_NODE": "3"})
    assert r.returncode == 0, r.stderr
    assert os.listdir(tmp_path) == ["env.0"]


def test_config_file_sets_options_and_a_bad_one_starts_nothing(tmp_path, worker):
    job = tmp_path / "job.toml"
    job.write_text("nproc-per-node = 2\nmax_restarts = 1\n")
    r = run(["--config", str(job), "--no-python", worker, "env", str(tmp_path / "env")],
            env={"PET_NPROC_PER_NODE": "3"})
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(tmp_path)) == ["env.0", "env.1", "job.toml"]
    assert "TORCHELASTIC_MAX_RESTARTS=1\n" in (tmp_path / "env.0").read_text()
    bad = tmp_path / "bad.toml"
    for text, needle in (("nproc-per-node = 2\nmax-restart = 1\n",
                          "bad.toml:2: unknown key 'max-restart'; did you mean max-restarts?"),
                         ("nproc-per-node = true\n", "bad.toml:1: nproc-per-node: expected a"),
                         (None, "--config=" + str(bad) + ": cannot read it")):
        if text is None:
            bad.unlink()
        else:
            bad.write_text(text)
        r = run(["--config", str(bad), "--no-python", worker, "env", str(tmp_path / "bad")])
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("trainrun: "), r.stderr
        assert needle in lines[0]
        assert not any(name.startswith("bad.") for name in os.listdir(tmp_path) if name != "bad.toml")


def test_a_config_that_is_no_small_regular_file_is_refused_at_once(tmp_path, worker):
    fifo = tmp_path / "job.fifo"
    os.mkfifo(fifo)
    for path, why in ((tmp_path, "a directory"), (fifo, "not a regular file"),
                      ("/dev/zero", "not a regular file")):
        # Bounded: a FIFO without a writer was waited on for ever, /dev/zero read until memory
        # ran out, and a directory read as an empty file.
        r = run(["--config", str(path), "--no-python", worker, "sleep", "0"], timeout=30)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert lines[0] == f"trainrun: --config={path}: cannot read it: {why}", r.stderr


def test_cpu_and_auto_count_usable_cpus(tmp_path, worker):
    ncpu = len(os.sched_getaffinity(0))
    for value in ("cpu", "auto"):
        d = tmp_path / value
        d.mkdir()
        r = run([f"--nproc-per-node={value}", worker, "env", str(d / "env")],
                env={"CUDA_VISIBLE_DEVICES": ""})
        assert r.returncode == 0, r.stderr
        assert len(os.listdir(d)) == ncpu


HELP_GROUPS = ("Job:", "Nodes and rendezvous:", "Many hosts over ssh:", "Workers' output:",
               "Failures and signals:", "Diagnosis:", "trainrun itself:")


def help_output(flag, columns=None):
    """`trainrun FLAG` with stdout a pipe and COLUMNS as given (unset for None)."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    r = subprocess.run([TRAINRUN, flag], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return r.stdout


def option_names(text):
    """The dashed long options a help text names, each as often as it names it (the last line,
    which points to --help-all, left out)."""
    return re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", text.rsplit("\n", 2)[0])


def test_help_is_grouped_and_version_prints():
    r = run(["--help"])
    assert r.returncode == 0
    for word in HELP_GROUPS + ("--nproc-per-node", "ENTRYPOINT"):
        assert word in r.stdout
    r = run(["--version"])
    assert r.returncode == 0 and r.stdout.startswith("trainrun ")


@pytest.mark.parametrize("columns", [None, 80, 60])
def test_help_fits_the_width_in_one_spelling_per_option(columns):
    text = help_output("--help", columns)
    lines = text.splitlines()
    width = columns or 80
    assert max(len(line) for line in lines) <= width, text
    if width == 80:
        assert len(lines) < 70, text
    for heading in HELP_GROUPS:
        assert heading in lines, heading
    # Every option of --help-all, each once, by its dashed name; one line names the other.
    every = set(option_names(help_output("--help-all", columns)))
    shown = option_names(text)
    assert set(shown) == every, set(shown) ^ every
    assert sorted(shown) == sorted(every), [n for n in every if shown.count(n) != 1]
    assert "_" not in "".join(shown)
    assert "--a-b and as --a_b" in " ".join(text.split())
    assert "trainrun --help-all" in lines[-1]


def test_help_all_describes_every_option_in_full():
    text = help_output("--help-all")
    assert max(len(line) for line in text.splitlines()) <= 80
    flat = " ".join(text.split())
    for phrase in ("Workers per node: an integer, cpu, gpu, xpu or auto [env PET_NPROC_PER_NODE]",
                   "--master-port VALUE (default: 29500 (one node: a free port))",
                   "Seconds between the stop signal and SIGKILL [env PET_SHUTDOWN_TIMEOUT, then "
                   "TORCH_ELASTIC_SHUTDOWN_TIMEOUT]"):
        assert phrase in flat
    assert len(text.splitlines()) > len(help_output("--help").splitlines())


def help_on_a_terminal(columns, env_columns=None):
    """`trainrun --help` with stdout a terminal `columns` wide, its output as read there."""
    import fcntl
    import pty
    import struct
    import termios
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if env_columns is not None:
        env["COLUMNS"] = str(env_columns)
    p = subprocess.Popen([TRAINRUN, "--help"], stdout=slave, stderr=subprocess.PIPE, env=env)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the last writer is gone
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    assert p.wait(timeout=60) == 0, p.stderr.read()
    p.stderr.close()
    return out.decode().replace("\r\n", "\n")


def test_help_is_wrapped_to_the_terminal_and_never_wider():
    text = help_on_a_terminal(60)
    assert max(len(line) for line in text.splitlines()) <= 60, text
    assert max(len(line) for line in text.splitlines()) > 50, text  # not laid out narrower
    # COLUMNS asks for wider than the terminal is: the terminal wins.
    text = help_on_a_terminal(50, env_columns=100)
    assert max(len(line) for line in text.splitlines()) <= 50, text


def test_help_names_what_the_docs_do():
    help_text = " ".join(help_output("--help-all").split())
    # --rdzv-conf: the keys of docs/cli.md's table, without those accepted and unused.
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "cli.md")) as f:
        table = f.read().split("| key | default | meaning |", 1)[1].split("\n\n", 1)[0]
    documented = set()
    for row in table.splitlines()[2:]:
        cells = row.split("|")
        if "unused" not in cells[3]:
            documented |= set(re.findall(r"`([a-z_]+)`", cells[1]))
    listed = re.search(r"--rdzv-conf VALUE k=v,\.\.\.: ([a-z_, ]+)", help_text)
    assert listed and set(listed.group(1).replace(",", " ").split()) == documented, help_text
    assert "trainrun --stacks[=RUN_ID|PID]" in help_output("--help")


def complete(*words):
    """What `trainrun --print-completion bash` offers for `trainrun WORDS...` (the last word is
    the one being completed; bash splits at "=" and ":", so "-r 0:1" is "-r", "0", ":", "1")."""
    script = ('source <("$1" --print-completion bash); shift; COMP_WORDS=(trainrun "$@"); '
              'COMP_CWORD=$#; _trainrun; printf "%s\\n" "${COMPREPLY[@]}"')
    r = subprocess.run(["bash", "-c", script, "complete", TRAINRUN, *words],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [w for w in r.stdout.splitlines() if w]


def test_completion_offers_the_values_the_parser_takes():
    assert complete("--rdzv-backend", "") == ["static", "c10d", "etcd", "etcd-v2"]
    assert complete("--preflight", "=", "") == ["on", "warn", "off"]
    assert complete("--nproc_per_node", "") == ["cpu", "gpu", "xpu", "auto"]
    assert complete("--start-method", "f") == ["fork", "forkserver"]
    assert complete("--event-log-handler", "") == ["null", "console", "dynamic_rendezvous"]
    assert complete("--numa-binding", "") == ["node", "socket", "exclusive", "core-complex"]
    assert complete("--print-completion", "") == ["bash", "zsh", "tcsh"]
    signals = complete("--signals-to-handle", "")
    assert {"SIGTERM", "SIGINT", "SIGUSR1", "SIGCONT"} <= set(signals)
    # Each signal offered is one trainrun takes.
    for sig in signals:
        r = run([f"--signals-to-handle={sig}", "--print-config"])
        assert r.returncode == 0, r.stderr
    # A list: the words follow the last comma.
    assert complete("--signals-to-handle", "SIGTERM,SIGI") == ["SIGTERM,SIGINT"]
    # -r/--tee: 0-3, and after a rank's ":" in the per-rank form.
    assert complete("-r", "") == ["0", "1", "2", "3"]
    assert complete("--tee", "=", "0", ":") == ["0", "1", "2", "3"]
    assert complete("-t", "0", ":", "1,1", ":", "2") == ["2"]
    # The per-rank form is still one value: what follows it is an option, then the entrypoint.
    assert complete("-r", "0", ":", "1", "--nn") == ["--nnodes"]
    assert complete("-r", "0", ":", "1", "train.py", "--nn") == []


def test_completion_offers_stacks_first_only():
    assert complete("--sta") == ["--standalone", "--start-method", "--stacks"]
    assert "--stacks" not in complete("--nnodes=2", "--sta")
    assert complete("--stacks", "") == []
    assert "--help-all" in complete("--help")
    # --stacks is a mode, not a launch option: it takes nothing after its selector.
    assert complete("--stacks", "job1", "--") == []


def test_missing_entrypoint_is_127_before_any_worker(tmp_path):
    r = run(["--nproc-per-node=2", str(tmp_path / "nope")])
    assert r.returncode == 127
    assert "no such file" in r.stderr
    r = run(["--no-python", "no-such-command-anywhere"])
    assert r.returncode == 127 and "not found" in r.stderr
    r = run(["--nproc-per-node=2", str(tmp_path / "missing.py")])
    assert r.returncode == 127


def test_non_executable_is_126(tmp_path):
    f = tmp_path / "prog"
    f.write_text("#!/bin/sh\necho hi\n")
    f.chmod(0o644)
    r = run(["--no-python", str(f)])
    assert r.returncode == 126
    assert "permission denied" in r.stderr
    r = run(["--no-python", str(tmp_path)])
    assert r.returncode == 126


def test_executable_runs_without_no_python(tmp_path):
    f = tmp_path / "prog"
    f.write_text("#!/bin/sh\necho \"hello $LOCAL_RANK\"\n")
    f.chmod(0o755)
    r = run(["--nproc-per-node=2", str(f)])
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:2]) == ["hello 0", "hello 1"]


def test_python_workers_get_faulthandler_on_their_command_line_not_in_the_environment(tmp_path):
    # torchrun's environment exactly; faulthandler on in the worker and in what it spawns.
    script = tmp_path / "fh.py"
    script.write_text(
        "import faulthandler, multiprocessing as mp, os, sys\n"
        "def child(q):\n    q.put(faulthandler.is_enabled())\n"
        "if __name__ == '__main__':\n"
        "    ctx = mp.get_context('spawn')\n    q = ctx.Queue()\n"
        "    p = ctx.Process(target=child, args=(q,))\n    p.start()\n"
        "    print(faulthandler.is_enabled(), q.get(), 'PYTHONFAULTHANDLER' in os.environ,\n"
        "          sys.stdout.write_through, sys.argv[1:])\n"
        "    p.join()\n")
    r = run([str(script), "x"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "True True False True ['x']\n"


def test_arguments_after_entrypoint_are_untouched(tmp_path):
    f = tmp_path / "args.sh"
    f.write_text('#!/bin/sh\nfor a in "$@"; do echo "[$a]"; done\n')
    f.chmod(0o755)
    r = run(["--nproc-per-node=2", "--no-python", str(f), "--nproc-per-node=9", "-m",
             "out${local_rank}.log", "$local_rank", "$$x", "--help"])
    assert r.returncode == 0, r.stderr
    out = r.stdout.split("\n")
    assert out.count("[--nproc-per-node=9]") == 2
    assert out.count("[-m]") == 2 and out.count("[--help]") == 2
    assert "[out0.log]" in out and "[out1.log]" in out
    assert "[0]" in out and "[1]" in out
    assert out.count("[$x]") == 2


def test_more_workers_than_the_machine_can_hold_are_refused_before_anything_starts(worker,
                                                                                  tmp_path):
    r = run(["--no-python", worker, "env", str(tmp_path / "env")],
            env={"PET_NPROC_PER_NODE": "1000000", "TMPDIR": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("trainrun: PET_NPROC_PER_NODE=1000000: more workers than one node "
                               "can run: at most ")
    assert os.listdir(tmp_path) == []


def test_more_workers_than_rlimit_nproc_allows_are_refused_before_anything_starts(worker,
                                                                                  tmp_path):
    """The machine's limits are checked once the command line is read, before the job starts:
    the same one line and exit status 2 as for a count the rendezvous protocol refuses."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    limit = min(40, hard) if hard != resource.RLIM_INFINITY else 40

    def lower_nproc():
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, hard))

    r = run(["--no-python", worker, "env", str(tmp_path / "env")],
            env={"PET_NPROC_PER_NODE": str(limit + 1), "TMPDIR": str(tmp_path)},
            preexec_fn=lower_nproc)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"trainrun: PET_NPROC_PER_NODE={limit + 1}: more workers than one "
                               f"node can run: at most {limit} (each worker is a process; ")
    assert lines[0].endswith(f"RLIMIT_NPROC {limit})")
    assert os.listdir(tmp_path) == []


def test_trainrun_of_a_virtual_environment_runs_its_python_unactivated(tmp_path):
    """`venv/bin/trainrun train.py`, the environment not activated, runs venv/bin/python3 as
    torchrun runs its own sys.executable; PYTHON_EXEC still wins."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (venv / "bin" / "python3").symlink_to("/usr/bin/python3")
    shutil.copy(TRAINRUN, venv / "bin" / "trainrun")
    script, out = tmp_path / "which.py", tmp_path / "which"
    script.write_text("import sys\nopen(sys.argv[1], 'w').write(sys.executable)\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHON_EXEC", "VIRTUAL_ENV", "CONDA_PREFIX")}
    r = subprocess.run([str(venv / "bin" / "trainrun"), "-v", str(script), str(out)],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == str(venv / "bin" / "python3")
    assert (f"Python workers run {venv / 'bin' / 'python3'} (Python "
            in r.stderr and "; the environment trainrun is installed in)" in r.stderr), r.stderr
    r = subprocess.run([str(venv / "bin" / "trainrun"), str(script), str(out)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(env, PYTHON_EXEC="/usr/bin/python3"))
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "/usr/bin/python3"
