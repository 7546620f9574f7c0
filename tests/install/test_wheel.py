"""The wheel as a user gets it: built from this source tree (pyproject.toml: scikit-build-core and
zig), installed into a fresh virtual environment of another Python, and used from there:
--version, `python -m trainrun`, a two-worker job whose environment is torchrun 2.x's, the
manylinux policy, the shared libraries the binary needs, and an uninstall that leaves nothing.

Run with TRAINRUN_PYTHON (an interpreter with PyTorch 2.x, the reference torchrun). The builder's
environment (scikit-build-core, ziglang, auditwheel) is kept in TRAINRUN_WHEEL_BUILD_ENV, the
CMake build in TRAINRUN_WHEEL_WORK, so that a second run rebuilds nothing (zig's own cache is
~/.cache/zig, ccache's is shared with the other builds)."""
import glob
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("TRAINRUN_WHEEL_WORK", "")
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))
from test_torchrun2 import compare, launch, read_dumps, torchrun  # noqa: E402
from wheel_build import (SOURCE, auditwheel_policy, build_backend, make_build_env,  # noqa: E402
                         project_version, run)

# What the binary may need: the C library and the loader, nothing that differs between systems.
ALLOWED_LIBRARIES = {"linux-vdso.so.1", "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
                     "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "linux-vdso.so.1"}


def python_version(python):
    out = run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]).stdout
    return out.strip()


@pytest.fixture(scope="module")
def build_env():
    """A virtual environment with the build requirements, kept between runs."""
    return make_build_env()


def other_python(than):
    """An interpreter of another version than `than`'s, the newest: TRAINRUN_WHEEL_PYTHON, or
    pyenv's (PYENV_ROOT, else ~/.pyenv), or python3.X on PATH."""
    named = os.environ.get("TRAINRUN_WHEEL_PYTHON")
    candidates = [named] if named else (
        glob.glob(os.path.join(os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv"),
                               "versions/3.*/bin/python3"))
        + [p for p in (shutil.which(f"python3.{m}") for m in range(8, 15)) if p])
    versions = {}
    for p in candidates:
        r = subprocess.run([p, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 0:  # pyenv's shims name versions that are not selected
            versions[p] = r.stdout.strip()
    for python in sorted(versions, key=lambda p: tuple(map(int, versions[p].split("."))),
                         reverse=True):
        if versions[python] != python_version(than):
            return python
    pytest.fail(f"no Python other than {python_version(than)} found to install the wheel with: "
                "set TRAINRUN_WHEEL_PYTHON")


def tree(root):
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs}


def readme_block():
    """The README's wheel commands, which this test runs as they are."""
    with open(os.path.join(SOURCE, "README.md")) as f:
        m = re.search(r"```sh\n(pip wheel -v \. -w dist/\n.*?)```", f.read(), re.S)
    assert m, "README.md: the block with `pip wheel -v . -w dist/` is gone"
    return m.group(1)


def source_tree():
    """The source tree as a user has it, with a dist/ and a train.py of its own: links to this
    tree's files, at a fixed place so that the CMake build in WORK stays valid."""
    src = os.path.join(WORK, "src")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    for name in os.listdir(SOURCE):
        if name not in ("dist", ".git") and not name.startswith(("build", ".venv")):
            os.symlink(os.path.join(SOURCE, name), os.path.join(src, name))
    with open(os.path.join(src, "train.py"), "w") as f:
        # One write per line: the two workers share the terminal (here a pipe), and print()'s
        # pieces, written one by one where Python's output is unbuffered, can interleave.
        f.write("import os, sys\n"
                "sys.stdout.write(f\"rank {os.environ['RANK']} of {os.environ['WORLD_SIZE']}\\n\")\n")
    return src


@pytest.fixture(scope="module")
def installed(build_env, tmp_path_factory):
    """The README's block, run in a fresh virtual environment of another Python than the build
    environment's: (the environment, its files before, the wheel, the block's output)."""
    assert WORK, "set TRAINRUN_WHEEL_WORK (ctest does)"
    root = tmp_path_factory.mktemp("venv") / "env"
    run([other_python(build_env), "-m", "venv", str(root)])
    before = tree(root)
    src = source_tree()
    # CCACHE_BASEDIR: the compiler sees only paths under WORK, the same in any clone.
    env = dict(os.environ, PATH=f"{root}/bin:{os.environ['PATH']}", VIRTUAL_ENV=str(root),
               PYTHONPATH=build_backend(build_env, WORK), PIP_NO_BUILD_ISOLATION="0", PIP_NO_INDEX="1",
               PIP_CONFIG_SETTINGS=f"build-dir={WORK}/build", CCACHE_BASEDIR=WORK)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    start = time.monotonic()
    r = run(["bash", "-e", "-o", "pipefail", "-c", readme_block()], cwd=src, env=env,
            timeout=1200)
    print(f"the README's block (wheel build, install, job) took {time.monotonic() - start:.0f} s",
          file=sys.stderr)
    wheels = glob.glob(os.path.join(src, "dist", "*.whl"))
    assert len(wheels) == 1, wheels
    return root, before, wheels[0], r.stdout + r.stderr


def test_the_readme_job_ran_two_workers(installed):
    out = installed[3]
    assert "rank 0 of 2" in out and "rank 1 of 2" in out, out


def test_wheel_name_and_manylinux_policy(installed, build_env):
    wheel = installed[2]
    name = os.path.basename(wheel)
    assert re.fullmatch(rf"trainrun-{re.escape(project_version())}-py3-none-manylinux_2_\d+_"
                        r"(x86_64|aarch64)\.whl", name), name
    policy = auditwheel_policy(build_env, wheel)
    assert int(re.match(r"manylinux_2_(\d+)_", policy).group(1)) <= 28, policy


def test_every_library_of_the_wheel_compiles_with_the_precompiled_header(installed):
    # pyproject.toml turns TRAINRUN_PCH on so that Asio, fmt and nlohmann-json are parsed once:
    # a library left out of it parses them again in each of its compiles. lib/base, below them
    # all, includes none of them.
    ninja = shutil.which("ninja")
    assert ninja, "ninja (scripts/setup.sh installs it) lists the build's commands"
    commands = run([ninja, "-C", os.path.join(WORK, "build"), "-t", "commands", "trainrun"])
    compiles = {m.group(1): line for line in commands.stdout.splitlines()
                if (m := re.search(r" -o (lib/\S+\.o) ", line))
                and not m.group(1).startswith("lib/base/")}
    assert len(compiles) > 10, commands.stdout[-3000:]
    without = sorted(o for o, line in compiles.items()
                     if "trainrun_rendezvous.dir/cmake_pch.hxx" not in line)
    assert not without, f"compiled without the precompiled header: {without}"


def test_version_from_the_command_and_from_python(installed):
    root = installed[0]
    expected = f"trainrun {project_version()}"
    assert run([str(root / "bin" / "trainrun"), "--version"]).stdout.strip() == expected
    python = str(root / "bin" / "python")
    assert run([python, "-m", "trainrun", "--version"]).stdout.strip() == expected
    where = run([python, "-c", "import trainrun; print(trainrun.executable())"]).stdout.strip()
    assert os.path.samefile(where, root / "bin" / "trainrun")


def test_the_binary_needs_only_the_c_library(installed):
    root = installed[0]
    out = run(["ldd", str(root / "bin" / "trainrun")]).stdout
    needed = {os.path.basename(line.split()[0]) for line in out.splitlines() if line.strip()}
    assert needed <= ALLOWED_LIBRARIES, out
    assert "libc.so.6" in needed


def test_two_workers_get_the_environment_of_torchrun2(installed, tmp_path):
    root = installed[0]
    launch([[str(root / "bin" / "trainrun"), "--standalone", "--nproc-per-node=2"]],
           str(tmp_path / "ours"))
    launch([torchrun() + ["--standalone", "--nproc-per-node=2"]], str(tmp_path / "theirs"))
    compare(read_dumps(str(tmp_path / "ours"), 2), read_dumps(str(tmp_path / "theirs"), 2))


def test_python_m_trainrun_without_its_binary_says_so(installed):
    root = installed[0]
    binary = root / "bin" / "trainrun"
    binary.chmod(0o644)
    try:
        r = subprocess.run([str(root / "bin" / "python"), "-m", "trainrun", "--version"],
                           capture_output=True, text=True, timeout=120)
    finally:
        binary.chmod(0o755)
    assert r.returncode == 127
    assert r.stderr.startswith("trainrun: ") and "not executable" in r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_python_m_trainrun_with_a_binary_that_cannot_run_says_so(installed):
    # An executable file the kernel cannot run (another architecture's, a damaged download).
    root = installed[0]
    binary = root / "bin" / "trainrun"
    saved = binary.read_bytes()
    binary.write_bytes(b"\x7fELF but not a program of this machine\n")
    try:
        r = subprocess.run([str(root / "bin" / "python"), "-m", "trainrun", "--version"],
                           capture_output=True, text=True, timeout=120)
    finally:
        binary.write_bytes(saved)
    assert r.returncode == 126, r.stderr
    assert r.stderr.startswith("trainrun: cannot run ") and "Exec format error" in r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_uninstall_leaves_nothing_behind(installed):
    root, before = installed[0], installed[1]
    run([str(root / "bin" / "python"), "-m", "pip", "uninstall", "-y", "-q", "trainrun"])
    # pip may compile its own modules while it runs; everything else is as it was.
    left = {p for p in tree(root) - before if "/site-packages/pip/" not in f"/{p}"}
    assert not left, sorted(left)
