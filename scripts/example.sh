#!/usr/bin/env bash
# Installs what is missing, builds, and runs the example training job under trainrun.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRAINRUN_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"

echo "example: trainrun --standalone --nproc-per-node=2 allreduce_demo" >&2
exec "$build/apps/trainrun/trainrun" --standalone --nproc-per-node=2 \
  "$build/apps/examples/allreduce_demo"
