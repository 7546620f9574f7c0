"""A Python worker runs as `python [-X faulthandler] -u SCRIPT ARGS`, started or forked from the
--preload template: its command line, tracebacks (an exception's, KeyboardInterrupt's,
faulthandler's) and environment show none of the bootstrap that serves its diagnosis channel
(workers/python_bootstrap.hpp); --no-diagnosis starts it without one."""
import os
import re
import signal
import subprocess
import textwrap

import pytest

from conftest import run, start, wait_for

PYTHON = os.environ.get("PYTHON_EXEC", "/usr/bin/python3")
ENV = {"PYTHON_EXEC": PYTHON, "OMP_NUM_THREADS": "1"}
# A module of the test's own for --preload: quick to import, and a script can tell it was there
# before it ran (a worker forked from the template).
MODES = {"plain": [], "preload": ["--preload=warm"]}
# A script's first two lines: whether it was forked, appended to the file "forked".
FORKED = 'import sys\nopen("forked", "a").write(f"{\'warm\' in sys.modules}\\n")\n'


def torch_major():
    r = subprocess.run([PYTHON, "-c", "import torch; print(torch.__version__)"],
                       capture_output=True, text=True, timeout=120)
    return int(r.stdout.split(".")[0])


def job(tmp_path, mode, body):
    (tmp_path / "warm.py").write_text("")
    script = tmp_path / "job.py"
    script.write_text(FORKED + textwrap.dedent(body))
    return script


def check_forked(tmp_path, mode, workers=1):
    assert (tmp_path / "forked").read_text() == f"{mode == 'preload'}\n" * workers
    (tmp_path / "forked").unlink()


def traceback_block(text):
    """The first traceback in `text`, from its header to the exception's line."""
    lines = text.splitlines()
    first = lines.index("Traceback (most recent call last):")
    end = next(i for i in range(first + 1, len(lines)) if not lines[i].startswith(" "))
    return lines[first:end + 1]


@pytest.mark.parametrize("mode", MODES)
def test_an_uncaught_exceptions_traceback_is_pythons_own(tmp_path, mode):
    script = job(tmp_path, mode, """\
        def f():
            raise ValueError("boom")
        f()
        """)
    r = run([*MODES[mode], "job.py"], env=ENV, cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stderr
    check_forked(tmp_path, mode)
    alone = subprocess.run([PYTHON, "-u", "job.py"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
    got = traceback_block(r.stderr)
    assert got[1] == f'  File "{script}", line 5, in <module>', r.stderr
    assert got == traceback_block(alone.stderr), (r.stderr, alone.stderr)


def started(tmp_path, mode, body, *args, extra=()):
    job(tmp_path, mode, textwrap.dedent("""\
        import os, time
        def wait():
            open("pid.tmp", "w").write(str(os.getpid()))
            os.rename("pid.tmp", "pid")
        """) + textwrap.dedent(body))
    p = start([*extra, *MODES[mode], "job.py", *args], env=ENV, cwd=tmp_path,
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert wait_for(lambda: (tmp_path / "pid").exists(), timeout=120), p.communicate()
    return p, int((tmp_path / "pid").read_text())


@pytest.mark.parametrize("mode", MODES)
def test_sigint_to_a_worker_prints_the_scripts_frames_and_ends_it_by_sigint(tmp_path, mode):
    p, pid = started(tmp_path, mode, """\
        def sleep():
            wait()
            time.sleep(600)
        sleep()
        """)
    os.kill(pid, signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGINT, err
    check_forked(tmp_path, mode)
    got = traceback_block(err)
    assert got[-1] == "KeyboardInterrupt", err
    files = [line for line in got if line.startswith("  File ")]
    script = tmp_path / "job.py"
    assert files == [f'  File "{script}", line 10, in <module>',
                     f'  File "{script}", line 9, in sleep'], err


@pytest.mark.parametrize("mode", MODES)
def test_a_running_workers_command_line_is_its_script_and_arguments(tmp_path, mode):
    p, pid = started(tmp_path, mode, "wait()\ntime.sleep(600)\n", "a b", "--x=1")
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().split(b"\0")[:-1]
    with open(f"/proc/{pid}/environ", "rb") as f:
        environ = f.read()
    os.kill(pid, signal.SIGTERM)
    p.communicate(timeout=120)
    check_forked(tmp_path, mode)
    assert argv == [PYTHON.encode(), b"-X", b"faulthandler", b"-u", b"job.py", b"a b", b"--x=1"]
    if mode == "plain" and torch_major() < 2:
        assert b"TRAINRUN_BOOTSTRAP=" not in environ  # torch 1.x: no channel, no bootstrap


@pytest.mark.parametrize("mode", MODES)
def test_faulthandlers_dump_of_the_main_thread_holds_the_scripts_frames_only(tmp_path, mode):
    job(tmp_path, mode, """\
        import faulthandler
        def dump():
            faulthandler.dump_traceback(all_threads=True)
        dump()
        """)
    r = run([*MODES[mode], "job.py"], env=ENV, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    check_forked(tmp_path, mode)
    lines = r.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("Current thread "))
    frames = []
    for line in lines[first + 1:]:
        if not line.startswith("  File "):
            break
        frames.append(line)
    script = tmp_path / "job.py"
    assert frames == [f'  File "{script}", line 5 in dump', f'  File "{script}", line 6 in <module>'
                      ], r.stderr


@pytest.mark.parametrize("mode", MODES)
def test_the_workers_see_their_own_pythonpath_and_sitecustomize(tmp_path, mode):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import builtins\nbuiltins.USERS_SITE = True\n")
    job(tmp_path, mode, """\
        import builtins, os, sys, threading
        print(os.environ.get("PYTHONPATH"), "TRAINRUN_BOOTSTRAP" in os.environ,
              getattr(builtins, "USERS_SITE", False), sys.modules["sitecustomize"].__file__,
              [m for m in sys.modules if m.startswith("trainrun")],
              [p for p in sys.path if "trainrun-python" in p])
        """)
    r = run([*MODES[mode], "job.py"], env=dict(ENV, PYTHONPATH=str(site)), cwd=tmp_path,
            timeout=120)
    assert r.returncode == 0, r.stderr
    check_forked(tmp_path, mode)
    assert r.stdout.split() == [str(site), "False", "True", str(site / "sitecustomize.py"), "[]",
                                "[]"], r.stdout


def test_the_bootstrap_leaves_nothing_in_the_temporary_directory(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    job(tmp_path, "preload", "")
    r = run(["--preload=warm", "--nproc-per-node=2", "job.py"], env=dict(ENV, TMPDIR=str(tmp)),
            cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    check_forked(tmp_path, "preload", 2)
    assert not [name for name in os.listdir(tmp) if name.startswith("trainrun-python")]


def test_without_a_directory_for_the_bootstrap_workers_start_the_ordinary_way(tmp_path):
    job(tmp_path, "plain", "")
    r = run(["--preload=warm", "--nproc-per-node=2", f"--log-dir={tmp_path / 'logs'}", "job.py"],
            env=dict(ENV, TMPDIR=str(tmp_path / "missing")), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    check_forked(tmp_path, "plain", 2)
    said = [line for line in r.stderr.splitlines() if "workers' Python" in line]
    assert said == [f"trainrun: cannot create a directory for the workers' Python under "
                    f"{tmp_path / 'missing'}: No such file or directory; Python workers start "
                    f"without a diagnosis channel, and without --preload"], r.stderr


@pytest.mark.parametrize("how", ["option", "PET_NO_DIAGNOSIS", "config"])
def test_no_diagnosis_starts_workers_as_torchrun_does(tmp_path, how):
    job(tmp_path, "plain", """\
        import os
        environ = open("/proc/self/environ", "rb").read()
        print(b"TRAINRUN_BOOTSTRAP" in environ, os.environ.get("PYTHONPATH"),
              len(os.listdir("/proc/self/task")))
        """)
    (tmp_path / "job.toml").write_text("no-diagnosis = true\n")
    options = {"option": ["--no-diagnosis"], "PET_NO_DIAGNOSIS": [],
               "config": ["--config=job.toml"]}[how]
    env = dict(ENV, PYTHONPATH="/users/own")
    if how == "PET_NO_DIAGNOSIS":
        env["PET_NO_DIAGNOSIS"] = "1"
    r = run([*options, "job.py"], env=env, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "/users/own", "1"], r.stdout
    said = [line for line in r.stderr.splitlines() if "--no-diagnosis" in line]
    if torch_major() >= 2:
        assert said == ["trainrun: --no-diagnosis: the workers start as under torchrun, without a "
                        "diagnosis channel; --hang-timeout and --stacks read their stacks "
                        "(py-spy, eu-stack, /proc) but no flight recorder"], r.stderr
    else:
        assert said == [], r.stderr  # torch 1.x: no channel to leave out


def test_without_no_diagnosis_a_torch2_worker_has_its_channel_out_of_sight(tmp_path):
    if torch_major() < 2:
        pytest.skip("torch 1.x workers have no diagnosis channel")
    job(tmp_path, "plain", """\
        import os
        environ = open("/proc/self/environ", "rb").read()
        print(b"TRAINRUN_BOOTSTRAP" in environ, "TRAINRUN_BOOTSTRAP" in os.environ,
              len(os.listdir("/proc/self/task")))
        """)
    r = run(["job.py"], env=ENV, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True", "False", "2"], r.stdout
    assert not re.search("--no-diagnosis", r.stderr), r.stderr
