"""Jobs run with and without --preload=torch, and a check of which way their workers started
(test_preload_torch2.py, test_frameworks_torch2.py). TRAINRUN_BIN is trainrun, TRAINRUN_PYTHON an
interpreter that imports torch 2.x."""
import os
import shutil
import subprocess

import pytest

TRAINRUN = os.environ.get("TRAINRUN_BIN", "")
PY = os.environ.get("TRAINRUN_PYTHON", "")
# CMake passes TRAINRUN_PY_SPY-NOTFOUND where it found none: only an executable counts.
PY_SPY = next((p for p in (os.environ.get("TRAINRUN_PY_SPY", ""), shutil.which("py-spy") or "")
               if p and os.access(p, os.X_OK)), "")
NEEDS_PY_SPY = pytest.mark.skipif(not PY_SPY, reason="py-spy is not installed "
                                  "(scripts/setup.sh --tests)")
WITH_AND_WITHOUT = pytest.mark.parametrize("preload", [False, True], ids=["plain", "preload"])

# Imported by every interpreter that starts (site imports it), never by a worker forked from the
# template: each worker that started one of its own leaves its argv, so a run shows which way its
# workers started. `python -c` children (spawn's) are not workers, nor is the template (no RANK).
SITECUSTOMIZE = """\
import os
if "RANK" in os.environ and os.environ.get("PRELOAD_TEST_STARTS"):
    with open(os.path.join(os.environ["PRELOAD_TEST_STARTS"], str(os.getpid())), "wb") as f:
        f.write(open("/proc/self/cmdline", "rb").read())
"""


def job_env(tmp_path, path=None):
    probe, starts = tmp_path / "probe", tmp_path / "starts"
    probe.mkdir(exist_ok=True)
    starts.mkdir(exist_ok=True)
    (probe / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return dict(os.environ, PYTHON_EXEC=PY, PYTHONPATH=str(probe), PRELOAD_TEST_STARTS=str(starts),
                TRAINRUN_RUNTIME_DIR=str(tmp_path / "runtime"), PATH=path or os.environ["PATH"])


def start(tmp_path, preload, args, path=None):
    return subprocess.Popen([TRAINRUN, *(["--preload=torch"] if preload else []), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path, env=job_env(tmp_path, path))


def finish(p, tmp_path, preload, workers, timeout=600):
    """Waits for the job; checks that with --preload no worker started an interpreter of its own
    and none fell back (said on trainrun's stderr), and without it that `workers` did."""
    out, err = p.communicate(timeout=timeout)
    started = []
    for name in os.listdir(tmp_path / "starts"):
        argv = (tmp_path / "starts" / name).read_bytes().split(b"\0")
        os.remove(tmp_path / "starts" / name)
        if b"-c" not in argv:
            started.append(argv)
    if preload:
        assert not started and "trainrun: --preload" not in err, (started, err)
    else:
        assert len(started) == workers, (started, err)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def trainrun(tmp_path, preload, args, workers, timeout=600, path=None):
    return finish(start(tmp_path, preload, args, path), tmp_path, preload, workers, timeout)
