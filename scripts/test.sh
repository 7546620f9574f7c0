#!/usr/bin/env bash
# Installs what is missing, builds, and runs the test suite.
# Usage: scripts/test.sh [quick | CTEST_ARGS...]
#   quick      skip tests labelled slow
#   otherwise  extra arguments go to ctest (e.g. -L e2e, -R python_dropin)
# Then, unless TRAINRUN_SANITIZE_SUITE=0, the launcher's suite again under ASan + UBSan + LSan
# (scripts/sanitize.sh, its own build directory), with the same arguments.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRAINRUN_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"

args=("$@")
if [ "${1:-}" = "quick" ]; then args=(-LE slow "${@:2}"); fi
cd "$build"
ctest --output-on-failure -j2 "${args[@]}"

if [ "${TRAINRUN_SANITIZE_SUITE:-1}" != "0" ]; then
  if [ "${1:-}" = "quick" ]; then
    "$root/scripts/sanitize.sh" -LE "slow|python|fuzz$" "${@:2}"
  else
    "$root/scripts/sanitize.sh" "${args[@]}"
  fi
fi
