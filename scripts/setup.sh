#!/usr/bin/env bash
# Installs what trainrun needs (only what is missing) and builds it.
# Usage: scripts/setup.sh [--torch=debian | --torch=pypi] [--tests]
#   --torch=debian  (default) Debian's PyTorch 1.13 (CPU); build directory build/ or
#                   $TRAINRUN_BUILD_DIR
#   --torch=pypi    the current torch and torchvision from PyPI (their CUDA build) in the ignored
#                   virtual environment .venv-pypi/, and a build against that LibTorch with NCCL
#                   in build-pypi/ (or $TRAINRUN_PYPI_BUILD_DIR). The virtual environment is made
#                   with $TRAINRUN_PYPI_PYTHON (default: the python3 first on PATH).
#   --tests         also what only the test suite uses: py-spy and ruff (PyPI) in the ignored .venv-tools/
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
. "$root/scripts/compiler-cache.sh"
torch=debian
tests=0
for arg in "$@"; do
  case "$arg" in
    --torch=debian | --torch=pypi) torch="${arg#--torch=}" ;;
    --tests) tests=1 ;;
    -h | --help)
      sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup: unknown argument '$arg' (use --torch=debian, --torch=pypi or --tests)" >&2
      exit 2
      ;;
  esac
done

packages=(
  cmake ninja-build g++ ccache pkg-config
  libcli11-dev libfmt-dev libboost-dev libboost-filesystem-dev nlohmann-json3-dev catch2
  libtomlplusplus-dev
  libssl-dev
  libtorch-dev libgloo-dev zlib1g-dev
  python3-torch python3-torchvision python3-pytest python3-venv python3-matplotlib
  dataset-fashion-mnist
  iproute2 iptables procps time elfutils gdb universal-ctags
  etcd-server etcd-client man-db dpkg-dev
  slurmctld slurmd slurm-client munge
  openssh-server openssh-client
  clang libclang-rt-14-dev
)

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
# The packages of the list given that are not installed.
not_installed() {
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
  done
}

mapfile -t missing < <(not_installed "${packages[@]}")
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" </dev/null
fi

# The aarch64 wheel, cross-built on x86_64 (docs/install.md) and run under qemu-user by the test
# install_wheel_aarch64, part of every test run: arm64's libcrypto.a and qemu's user mode.
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  mapfile -t missing < <(not_installed libssl-dev:arm64 qemu-user-static)
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]} (the aarch64 wheel)" >&2
    if ! { dpkg --print-foreign-architectures | grep -qx arm64 || $sudo dpkg --add-architecture arm64; } ||
      ! $sudo apt-get update -q ||
      ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" </dev/null; then
      if [ "$tests" = 1 ]; then
        echo "setup: cannot install ${missing[*]} (no arm64 archive?): the aarch64 wheel's test needs them" >&2
        exit 1
      fi
      echo "setup: cannot install ${missing[*]}: the aarch64 wheel cannot be built here" >&2
    fi
  fi
fi

# py-spy (PyPI only) for the stack collector's tests and ruff for the lint of the workers' Python
# (workers_python_lint), in the ignored .venv-tools/: made with the python3 first on PATH
# (Debian's has no pip without python3-pip), only when one is missing.
if [ "$tests" = 1 ] && { [ ! -x "$root/.venv-tools/bin/py-spy" ] || [ ! -x "$root/.venv-tools/bin/ruff" ]; }; then
  echo "setup: installing py-spy and ruff into $root/.venv-tools" >&2
  [ -x "$root/.venv-tools/bin/python" ] || python3 -m venv "$root/.venv-tools"
  if ! "$root/.venv-tools/bin/python" -m pip install -q py-spy ruff; then
    echo "setup: cannot install py-spy and ruff from PyPI (no network?): the stack tests and the lint need them" >&2
    exit 1
  fi
fi

if [ "$torch" = debian ]; then
  build="${TRAINRUN_BUILD_DIR:-$root/build}"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j2
  exit 0
fi

"$root/scripts/setup-pypi.sh"
