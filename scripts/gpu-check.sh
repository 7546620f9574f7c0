#!/usr/bin/env bash
# Builds libtrainrun_runtime against the LibTorch of a CUDA-enabled PyTorch and runs, on one GPU:
# a one-process NCCL all-reduce, two prepare_model SGD steps on cuda:0 against the same steps on
# the CPU, a state dict saved from the GPU read onto the CPU, a short training run
# (lib/runtime/tools/gpu_check.cpp); then the FashionMNIST example for one epoch on the GPU
# (C++, --use-gpu) against its Python twin on the same GPU, images/s side by side.
#
#   scripts/gpu-check.sh                    # uses `python3` from PATH
#   PYTHON=/opt/venv/bin/python scripts/gpu-check.sh
#   GPU_CHECK_BUILD_ONLY=1 scripts/gpu-check.sh   # configure and build only: no GPU needed
#
# Needs: a PyTorch with CUDA and a visible GPU, the CUDA toolkit LibTorch's CMake files look for
# (nvcc), cmake, a C++17 compiler and nlohmann-json (its CMake package, or a directory holding
# nlohmann/json.hpp named by NLOHMANN_JSON_INCLUDE_DIR in the environment), and gloo's headers,
# which PyPI's torch does not ship (libgloo-dev, or GLOO_INCLUDE_DIR naming the directory above
# gloo/). Only the runtime library is built: the launcher's packages (fmt, CLI11, Boost) are not
# needed. nccl.h is taken from the nvidia-nccl wheel next to PyTorch, or from NCCL_ROOT. The
# FashionMNIST comparison also needs CLI11 (libcli11-dev, or its CMake package on CMAKE_PREFIX_PATH), torchvision beside torch,
# and the data set's four files in FASHION_MNIST_DIR (default /usr/share/datasets/fashion-mnist,
# Debian's fashion-mnist package). Results go to stdout and to $RESULTS (default
# $BUILD_DIR/gpu-check-results.txt). Exits 0 when every check passes, 1 when one fails, 2 when
# this machine cannot run them, 3 when the core checks passed but the FashionMNIST comparison
# could not run here (the line before says why). Where a trainrun launcher is at hand (TRAINRUN,
# or `trainrun` on PATH), scripts/gpu/preload-check.sh (--preload on the GPU) and
# scripts/gpu/collectives-check.sh (an NCCL group's flight recorder through --stacks) run first;
# the failure of either fails this script.
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
build_only=${GPU_CHECK_BUILD_ONLY:-0}
if [[ $devices -lt 1 && $build_only != 1 ]]; then
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

preload_failed=0
if [[ -n ${TRAINRUN:-} || -n $(command -v trainrun) ]] && [[ $build_only != 1 ]]; then
  say "warm starts on the GPU (scripts/gpu/preload-check.sh)"
  PYTHON=$python "$here/scripts/gpu/preload-check.sh" || preload_failed=1
  say "an NCCL group's flight recorder (scripts/gpu/collectives-check.sh)"
  PYTHON=$python "$here/scripts/gpu/collectives-check.sh" || preload_failed=1
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
targets=(trainrun_gpu_check)
grep -q '^CLI11_DIR:PATH=.*-NOTFOUND' "$build/CMakeCache.txt" || targets+=(fashion_mnist)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >&2
if [[ $build_only == 1 ]]; then
  say "built ${targets[*]} (GPU_CHECK_BUILD_ONLY=1); stopping before the checks, which need a GPU"
  exit 0
fi
results=${RESULTS:-$build/gpu-check-results.txt}
: >"$results"

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
storage=$(mktemp -d)
trap 'rm -rf "$storage"' EXIT
# One worker of a launched job: the runtime builds the TCPStore and a ProcessGroupNCCL of size 1.
say "running the NCCL all-reduce and the training check on cuda:0"
env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 LOCAL_WORLD_SIZE=1 GROUP_RANK=0 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TORCHELASTIC_RESTART_COUNT=0 \
  TRAINRUN_STORAGE_PATH="$storage" TRAINRUN_EXPERIMENT_NAME=gpu_check \
  "$build/lib/runtime/trainrun_gpu_check" | tee -a "$results"

# The FashionMNIST example, one epoch on the GPU, C++ against Python.
data=${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
incomplete() {
  ((preload_failed == 0)) || { say "FAILED: scripts/gpu/preload-check.sh or collectives-check.sh (above)"; exit 1; }
  say "core checks passed; FashionMNIST comparison not run: $*"
  exit 3
}
[[ -x $build/apps/examples/fashion_mnist/fashion_mnist ]] ||
  incomplete "the example was not built (CLI11 not found: apt-get install libcli11-dev)"
[[ -e $data/train-images-idx3-ubyte.gz || -e $data/train-images-idx3-ubyte ]] ||
  incomplete "no FashionMNIST files in $data (set FASHION_MNIST_DIR)"
"$python" -c 'import torchvision' 2>/dev/null ||
  incomplete "$python cannot import torchvision (pip install torchvision)"
epoch_line() { grep -E '^epoch 1/1: ' | tail -1; }
images_per_s() { sed -E 's/.* ([0-9]+) images\/s.*/\1/'; }
say "FashionMNIST, one epoch on cuda:0: the C++ example"
cpp=$(TRAINRUN_STORAGE_PATH="$storage" "$build/apps/examples/fashion_mnist/fashion_mnist" \
  --use-gpu --epochs 1 --data-dir "$data" --name gpu_check | tee -a /dev/stderr | epoch_line)
say "FashionMNIST, one epoch on cuda:0: the Python script"
py=$("$python" "$here/apps/examples/fashion_mnist/train_fashion_mnist.py" --use-gpu --epochs 1 \
  --data-dir "$data" | tee -a /dev/stderr | epoch_line)
[[ -n $cpp && -n $py ]] || { say "FAILED: an epoch line is missing"; exit 1; }
{
  echo "fashion_mnist C++    (cuda:0): $cpp"
  echo "fashion_mnist Python (cuda:0): $py"
  echo "images/s C++ / Python: $(images_per_s <<<"$cpp") / $(images_per_s <<<"$py")"
} | tee -a "$results"
((preload_failed == 0)) || { say "FAILED: scripts/gpu/preload-check.sh or collectives-check.sh (above)"; exit 1; }
say "passed"
