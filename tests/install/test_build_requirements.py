"""A build where a dependency or zig is missing stops at configure time with one line that names
it and the packages that bring it (as `pip install .` or an sdist shows it, through CMake)."""
import os
import platform
import re
import shutil
import subprocess
import sys

from wheel_build import make_build_env, zig

CMAKE = shutil.which("cmake") or "cmake"
SOURCE = os.environ.get("TRAINRUN_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def configure(tmp_path, *args, env=None):
    r = subprocess.run([CMAKE, "-S", SOURCE, "-B", str(tmp_path / "build"), "-G", "Ninja",
                        "-DTRAINRUN_BUILD_RUNTIME=OFF", "-DTRAINRUN_BUILD_TESTS=OFF", *args],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0, r.stdout
    return r.stderr


def test_a_missing_package_is_named_in_one_line(tmp_path):
    err = configure(tmp_path, "-DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON")
    lines = [l.strip() for l in err.splitlines() if l.strip().startswith("trainrun:")]
    assert lines == ["trainrun: CLI11 not found: install libcli11-dev (Debian/Ubuntu) or "
                     "cli11-devel (RHEL-like), or set CLI11_DIR"], err


def test_a_gloo_include_dir_without_gloo_is_named_in_one_line(tmp_path):
    # The runtime alone (as scripts/gpu-check.sh builds it): PyPI's LibTorch has no gloo headers.
    r = subprocess.run([CMAKE, "-S", SOURCE, "-B", str(tmp_path / "build"), "-G", "Ninja",
                        "-DTRAINRUN_BUILD_LAUNCHER=OFF", "-DTRAINRUN_BUILD_TESTS=OFF",
                        f"-DGLOO_INCLUDE_DIR={tmp_path}"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0, r.stdout
    lines = [l.strip() for l in r.stderr.splitlines() if l.strip().startswith("trainrun:")]
    assert lines == [f"trainrun: GLOO_INCLUDE_DIR ({tmp_path}) holds no gloo/algorithm.h: name "
                     "the directory above gloo/"], r.stderr


def test_the_wheel_build_without_zig_says_so(tmp_path):
    # A Python without ziglang and no zig on PATH: the toolchain has no compiler to offer.
    env = dict(os.environ, PATH="/usr/bin:/bin")
    env.pop("TRAINRUN_ZIG", None)
    err = configure(tmp_path, "--toolchain", os.path.join(SOURCE, "cmake", "zig-toolchain.cmake"),
                    f"-DPython_EXECUTABLE={sys.executable}", env=env)
    lines = [l.strip() for l in err.splitlines() if l.strip().startswith("trainrun:")]
    assert len(lines) == 1 and re.match(r"trainrun: zig not found: `pip install ziglang`",
                                        lines[0]), err


# The cross-build of the other architecture's wheel (TRAINRUN_WHEEL_ARCH in pyproject.toml): what
# it needs beyond the native build (the target's libcrypto.a, qemu-user) is named as zig is.
OTHER_ARCH = "aarch64" if platform.machine() == "x86_64" else "x86_64"
DEB_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}[OTHER_ARCH]


def cross_configure(tmp_path, *args, env=None):
    return configure(tmp_path, "--toolchain", os.path.join(SOURCE, "cmake", "zig-toolchain.cmake"),
                     f"-DTRAINRUN_ZIG_ARCH={OTHER_ARCH}", "-DTRAINRUN_STATIC_DEPS=ON", *args,
                     env=env)


def trainrun_lines(err):
    return [l.strip() for l in err.splitlines() if l.strip().startswith("trainrun:")]


def test_the_cross_build_without_the_targets_libcrypto_says_so(tmp_path):
    # zig is there (the wheel builder's); the target's OpenSSL is not found.
    env = dict(os.environ, TRAINRUN_ZIG=zig(make_build_env()))
    err = cross_configure(tmp_path, "-DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON",
                          "-DTRAINRUN_ZIG_EMULATOR=/bin/true", env=env)
    assert trainrun_lines(err) == [
        f"trainrun: OpenSSL 3's static libcrypto.a for {OTHER_ARCH} not found: install "
        f"libssl-dev:{DEB_ARCH} (Debian/Ubuntu, after `dpkg --add-architecture {DEB_ARCH}`), or "
        f"set OPENSSL_ROOT_DIR to an OpenSSL 3 built for {OTHER_ARCH}"], err


def test_the_cross_build_without_zig_says_so(tmp_path):
    env = dict(os.environ, PATH="/usr/bin:/bin")
    env.pop("TRAINRUN_ZIG", None)
    err = cross_configure(tmp_path, f"-DPython_EXECUTABLE={sys.executable}",
                          "-DTRAINRUN_ZIG_EMULATOR=/bin/true", env=env)
    lines = trainrun_lines(err)
    assert len(lines) == 1 and lines[0].startswith("trainrun: zig not found: `pip install ziglang`"), err


def test_the_cross_build_without_qemu_says_so(tmp_path):
    # No directory where qemu could be is searched.
    empty = tmp_path / "bin"
    empty.mkdir()
    env = dict(os.environ, PATH=str(empty))
    err = cross_configure(tmp_path, f"-DCMAKE_MAKE_PROGRAM={shutil.which('ninja')}",
                          "-DCMAKE_IGNORE_PATH=/usr/local/bin;/usr/bin;/bin;/usr/sbin;/sbin", env=env)
    assert trainrun_lines(err) == [
        f"trainrun: qemu-{OTHER_ARCH} not found: install qemu-user-static (Debian/Ubuntu) or "
        f"qemu-user (RHEL-like), which runs the {OTHER_ARCH} program that writes the man page, or "
        "set TRAINRUN_ZIG_EMULATOR"], err


def test_an_architecture_zig_is_not_set_up_for_is_refused(tmp_path):
    err = configure(tmp_path, "--toolchain", os.path.join(SOURCE, "cmake", "zig-toolchain.cmake"),
                    "-DTRAINRUN_ZIG_ARCH=riscv64")
    assert trainrun_lines(err) == ["trainrun: TRAINRUN_ZIG_ARCH=riscv64: use x86_64 or aarch64"], err
