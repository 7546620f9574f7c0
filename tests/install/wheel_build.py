"""What the wheel tests share: the builder's environment (scikit-build-core, ziglang, auditwheel,
kept in TRAINRUN_WHEEL_BUILD_ENV between runs) and the build backend taken from it."""
import fcntl
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("TRAINRUN_SOURCE_DIR", os.path.dirname(os.path.dirname(HERE)))
BUILD_ENV = os.environ.get("TRAINRUN_WHEEL_BUILD_ENV") or os.path.expanduser(
    "~/.cache/trainrun/wheel-build-env")


def run(cmd, timeout=600, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert r.returncode == 0, f"{cmd}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return r


def project_version():
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
        return re.search(r"project\(trainrun VERSION ([0-9.]+)", f.read()).group(1)


def build_requires():
    with open(os.path.join(SOURCE, "pyproject.toml")) as f:
        text = f.read()
    return re.findall(r'"([^"]+)"', re.search(r"^requires = \[(.*)\]", text, re.M).group(1))


def make_build_env():
    """The Python of a virtual environment with the build requirements, made once."""
    os.makedirs(os.path.dirname(BUILD_ENV), exist_ok=True)
    python = os.path.join(BUILD_ENV, "bin", "python")
    with open(BUILD_ENV + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = os.path.exists(python) and subprocess.run(
            [python, "-c", "import scikit_build_core, ziglang, auditwheel"],
            capture_output=True).returncode == 0
        if not ready:
            shutil.rmtree(BUILD_ENV, ignore_errors=True)
            run([sys.executable, "-m", "venv", BUILD_ENV])
            run([python, "-m", "pip", "install", "-q", *build_requires(), "auditwheel"])
    return python


def zig(build_env):
    """The zig executable of the build environment's ziglang."""
    return run([build_env, "-c", "import os, ziglang; print(os.path.join(os.path.dirname("
                "ziglang.__file__), 'zig'))"]).stdout.strip()


def build_backend(build_env, work):
    """A directory with only the build backend and zig, from the kept build environment: on
    PYTHONPATH, the user's pip builds without isolation with a zig whose path, and with it
    every cache, stays put (with isolation, pip would install them in a new directory)."""
    site = os.path.dirname(os.path.dirname(zig(build_env)))
    backend = os.path.join(work, "backend")
    shutil.rmtree(backend, ignore_errors=True)
    os.makedirs(backend)
    for name in ("scikit_build_core", "ziglang", "packaging", "pathspec"):
        os.symlink(os.path.join(site, name), os.path.join(backend, name))
    return backend


def auditwheel_policy(build_env, wheel):
    """The manylinux platform tag `auditwheel show` gives the wheel, e.g. manylinux_2_26_aarch64."""
    shown = run([os.path.join(os.path.dirname(build_env), "auditwheel"), "show", wheel]).stdout
    policy = re.search(r'platform tag:\s+"(manylinux_2_\d+_\w+)"', " ".join(shown.split()))
    assert policy, shown
    return policy.group(1)
