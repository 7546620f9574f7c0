"""--preload: Python workers forked from one template interpreter per node that imported the
modules once. Each test runs the same job with and without it, or checks a way it can fail."""
import json
import os
import signal
import subprocess
import textwrap

from conftest import alive, run, start, wait_for, wait_for_pids

PYTHON = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
# OMP_NUM_THREADS=1, as trainrun sets it where a node runs more than one worker: torch 2.x's
# import starts an OpenMP pool otherwise, and its template falls back to ordinary starts (a case
# of its own below), so that the one-worker cases would compare nothing on torch 2.x.
ENV = {"PYTHON_EXEC": PYTHON, "OMP_NUM_THREADS": "1"}

# What the template's environment block holds (workers/python_bootstrap.hpp), and the block of
# each worker forked from it: a fork keeps it, whatever os.environ becomes.
TEMPLATE = b'"template":{'

# What a worker reports of itself: written as JSON to <dir>/<RANK>.json. `preloaded` says whether
# torch was there before the script imported anything: a worker forked from the template.
REPORT = f"TEMPLATE = {TEMPLATE!r}\n" + textwrap.dedent("""\
    import json, os, sys
    preloaded = "torch" in sys.modules
    def report(directory, **extra):
        with open(os.path.join(directory, os.environ["RANK"] + ".json"), "w") as f:
            json.dump(dict(extra, preloaded=preloaded, environ=dict(os.environ), argv=sys.argv,
                           file=globals().get("__file__"), path0=sys.path[0],
                           spec=getattr(__spec__, "name", None), name=__name__,
                           package=__package__, loader=type(__loader__).__name__,
                           executable=sys.executable, orig_argv=getattr(sys, "orig_argv", None),
                           pid=os.getpid(), ppid=os.getppid()), f)
    def template_children(but=None):
        # The processes of this worker's parent (the agent) started as the template (the
        # bootstrap's settings in their environment block), `but` aside.
        found = []
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                parent = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]
                environ = open(f"/proc/{p}/environ", "rb").read()
            except (OSError, IndexError):
                continue
            if parent == str(os.getppid()) and TEMPLATE in environ and int(p) != but:
                found.append(int(p))
        return found
    """)


# A script's first lines: whether torch was imported before them (a worker forked from the
# --preload torch template), appended to the file "forked" of the job's directory, a line a worker.
MARK_FORKED = 'import sys\nopen("forked", "a").write(f"{\'torch\' in sys.modules}\\n")\n'


def forked(tmp_path, preload, workers=1):
    """Checks that each of `workers` workers was forked from the template exactly when
    `preload`, and clears the record for the next run."""
    marks = tmp_path / "forked"
    assert marks.read_text() == f"{bool(preload)}\n" * workers, marks.read_text()
    marks.unlink()


def reports(directory):
    return {int(name[:-5]): json.loads((directory / name).read_text())
            for name in os.listdir(directory)}


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def trainrun(args, tmp_path, timeout=120, env=ENV, **kw):
    return run(args, timeout=timeout, env=env, cwd=str(tmp_path), **kw)


def job_with_and_without(tmp_path, args, script_args=()):
    """Runs `args` (options and entrypoint) with and without --preload torch; returns the
    workers' reports of each run, the one without first."""
    out = []
    for preload in ([], ["--preload=torch"]):
        # The same argv both times: the directory as a relative path, emptied between the runs.
        directory = tmp_path / "reports"
        directory.mkdir()
        r = trainrun(preload + args + ["reports", *script_args], tmp_path)
        assert r.returncode == 0, r.stderr
        out.append(reports(directory))
        directory.rename(tmp_path / ("preloaded" if preload else "plain"))
    plain, warm = out
    assert not any(w["preloaded"] for w in plain.values())
    assert all(w["preloaded"] for w in warm.values()), "the workers were not forked from torch"
    return plain, warm


def template_pids(trainrun_pid):
    """The children of `trainrun_pid` started as the template (the template, and the workers
    forked from it: their environment block is its own)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == trainrun_pid and TEMPLATE in environ:
            found.append(int(entry))
    return found


def test_preload_gives_each_worker_the_environment_it_gets_without(tmp_path):
    script = write(tmp_path / "dump.py", REPORT + "report(sys.argv[1])\n")
    plain, warm = job_with_and_without(
        tmp_path, ["--nproc-per-node=3", "--rdzv-id=same", str(script)])
    assert sorted(plain) == sorted(warm) == [0, 1, 2]
    # A port chosen free and a log directory made fresh for each run.
    per_run = {"MASTER_PORT", "TORCHELASTIC_ERROR_FILE"}
    for rank in plain:
        before, after = plain[rank]["environ"], warm[rank]["environ"]
        assert sorted(before) == sorted(after)
        assert {k for k in before if before[k] != after[k]} <= per_run, rank
        assert after["RANK"] == str(rank) and after["LOCAL_RANK"] == str(rank)
        assert after["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{rank}/error.json")


# What a worker reports of the process it is, beside `preloaded`: the attributes its start gives it
# (the spawn request, carried out by spawn() or by the template), written to <dir>/<LOCAL_RANK>.json.
PROCESS = textwrap.dedent("""\
    import ctypes, json, os, re, resource, sys
    preloaded = "torch" in sys.modules
    out = {"preloaded": preloaded}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("SigBlk", "SigIgn", "Cpus_allowed_list", "NoNewPrivs"):
                out[key] = value.strip()
    out["session leader"] = os.getsid(0) == os.getpid()
    out["group leader"] = os.getpgid(0) == os.getpid()
    out["rlimits"] = {name: resource.getrlimit(getattr(resource, name))
                      for name in dir(resource) if name.startswith("RLIMIT_")}
    # The job's cgroup is named after the agent and the run: the same place, another name.
    out["cgroup"] = re.sub(r"trainrun-[0-9]+-[0-9a-f]+", "JOB", open("/proc/self/cgroup").read())
    death = ctypes.c_int()
    ctypes.CDLL(None).prctl(2, ctypes.byref(death), 0, 0, 0)  # PR_GET_PDEATHSIG
    out["death signal"] = death.value
    out["umask"] = os.umask(0)
    os.umask(out["umask"])
    out["cwd"] = os.getcwd()
    out["parent"] = os.getppid()
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
            flags = open(f"/proc/self/fdinfo/{fd}").read().split("flags:")[1].split()[0]
        except OSError:
            continue  # the directory's own descriptor, closed
        # pipe:[inode] and socket:[inode]: the kind; a file: its name but the run's directory.
        fds[fd] = [re.sub(r":\\[[0-9]+\\]$", "", target).replace(sys.argv[1], "DIR"), flags]
    out["descriptors"] = fds
    with open(os.path.join(sys.argv[1], os.environ["LOCAL_RANK"] + ".json"), "w") as f:
        json.dump(out, f)
    """)


def test_preload_a_forked_worker_is_the_process_a_spawned_one_is(tmp_path):
    """One description of a worker, carried out by spawn() or by the template: the two processes
    are compared field by field, with a soft descriptor limit under the hard one and a umask of
    trainrun's own, which each must hand on."""
    script = write(tmp_path / "process.py", PROCESS)
    soft, hard = __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE)

    def limits():
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, soft), hard))
        os.umask(0o027)

    found = {}
    for preload in ([], ["--preload=torch"]):
        directory = tmp_path / ("preloaded" if preload else "plain")
        directory.mkdir()
        p = start(preload + ["--nproc-per-node=2", str(script), str(directory)],
                  env=ENV, cwd=str(tmp_path), preexec_fn=limits, stdin=subprocess.DEVNULL,
                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        found[bool(preload)] = reports(directory)
        # Each worker's parent is the agent (a forked one is handed back to it, a subreaper).
        for w in found[bool(preload)].values():
            w["parent"] = w["parent"] == p.pid
            # trainrun's own diagnosis channel (torch 2.x) is close-on-exec, so that nothing the
            # worker starts has it, at whatever number it arrived: compared by kind and flags.
            own = {fd: d for fd, d in w["descriptors"].items()
                   if d[0] == "socket" and int(d[1], 8) & os.O_CLOEXEC}
            w["descriptors"] = {fd: d for fd, d in w["descriptors"].items() if fd not in own}
            w["trainrun's channels"] = sorted(own.values())
    plain, warm = found[False], found[True]
    assert sorted(plain) == sorted(warm) == [0, 1]
    assert not any(w.pop("preloaded") for w in plain.values())
    assert all(w.pop("preloaded") for w in warm.values()), "the workers were not forked"
    for rank in plain:
        for field in plain[rank]:
            assert warm[rank][field] == plain[rank][field], (rank, field)
    # What each asserts: the limit and the umask trainrun was started with, not its own.
    assert plain[0]["rlimits"]["RLIMIT_NOFILE"][0] == min(1024, soft)
    assert plain[0]["umask"] == 0o027
    assert plain[0]["session leader"] and plain[0]["parent"]


def test_preload_runs_the_script_as_python_does(tmp_path):
    script = write(tmp_path / "sub" / "show.py", REPORT + "report(sys.argv[1])\n")
    plain, warm = job_with_and_without(
        tmp_path, ["--nproc-per-node=2", "sub/show.py"], ["--flag=${local_rank}", "x y"])
    for rank in plain:
        for key in ("argv", "file", "path0", "spec", "name", "package", "loader", "executable",
                    "orig_argv"):
            assert plain[rank][key] == warm[rank][key], (key, plain[rank][key], warm[rank][key])
        assert warm[rank]["argv"][2] == f"--flag={rank}"
        assert warm[rank]["path0"] == str(script.parent)
        assert warm[rank]["spec"] is None and warm[rank]["name"] == "__main__"
    # Against `python sub/show.py ...` of the same interpreter itself: the same but for the
    # interpreter options that the launchers give (trainrun's `-X faulthandler -u`, torchrun's
    # `-u`), which sys.orig_argv shows after the interpreter.
    (tmp_path / "reports").mkdir()  # the same argv as the jobs' (their directories are renamed)
    r = subprocess.run([PYTHON, "sub/show.py", "reports", "--flag=0", "x y"], cwd=tmp_path,
                       env=dict(os.environ, RANK="0"), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    alone = reports(tmp_path / "reports")[0]
    for key in ("argv", "file", "path0", "spec", "name", "package", "loader", "executable"):
        assert alone[key] == warm[0][key], (key, alone[key], warm[0][key])
    options = warm[0]["orig_argv"][1:-len(warm[0]["argv"])]
    assert options == ["-X", "faulthandler", "-u"], warm[0]["orig_argv"]
    assert alone["orig_argv"][0] == warm[0]["orig_argv"][0] == PYTHON
    assert alone["orig_argv"][1:] == ["sub/show.py", "reports", "--flag=0", "x y"]


def test_preload_runs_a_module_as_python_m_does(tmp_path):
    write(tmp_path / "pkg" / "__init__.py", "")
    write(tmp_path / "pkg" / "show.py", REPORT + "report(sys.argv[1])\n")
    plain, warm = job_with_and_without(tmp_path, ["--nproc-per-node=2", "-m", "pkg.show"])
    for rank in plain:
        for key in ("argv", "file", "path0", "spec", "name", "package", "loader", "orig_argv"):
            assert plain[rank][key] == warm[rank][key], (key, plain[rank][key], warm[rank][key])
        assert warm[rank]["spec"] == "pkg.show" and warm[rank]["path0"] == str(tmp_path)


def test_preload_exit_codes_are_the_workers_own(tmp_path):
    write(tmp_path / "three.py", MARK_FORKED + "sys.exit(3)\n")
    write(tmp_path / "boom.py", MARK_FORKED + textwrap.dedent("""\
        def fail():
            raise ValueError("boom")
        fail()
        """))
    for preload in ([], ["--preload=torch"]):
        r = trainrun(preload + ["three.py"], tmp_path)
        assert r.returncode == 3, r.stderr
        forked(tmp_path, preload)
    tracebacks = []
    for preload in ([], ["--preload=torch"]):
        r = trainrun(preload + ["boom.py"], tmp_path)
        assert r.returncode == 1, r.stderr
        forked(tmp_path, preload)
        # The worker's own stderr comes first, then trainrun's failure summary.
        tracebacks.append(r.stderr.split("=" * 20)[0])
    assert tracebacks[0] == tracebacks[1]
    assert tracebacks[1].startswith("Traceback (most recent call last):\n  File ")
    assert tracebacks[1].endswith("ValueError: boom\n")


def test_preload_a_worker_that_ends_before_the_template_names_it_is_held_until_then(tmp_path):
    # The template's reply (the worker's pid) is an event on the agent's loop: a worker forked by
    # the template's child is re-parented to trainrun and may be reaped before that reply comes.
    # Here the template waits 2 s after its fork (an at-fork hook of the preloaded module) while
    # the worker ends at once: its exit is held until its pid is known, then counted as its own.
    write(tmp_path / "early_end.py", """\
        import os, time
        TEMPLATE = os.getpid()
        def parent():
            if os.getpid() == TEMPLATE:
                time.sleep(2)
        def child():
            # The worker (its parent is the template's child), never the template's child.
            if os.getppid() != TEMPLATE:
                os._exit(3)
        os.register_at_fork(after_in_parent=parent, after_in_child=child)
        """)
    write(tmp_path / "job.py", "print('the worker ran its script')\n")
    r = trainrun(["--preload=early_end", "--nproc-per-node=2", "job.py"], tmp_path, timeout=60)
    assert r.returncode == 3, r.stderr
    assert "the worker ran its script" not in r.stdout
    assert "workers start the ordinary way" not in r.stderr, r.stderr
    assert "exitcode  : 3" in r.stderr, r.stderr


def test_preload_a_recorded_failure_writes_its_error_file(tmp_path):
    write(tmp_path / "recorded.py", MARK_FORKED + textwrap.dedent("""\
        from torch.distributed.elastic.multiprocessing.errors import record
        @record
        def main():
            raise RuntimeError("recorded failure")
        if __name__ == "__main__":
            main()
        """))
    summaries = []
    for preload in ([], ["--preload=torch"]):
        r = trainrun(preload + ["recorded.py"], tmp_path)
        assert r.returncode == 1, r.stderr
        forked(tmp_path, preload)
        summary = r.stderr[r.stderr.index("Root Cause"):]
        assert "error_file: <N/A>" not in summary
        assert "RuntimeError: recorded failure" in summary
        summaries.append(summary.count("recorded failure"))
    assert summaries[0] == summaries[1]


def test_preload_a_restart_forks_from_the_same_template(tmp_path):
    # Each worker names the template (its agent's `python -c` child) and fails in attempt 0.
    write(tmp_path / "again.py", REPORT + textwrap.dedent("""\
        import os
        attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
        directory = os.path.join(sys.argv[1], attempt)
        os.makedirs(directory, exist_ok=True)
        report(directory, template=template_children())
        sys.exit(1 if attempt == "0" else 0)
        """))
    r = trainrun(["--preload=torch", "--nproc-per-node=2", "--max-restarts=1", "again.py",
                  str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stderr
    first, second = reports(tmp_path / "0"), reports(tmp_path / "1")
    assert all(w["preloaded"] for w in list(first.values()) + list(second.values()))
    everyone = list(first.values()) + list(second.values())
    workers = {w["pid"] for w in everyone}
    templates = {tuple(sorted(set(w["template"]) - workers)) for w in everyone}
    assert len(templates) == 1 and len(next(iter(templates))) == 1, templates


def test_preload_a_module_that_starts_a_thread_falls_back_once(tmp_path):
    write(tmp_path / "threadmod.py", """\
        import threading, time
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        """)
    write(tmp_path / "job.py", REPORT + textwrap.dedent("""\
        report(sys.argv[1], threadmod="threadmod" in sys.modules)
        sys.exit(1 if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" else 0)
        """))
    (tmp_path / "out").mkdir()
    r = trainrun(["--preload=threadmod", "--nproc-per-node=2", "--max-restarts=1", "job.py",
                  str(tmp_path / "out")], tmp_path)
    assert r.returncode == 0, r.stderr
    line = ("trainrun: --preload: threadmod started a thread (2 threads in the template); "
            "forking it could hang or break a worker, so workers start the ordinary way\n")
    assert r.stderr.count(line) == 1, r.stderr
    workers = reports(tmp_path / "out")
    assert sorted(workers) == [0, 1]
    assert not any(w["threadmod"] or w["preloaded"] for w in workers.values())


def test_preload_forks_from_before_a_module_that_starts_a_thread(tmp_path):
    write(tmp_path / "threadmod.py", """\
        import threading, time
        def keep_polling():
            time.sleep(600)
        threading.Thread(target=keep_polling, name="poller", daemon=True).start()
        """)
    write(tmp_path / "job.py", MARK_FORKED + REPORT + textwrap.dedent("""\
        report(sys.argv[1], threadmod="threadmod" in sys.modules)
        sys.exit(1 if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0" else 0)
        """))
    (tmp_path / "out").mkdir()
    r = trainrun(["--preload=torch,threadmod", "--nproc-per-node=2", "--max-restarts=1",
                  "job.py", "out"], tmp_path)
    assert r.returncode == 0, r.stderr
    # Said once, for the template: both attempts are forked from it.
    line = ("trainrun: --preload: threadmod started thread 'poller' (target "
            "threadmod.keep_polling); workers are forked from the template as it was before it "
            "(torch) and import threadmod themselves\n")
    assert r.stderr.count(line) == 1, r.stderr
    forked(tmp_path, True, workers=4)
    workers = reports(tmp_path / "out")
    assert sorted(workers) == [0, 1]
    assert all(w["threadmod"] and w["preloaded"] for w in workers.values()), workers


def test_preload_a_thread_with_omp_num_threads_above_1_names_openmp(tmp_path):
    # trainrun leaves the user's OMP_NUM_THREADS as it is (and sets 1, as torchrun does, only
    # where it is unset and a node runs more than one worker).
    write(tmp_path / "threadmod.py", """\
        import threading, time
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        """)
    write(tmp_path / "job.py", "print('ran')\n")
    r = trainrun(["--preload=threadmod", "--nproc-per-node=2", "job.py"], tmp_path,
                 env=dict(ENV, OMP_NUM_THREADS="4"))
    assert r.returncode == 0, r.stderr
    assert ("trainrun: --preload: threadmod started a thread (2 threads in the template; "
            "OMP_NUM_THREADS is 4: an OpenMP pool may be among them); forking it could hang "
            "or break a worker, so workers start the ordinary way\n") in r.stderr, r.stderr
    assert r.stdout.count("ran") == 2


def test_preload_a_thread_that_ends_soon_after_the_import_is_waited_for(tmp_path):
    write(tmp_path / "briefmod.py", """\
        import threading, time
        threading.Thread(target=time.sleep, args=(0.3,)).start()
        """)
    write(tmp_path / "job.py", REPORT + textwrap.dedent("""\
        report(sys.argv[1], briefmod="briefmod" in sys.modules)
        """))
    (tmp_path / "out").mkdir()
    r = trainrun(["--preload=briefmod", "--nproc-per-node=2", "job.py", "out"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert "--preload" not in r.stderr, r.stderr
    assert all(w["briefmod"] for w in reports(tmp_path / "out").values())


# A stand-in for the CUDA driver, as its API documents it: cuDeviceGetCount answers
# CUDA_ERROR_NOT_INITIALIZED (3) until cuInit has run. A CUDA build of torch loads the driver at
# import without initialising it (seen with torch 2.11 on an H200: libcublasLt loads it).
CUDA_DRIVER = """\
    static int initialised;
    int cuInit(unsigned int flags) { (void)flags; initialised = 1; return 0; }
    int cuDeviceGetCount(int* count) {
      if (!initialised) return 3;
      *count = 1;
      return 0;
    }
    """


def test_preload_forks_after_the_cuda_driver_is_loaded_but_never_after_it_is_initialised(
        tmp_path):
    source = write(tmp_path / "driver.c", CUDA_DRIVER)
    (tmp_path / "lib").mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "lib" / "libcuda.so.1"),
                    str(source)], check=True)
    for name, init in (("loads", ""), ("inits", "driver.cuInit(0)")):
        write(tmp_path / f"{name}.py", f"""\
            import ctypes
            driver = ctypes.CDLL("{tmp_path}/lib/libcuda.so.1")
            {init}
            """)
    write(tmp_path / "job.py", REPORT + textwrap.dedent("""\
        report(sys.argv[1], forked=any(m in sys.modules for m in ("loads", "inits")))
        """))
    results = {}
    for name in ("loads", "inits"):
        (tmp_path / name / "out").mkdir(parents=True)
        r = trainrun([f"--preload={name}", "--nproc-per-node=2", "job.py", f"{name}/out"],
                     tmp_path)
        assert r.returncode == 0, r.stderr
        results[name] = r.stderr, reports(tmp_path / name / "out")
    stderr, workers = results["loads"]
    assert "--preload" not in stderr, stderr
    assert sorted(workers) == [0, 1] and all(w["forked"] for w in workers.values())
    stderr, workers = results["inits"]
    line = ("trainrun: --preload: inits initialised the CUDA driver (libcuda.so.1) in the "
            "template; forking it could hang or break a worker, so workers start the ordinary "
            "way\n")
    assert stderr.count(line) == 1, stderr
    assert sorted(workers) == [0, 1] and not any(w["forked"] for w in workers.values())


def test_preload_a_module_that_fails_to_import_fails_each_worker(tmp_path):
    write(tmp_path / "job.py", "print('never')\n")
    r = trainrun(["--preload=torch,no_such_module_here", "--nproc-per-node=2", "job.py"],
                 tmp_path)
    assert r.returncode == 1, r.stderr
    assert "never" not in r.stdout
    assert "ModuleNotFoundError: No module named 'no_such_module_here'" in r.stderr
    assert "exitcode  : 1" in r.stderr


def test_preload_kill_9_of_trainrun_leaves_nothing(tmp_path):
    write(tmp_path / "sleeper.py", """\
        import os, sys, time
        with open(sys.argv[1], "a") as f:
            f.write(f"{os.getpid()}\\n")
        time.sleep(600)
        """)
    pids = tmp_path / "pids"
    p = start(["--preload=torch", "--nproc-per-node=2", "sleeper.py", str(pids)], env=ENV,
              cwd=str(tmp_path))
    try:
        workers = wait_for_pids(pids, 2, timeout=60)
        templates = sorted(set(template_pids(p.pid)) - set(workers))
        assert len(templates) == 1, templates
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        everyone = workers + templates
        assert wait_for(lambda: not any(alive(x) for x in everyone), 5.0), \
            [x for x in everyone if alive(x)]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_preload_multiprocessing_and_a_data_loader_work(tmp_path):
    # The mark is written by the worker alone: spawn's children run the script's top too.
    write(tmp_path / "mp.py", """\
        import sys
        forked = "torch" in sys.modules
        import multiprocessing as mp
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        def square(x):
            return x * x

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(2) as pool:
                assert pool.map(square, range(4)) == [0, 1, 4, 9]
            child = mp.get_context("fork").Process(target=square, args=(3,))
            child.start()
            child.join()
            assert child.exitcode == 0
            loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2)
            assert sum(float(batch[0].sum()) for batch in loader) == 28.0
            open("forked", "a").write(f"{forked}\\n")
            sys.stdout.write("ok\\n")  # one write: the workers share the console
        """)
    for preload in ([], ["--preload=torch"]):
        r = trainrun(preload + ["--nproc-per-node=2", "mp.py"], tmp_path, timeout=180)
        assert r.returncode == 0, r.stderr
        assert r.stdout.count("ok\n") == 2, r.stdout
        forked(tmp_path, preload, workers=2)


def test_preload_needs_python_workers(tmp_path):
    for args in (["--no-python", "/bin/true"], ["/bin/true"]):
        r = trainrun(["--preload=torch"] + args, tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("trainrun: --preload=torch: "), \
            r.stderr


def test_preload_refuses_what_is_not_a_module_name(tmp_path):
    for value in ("to rch", "torch,", "torch..nn", "1torch"):
        r = trainrun([f"--preload={value}", "job.py"], tmp_path)
        assert r.returncode == 2, r.stderr
        assert r.stderr.startswith(f"trainrun: --preload={value}: '"), r.stderr
        assert r.stderr.endswith("' is not a module name; give dotted Python names separated "
                                 "by commas (e.g. --preload=torch,numpy)\n"), r.stderr
        assert r.stderr.count("\n") == 1


def test_preload_a_template_that_dies_is_started_again(tmp_path):
    # Attempt 0's rank 0 kills the template; attempt 1 is forked from a new one.
    write(tmp_path / "again.py", REPORT + textwrap.dedent("""\
        import signal
        attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
        def templates():
            # trainrun's `python -c` children but this worker (the only one): the template.
            return template_children(but=os.getpid())
        directory = os.path.join(sys.argv[1], attempt)
        os.makedirs(directory, exist_ok=True)
        report(directory)
        if attempt == "0" and os.environ["RANK"] == "0":
            with open(os.path.join(sys.argv[1], "killed"), "w") as f:
                for pid in templates():
                    f.write(f"{pid}\\n")
                    os.kill(pid, signal.SIGKILL)
        sys.exit(1 if attempt == "0" else 0)
        """))
    r = trainrun(["--preload=torch", "--max-restarts=1", "again.py", str(tmp_path)], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "killed").read_text().count("\n") == 1
    # Said by whichever notices first: the reaping (its status), or the next start.
    assert ("trainrun: --preload: the template interpreter was killed by SIGKILL; the next "
            "workers are forked from another\n" in r.stderr or "trainrun: --preload: the template "
            "interpreter ended; the next workers are forked from another\n" in r.stderr), r.stderr
    assert reports(tmp_path / "0")[0]["preloaded"] and reports(tmp_path / "1")[0]["preloaded"]


def test_preload_a_template_that_cannot_be_started_again_is_named_with_its_errno(tmp_path):
    # Attempt 0 takes the exec bit off the workers' interpreter (a copy) and kills the template:
    # attempt 1's template cannot start, which is said once with the exec's errno; its workers
    # then fail to start the ordinary way, as the shell would.
    python = tmp_path / "python"
    python.write_bytes(open(os.path.realpath(PYTHON), "rb").read())
    python.chmod(0o755)
    write(tmp_path / "gone.py", REPORT + textwrap.dedent("""\
        import signal
        os.chmod(sys.argv[1], 0o644)
        for pid in template_children(but=os.getpid()):
            os.kill(pid, signal.SIGKILL)
        sys.exit(1)
        """))
    r = trainrun(["--preload=json", "--max-restarts=1", "gone.py", str(python)], tmp_path,
                 env=dict(ENV, PYTHON_EXEC=str(python)))
    assert r.returncode == 126, r.stderr
    assert r.stderr.count(f"trainrun: --preload: cannot start the template interpreter {python} "
                          "(Permission denied); workers start the ordinary way\n") == 1, r.stderr
    assert f"trainrun: {python}: cannot execute: permission denied\n" in r.stderr, r.stderr


def test_preload_a_template_that_dies_importing_lets_workers_start_the_ordinary_way(tmp_path):
    write(tmp_path / "crash.py", "import os\nos._exit(7)\n")
    # One write per worker: print() under -u writes the text and its newline apart, and the two
    # workers share the pipe.
    write(tmp_path / "job.py", "import sys\nsys.stdout.write(f\"{'crash' in sys.modules}\\n\")\n")
    r = trainrun(["--preload=crash", "--nproc-per-node=2", "job.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "False\nFalse\n"
    assert ("trainrun: --preload: the template interpreter exited with code 7 before its imports "
            "were done; workers start the ordinary way\n") in r.stderr


def test_preload_a_template_still_importing_lets_the_first_workers_start_the_ordinary_way(
        tmp_path):
    # The template imports for 15 s; the first attempt's workers wait 10 s for it, then start
    # the ordinary way, said once; attempt 1 (rank 1 fails 2 s into attempt 0) waits for the same
    # template, which is ready by then, and is forked from it.
    write(tmp_path / "slow.py", "import time\ntime.sleep(15)\n")
    write(tmp_path / "job.py", """\
        import os, sys
        forked = "slow" in sys.modules
        attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
        sys.stdout.write(f"attempt {attempt} rank {rank} forked {forked}\\n")
        if attempt == "0" and rank == "1":
            import time
            time.sleep(2)
            sys.exit(1)
        """)
    r = trainrun(["--preload=slow", "--nproc-per-node=2", "--max-restarts=1", "job.py"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.splitlines()) == [
        "attempt 0 rank 0 forked False", "attempt 0 rank 1 forked False",
        "attempt 1 rank 0 forked True", "attempt 1 rank 1 forked True"], r.stdout
    assert r.stderr.count("trainrun: --preload: the template is still importing slow after 10 s; "
                          "these workers start the ordinary way\n") == 1, r.stderr


def test_preload_a_stop_while_the_template_imports_starts_no_worker(tmp_path):
    # The loop goes on while the template imports: Ctrl-C then ends the job at once, no worker
    # having started, and the template with it.
    write(tmp_path / "slow.py", "import time\ntime.sleep(60)\n")
    write(tmp_path / "job.py", "print('a worker ran')\n")
    p = start(["--preload=slow", "--nproc-per-node=2", "job.py"], env=ENV, cwd=str(tmp_path),
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    def template():
        # trainrun's child started as the template (the bootstrap's settings in its environment).
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            for child in f.read().split():
                try:
                    environ = open(f"/proc/{child}/environ", "rb").read()
                except OSError:
                    continue
                if TEMPLATE in environ:
                    return int(child)
        return None
    assert wait_for(lambda: template() is not None, 30)
    pid = template()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert "a worker ran" not in out, err
    assert "received SIGINT" in err, err
    # The group's start was dropped, not made the ordinary way once the wait ran out.
    assert "still importing" not in err, err
    assert wait_for(lambda: not alive(pid), 10), pid
