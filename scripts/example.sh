#!/usr/bin/env bash
# Installs what is missing, builds, and trains the FashionMNIST ResNet-18 example
# (apps/examples/fashion_mnist) with two workers under trainrun.
# Usage: scripts/example.sh [fashion_mnist options]   (default: a short run, a few minutes)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRAINRUN_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"

args=("$@")
# 10,000 training images for 2 epochs: above 80% test accuracy in a few minutes on 2 cores.
((${#args[@]})) || args=(--epochs 2 --subset 10000 --test-subset 2000)
echo "example: trainrun --standalone --nproc-per-node=2 fashion_mnist ${args[*]}" >&2
exec "$build/apps/trainrun/trainrun" --standalone --nproc-per-node=2 \
  "$build/apps/examples/fashion_mnist/fashion_mnist" "${args[@]}"
