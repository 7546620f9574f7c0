"""A build where a dependency or zig is missing stops at configure time with one line that names
it and the packages that bring it (as `pip install .` or an sdist shows it, through CMake)."""
import os
import re
import subprocess
import sys

SOURCE = os.environ.get("TRAINRUN_SOURCE_DIR",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def configure(tmp_path, *args, env=None):
    r = subprocess.run(["cmake", "-S", SOURCE, "-B", str(tmp_path / "build"), "-G", "Ninja",
                        "-DTRAINRUN_BUILD_RUNTIME=OFF", "-DTRAINRUN_BUILD_TESTS=OFF", *args],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0, r.stdout
    return r.stderr


def test_a_missing_package_is_named_in_one_line(tmp_path):
    err = configure(tmp_path, "-DCMAKE_DISABLE_FIND_PACKAGE_CLI11=ON")
    lines = [l.strip() for l in err.splitlines() if l.strip().startswith("trainrun:")]
    assert lines == ["trainrun: CLI11 not found: install libcli11-dev (Debian/Ubuntu) or "
                     "cli11-devel (RHEL-like), or set CLI11_DIR"], err


def test_the_wheel_build_without_zig_says_so(tmp_path):
    # A Python without ziglang and no zig on PATH: the toolchain has no compiler to offer.
    env = dict(os.environ, PATH="/usr/bin:/bin")
    env.pop("TRAINRUN_ZIG", None)
    err = configure(tmp_path, "--toolchain", os.path.join(SOURCE, "cmake", "zig-toolchain.cmake"),
                    f"-DPython_EXECUTABLE={sys.executable}", env=env)
    lines = [l.strip() for l in err.splitlines() if l.strip().startswith("trainrun:")]
    assert len(lines) == 1 and re.match(r"trainrun: zig not found: `pip install ziglang`",
                                        lines[0]), err
