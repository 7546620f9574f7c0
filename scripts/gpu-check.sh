#!/usr/bin/env bash
# Builds libtrainrun_runtime against the LibTorch of a CUDA-enabled PyTorch and runs, on one GPU,
# a one-process NCCL all-reduce and a short training run (lib/runtime/tools/gpu_check.cpp).
#
#   scripts/gpu-check.sh                    # uses `python3` from PATH
#   PYTHON=/opt/venv/bin/python scripts/gpu-check.sh
#
# Needs: a PyTorch with CUDA and a visible GPU, the CUDA toolkit LibTorch's CMake files look for
# (nvcc), cmake, a C++17 compiler and nlohmann-json (its CMake package, or a directory holding
# nlohmann/json.hpp named by NLOHMANN_JSON_INCLUDE_DIR in the environment). Only the runtime
# library is built: the launcher's packages (fmt, CLI11, Boost) are not needed. nccl.h is taken
# from the nvidia-nccl wheel next to PyTorch, or from NCCL_ROOT. Exits 0 when every check passes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-python3}
build=${BUILD_DIR:-$here/build-gpu}

say() { echo "gpu-check: $*" >&2; }

if ! "$python" -c 'import torch' 2>/dev/null; then
  say "$python cannot import torch; set PYTHON to an interpreter with a CUDA build of PyTorch"
  exit 2
fi
read -r torch_version cuda_version prefix devices nccl_include < <("$python" -c '
import os, torch
try:
    import nvidia.nccl
    nccl = os.path.join(list(nvidia.nccl.__path__)[0], "include")
except Exception:
    nccl = "-"
print(torch.__version__, torch.version.cuda or "none", torch.utils.cmake_prefix_path,
      torch.cuda.device_count() if torch.cuda.is_available() else 0, nccl)')
say "PyTorch $torch_version, CUDA $cuda_version, LibTorch CMake files in $prefix, $devices GPU(s)"
if [[ $cuda_version == none ]]; then
  say "this PyTorch was built without CUDA; install a CUDA build (pip install torch) and rerun"
  exit 2
fi
if [[ $devices -lt 1 ]]; then
  say "no GPU is visible (torch.cuda.is_available() is False); check the driver and CUDA_VISIBLE_DEVICES"
  exit 2
fi

if ! command -v nvcc >/dev/null; then
  for dir in /usr/local/cuda/bin /opt/cuda/bin; do
    [[ -x $dir/nvcc ]] && PATH=$dir:$PATH && break
  done
fi
if ! command -v nvcc >/dev/null; then
  say "nvcc not found: LibTorch's CMake files need the CUDA toolkit; put its bin/ on PATH"
  exit 2
fi

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
# Warnings are not errors here: this LibTorch is not the one the project's CI compiles against.
cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix${CMAKE_PREFIX_PATH:+;$CMAKE_PREFIX_PATH}" \
  -DTRAINRUN_BUILD_LAUNCHER=OFF -DTRAINRUN_BUILD_TESTS=OFF -DTRAINRUN_WERROR=OFF \
  -DTRAINRUN_NCCL_INCLUDE_HINT="${nccl_include#-}" \
  ${NLOHMANN_JSON_INCLUDE_DIR:+-DNLOHMANN_JSON_INCLUDE_DIR="$NLOHMANN_JSON_INCLUDE_DIR"} 2>&1 | tee "$build.configure.log" >&2
if ! grep -q "trainrun runtime: NCCL ON" "$build.configure.log"; then
  if grep -q "nccl.h was not found" "$build.configure.log"; then
    say "nccl.h not found (no nvidia-nccl wheel beside PyTorch); set NCCL_ROOT and rerun"
  else
    say "LibTorch at $prefix was not detected as a CUDA build (see $build.configure.log)"
  fi
  exit 1
fi
cmake --build "$build" -j"$(nproc)" --target trainrun_gpu_check >&2

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
storage=$(mktemp -d)
trap 'rm -rf "$storage"' EXIT
# One worker of a launched job: the runtime builds the TCPStore and a ProcessGroupNCCL of size 1.
say "running the NCCL all-reduce and the training check on cuda:0"
env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 GROUP_RANK=0 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TORCHELASTIC_RESTART_COUNT=0 \
  TRAINRUN_STORAGE_PATH="$storage" TRAINRUN_EXPERIMENT_NAME=gpu_check \
  "$build/lib/runtime/trainrun_gpu_check"
say "passed"
