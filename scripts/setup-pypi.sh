#!/usr/bin/env bash
# The PyTorch 2.x configuration: the current torch and torchvision from PyPI in .venv-pypi/ (with
# Lightning and Hugging Face's Trainer for the framework tests), and trainrun built against that
# LibTorch (CUDA build, NCCL enabled) in build-pypi/. Called by `scripts/setup.sh --torch=pypi`
# once the Debian packages are in place. Idempotent: an environment that already imports torch
# and torchvision is kept, and the Trainers are added to it when missing.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/compiler-cache.sh"
venv="$root/.venv-pypi"
build="${TRAINRUN_PYPI_BUILD_DIR:-$root/build-pypi}"
python="${TRAINRUN_PYPI_PYTHON:-python3}"
say() { echo "setup: $*" >&2; }

if ! "$venv/bin/python" -c 'import torch, torchvision, pytest' 2>/dev/null; then
  "$python" -m venv "$venv"
  say "installing torch and torchvision from PyPI into $venv"
  start=$(date +%s)
  # Through pip's own cache (~/.cache/pip): a new checkout on the same machine installs the same
  # wheels (about 3 GB) without fetching them again.
  if ! "$venv/bin/python" -m pip install -q torch torchvision pytest; then
    say "cannot install torch from PyPI (no network?): the PyTorch 2.x configuration needs it"
    exit 1
  fi
  say "installed in $(($(date +%s) - start)) s"
fi

# The Trainers of tests/python/test_frameworks_torch2.py, at versions known to work with that
# torch; added without changing a package already there (torch above all): pip's constraints.
frameworks=(lightning==2.6.6 transformers==5.25.0 accelerate==1.16.0)
if ! "$venv/bin/python" -c 'import lightning, transformers, accelerate' 2>/dev/null; then
  say "installing ${frameworks[*]} into $venv"
  constraints="$(mktemp)"
  "$venv/bin/python" -m pip freeze >"$constraints"
  if ! "$venv/bin/python" -m pip install -q -c "$constraints" "${frameworks[@]}"; then
    rm -f "$constraints"
    say "cannot install ${frameworks[*]} into $venv beside its torch (no network, or the" \
      "conflict pip names above)"
    exit 1
  fi
  rm -f "$constraints"
fi

read -r torch_version cuda_version prefix nccl_include < <("$venv/bin/python" -c '
import os, torch
try:
    import nvidia.nccl
    nccl = os.path.join(list(nvidia.nccl.__path__)[0], "include")
except ImportError:
    nccl = "-"
print(torch.__version__, torch.version.cuda or "none", torch.utils.cmake_prefix_path, nccl)')
say "PyTorch $torch_version (CUDA $cuda_version) from $venv"

cuda_args=()
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_args=(-DCUDAToolkit_ROOT=/usr/local/cuda -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
mkdir -p "$build"
# TorchConfig.cmake looks for its libraries after the system's: with Debian's libtorch-dev also
# installed it would pick that one. The prefix path puts the wheel's torch/lib first.
torch_root="$(dirname "$(dirname "$prefix")")"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_PREFIX_PATH="$prefix;$torch_root" -DTRAINRUN_NCCL_INCLUDE_HINT="${nccl_include#-}" \
  -DTRAINRUN_PYTHON="$venv/bin/python" "${cuda_args[@]}" >"$build/configure.log" 2>&1 || {
  cat "$build/configure.log" >&2
  say "configuring against PyTorch $torch_version failed (log above)"
  exit 1
}
if [ "$cuda_version" != none ] && ! grep -q "trainrun runtime: NCCL ON" "$build/configure.log"; then
  grep -i "nccl" "$build/configure.log" >&2 || true
  say "PyTorch $torch_version is a CUDA build but NCCL was not enabled (log: $build/configure.log)"
  exit 1
fi
cmake --build "$build" -j2
