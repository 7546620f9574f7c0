"""scripts/gpu-check.sh and the runtime-only build it uses, on a machine without CUDA: each
refusal is one clear line and exit 2, and the runtime-only configuration works without the
launcher's packages being asked for."""
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def gpu_check(python):
    env = dict(os.environ, PYTHON=python)
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def test_interpreter_without_torch_is_refused():
    result = gpu_check("/nonexistent/python3")
    assert result.returncode == 2, result.stderr
    assert "cannot import torch; set PYTHON" in result.stderr


def test_cpu_only_pytorch_is_refused_before_building():
    result = gpu_check("/usr/bin/python3")
    assert result.returncode == 2, result.stderr
    assert "this PyTorch was built without CUDA" in result.stderr
    assert "Building" not in result.stdout + result.stderr


def configure(build, *options):
    return subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), *options],
                          capture_output=True, text=True, timeout=300)


def test_runtime_only_build_needs_tests_off(tmp_path):
    result = configure(tmp_path, "-DTRAINRUN_BUILD_LAUNCHER=OFF")
    assert result.returncode != 0
    assert "the tests and fuzz targets need the launcher" in result.stderr


def test_runtime_only_configuration(tmp_path):
    result = configure(tmp_path, "-DTRAINRUN_BUILD_LAUNCHER=OFF", "-DTRAINRUN_BUILD_TESTS=OFF")
    assert result.returncode == 0, result.stderr
    assert "trainrun runtime: NCCL OFF, num_workers launching OFF" in result.stdout
