"""The aarch64 wheel cross-built on this x86_64 machine, as docs/install.md builds it
(TRAINRUN_WHEEL_ARCH=aarch64 pip wheel .): its name and manylinux policy, a binary that needs
only the C library family, and that binary run under qemu-user: --version, two-worker jobs of
/bin/true and of a script that prints its RANK, and a two-worker torch job that meets at a c10d
rendezvous and all-reduces, with and without --preload torch (which says that it cannot fork
workers under qemu-user, and starts them the ordinary way; the workers are this machine's Python,
run natively: the launcher is what is under test).

Needs qemu-aarch64 (qemu-user-static) and Debian's libssl-dev:arm64, which scripts/setup.sh
installs; the builder's environment is kept as test_wheel.py keeps it, the CMake build in
TRAINRUN_WHEEL_WORK."""
import glob
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

from wheel_build import (SOURCE, auditwheel_policy, build_backend, make_build_env, project_version,
                         run)

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from ports import free_port  # noqa: E402

WORK = os.environ.get("TRAINRUN_WHEEL_WORK", "")
# The arm64 libcrypto the static launcher links (Debian's libssl-dev:arm64).
ARM64_LIBCRYPTO = "/usr/lib/aarch64-linux-gnu/libcrypto.a"
QEMU = os.environ.get("TRAINRUN_QEMU_AARCH64") or shutil.which("qemu-aarch64-static") or \
    shutil.which("qemu-aarch64")
# The C library family and the loader: what every manylinux aarch64 system has.
ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
                  "ld-linux-aarch64.so.1"}


@pytest.fixture(scope="module")
def build_env():
    return make_build_env()


@pytest.fixture(scope="module")
def wheel(build_env):
    """The documented command, run in the source tree: (the wheel, pip's output)."""
    assert WORK, "set TRAINRUN_WHEEL_WORK (ctest does)"
    assert os.path.exists(ARM64_LIBCRYPTO), \
        f"{ARM64_LIBCRYPTO} not found: install libssl-dev:arm64 (scripts/setup.sh does)"
    dist = os.path.join(WORK, "dist")
    shutil.rmtree(dist, ignore_errors=True)
    # No isolation: the kept backend and zig, so that zig's and ccache's caches stay valid.
    env = dict(os.environ, TRAINRUN_WHEEL_ARCH="aarch64",
               PYTHONPATH=build_backend(build_env, WORK),
               PIP_CONFIG_SETTINGS=f"build-dir={WORK}/build", CCACHE_BASEDIR=SOURCE)
    env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", "2")
    r = run([build_env, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v", ".",
             "-w", dist], cwd=SOURCE, env=env, timeout=1200)
    wheels = glob.glob(os.path.join(dist, "*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0], r.stdout + r.stderr


@pytest.fixture(scope="module")
def binary(wheel, tmp_path_factory):
    root = tmp_path_factory.mktemp("wheel")
    with zipfile.ZipFile(wheel[0]) as z:
        z.extractall(root)
    path = root / f"trainrun-{project_version()}.data" / "scripts" / "trainrun"
    path.chmod(0o755)
    return str(path)


def under_qemu(binary, *args, **kw):
    assert QEMU and os.access(QEMU, os.X_OK), \
        "qemu-aarch64 not found: install qemu-user-static (scripts/setup.sh does)"
    return subprocess.run([QEMU, binary, *args], capture_output=True, text=True, timeout=120, **kw)


def test_pip_v_shows_ninjas_progress_lines_not_its_commands(wheel):
    # "[n/N] Building CXX object ..." on a fresh build; a kept build still re-checks its globs.
    assert re.search(r"^\s*\[\d+/\d+\] ", wheel[1], re.M), wheel[1][-3000:]
    assert not re.search(r"zig-c\+\+ -[A-Za-z]", wheel[1]), wheel[1][-3000:]  # a compile command


def test_wheel_name_and_manylinux_policy(wheel, build_env):
    name = os.path.basename(wheel[0])
    assert name == f"trainrun-{project_version()}-py3-none-manylinux_2_28_aarch64.whl", name
    policy = auditwheel_policy(build_env, wheel[0])
    m = re.fullmatch(r"manylinux_2_(\d+)_aarch64", policy)
    assert m and int(m.group(1)) <= 28, policy


def test_the_binary_is_aarch64_and_needs_only_the_c_library(binary):
    header = run(["readelf", "-h", binary]).stdout
    assert re.search(r"Machine:\s+AArch64", header), header
    dynamic = run(["readelf", "-d", binary]).stdout
    needed = set(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic))
    assert needed and needed <= ALLOWED_NEEDED, dynamic


def test_version_under_qemu(binary):
    r = under_qemu(binary, "--version")
    assert r.returncode == 0 and r.stdout.strip() == f"trainrun {project_version()}", r


def test_two_workers_of_bin_true_under_qemu(binary):
    r = under_qemu(binary, "--standalone", "--nproc-per-node=2", "/bin/true")
    assert r.returncode == 0, r


def test_two_workers_print_their_rank_under_qemu(binary, tmp_path):
    script = tmp_path / "rank.sh"
    script.write_text('#!/bin/sh\necho "rank $RANK of $WORLD_SIZE"\n')
    script.chmod(0o755)
    r = under_qemu(binary, "--standalone", "--nproc-per-node=2", str(script))
    assert r.returncode == 0, r
    assert sorted(re.findall(r"rank \d of \d", r.stdout)) == ["rank 0 of 2", "rank 1 of 2"], r


# Whether torch was imported before the script's first line: a worker forked from the --preload
# template. Then the group meets through the rendezvous and the store and all-reduces.
TORCH_JOB = """
import sys
preloaded = "torch" in sys.modules
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
# One write for the whole line: the workers share the console, and print() under python -u
# writes the newline apart.
sys.stdout.write(f"rank {dist.get_rank()} of {dist.get_world_size()}: sum {t.item():g}, "
                 f"preloaded {preloaded}\\n")
sys.stdout.flush()
dist.destroy_process_group()
"""


@pytest.mark.parametrize("preload", [False, True], ids=["plain", "preload"])
def test_a_two_worker_torch_job_with_a_rendezvous_under_qemu(binary, tmp_path, preload):
    script = tmp_path / "job.py"
    script.write_text(TORCH_JOB)
    r = under_qemu(binary, "--nnodes=1", "--nproc-per-node=2", "--rdzv-backend=c10d",
                   f"--rdzv-endpoint=127.0.0.1:{free_port()}",
                   *(["--preload=torch"] if preload else []), str(script),
                   env=dict(os.environ, PYTHON_EXEC=sys.executable))
    assert r.returncode == 0, r
    lines = sorted(line for line in r.stdout.splitlines() if line.startswith("rank "))
    # qemu-user keeps PR_SET_CHILD_SUBREAPER to itself, so trainrun under it is no subreaper: a
    # worker forked by the template would not come back to it when orphaned. --preload says so
    # once and the workers start the ordinary way (the template's own fallback, tested here).
    assert lines == [f"rank {k} of 2: sum 3, preloaded False" for k in range(2)], r
    fallback = ("trainrun: --preload: trainrun is not a child subreaper here; workers start the "
                "ordinary way\n")
    assert r.stderr.count(fallback) == (1 if preload else 0), r.stderr


def test_the_wheel_holds_the_man_page_the_completion_and_the_guides_it_names(wheel):
    share = f"trainrun-{project_version()}.data/data/share/"
    with zipfile.ZipFile(wheel[0]) as z:
        names = set(z.namelist())
        page = z.read(share + "man/man1/trainrun.1").decode()
    assert share + "bash-completion/completions/trainrun" in names, sorted(names)
    guides = re.findall(r"\b([a-z]+\.md)\b", page.split(".SH SEE ALSO", 1)[1])
    assert "cli.md" in guides and "multinode.md" in guides, guides
    for guide in guides:
        assert share + "doc/trainrun/" + guide in names, (guide, sorted(names))
