#!/usr/bin/env bash
# Installs the Debian packages trainrun needs (only those missing) and builds it.
# Usage: scripts/setup.sh            (build directory: build/, or $TRAINRUN_BUILD_DIR)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRAINRUN_BUILD_DIR:-$root/build}"

packages=(
  cmake ninja-build g++ ccache pkg-config
  libcli11-dev libfmt-dev libboost-dev libboost-filesystem-dev nlohmann-json3-dev catch2
  libtorch-dev libgloo-dev zlib1g-dev
  python3-torch python3-torchvision python3-pytest
  dataset-fashion-mnist
  iproute2 procps time
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}" </dev/null
fi

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2
