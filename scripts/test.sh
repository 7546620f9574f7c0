#!/usr/bin/env bash
# Installs what is missing, builds, and runs the test suite in both PyTorch configurations.
# Usage: scripts/test.sh [quick | --only TEST | CTEST_ARGS...]
#   quick        skip tests labelled slow
#   --only TEST  the one ctest TEST (ctest -N lists them), in the first configuration only; says so
#   otherwise    extra arguments go to ctest (e.g. -L e2e, -R python_dropin)
# 1. Debian's PyTorch 1.13 (build/): the whole suite.
# 2. Unless TRAINRUN_SANITIZE_SUITE=0: the launcher's suite again under ASan + UBSan + LSan
#    (scripts/sanitize.sh, build-asan/), with the same arguments.
# 3. Unless TRAINRUN_PYPI_SUITE=0: the current PyTorch from PyPI (scripts/setup.sh --torch=pypi,
#    build-pypi/): every test that involves torch (runtime, examples, Python drop-in, parity with
#    the newest torchrun). It needs PyPI: without it this part fails, it is never skipped silently.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRAINRUN_BUILD_DIR:-$root/build}"
only=""
if [ "${1:-}" = "--only" ]; then
  if [ $# -ne 2 ] || [ -z "$2" ]; then
    echo "test: --only takes one test name, e.g. --only e2e_slurm (ctest -N lists them)" >&2
    exit 2
  fi
  only="$2"
fi
"$root/scripts/setup.sh" --tests

# Everything the tests and the jobs they run leave in the temporary directory (the log trees that
# failed jobs keep, as a user's would be kept; torchrun's own; checkpoints of killed workers) goes
# in one directory of this run: removed when every test passed, kept and named when one failed.
tests_tmp="$(mktemp -d "${TMPDIR:-/tmp}/trainrun-tests.XXXXXX")"
export TMPDIR="$tests_tmp"
finish() {
  local status=$?
  if [ "$status" -eq 0 ]; then
    rm -rf "$tests_tmp"
  else
    echo "test: the tests' temporary files are kept in $tests_tmp" >&2
  fi
  return "$status"
}
trap finish EXIT
# Free space where the builds, the virtual environments and the tests' files go, at each stage: a
# stage that runs out of space then says how much there was (PyPI's torch takes about 9 GB while
# it installs: 3 GB of wheels beside 5.5 GB installed).
free_space() {
  echo "test: $1: $(df -h --output=avail "$root" | tail -1 | tr -d ' ') free for $root," \
    "$(df -h --output=avail "$tests_tmp" | tail -1 | tr -d ' ') for $tests_tmp" >&2
}

if [ -n "$only" ]; then
  echo "test: only $only, in $build; the sanitizer and PyTorch 2.x configurations are not run" >&2
  cd "$build" && ctest --output-on-failure --no-tests=error -R "^${only}\$"
  exit
fi

args=("$@")
if [ "${1:-}" = "quick" ]; then args=(-LE slow "${@:2}"); fi
free_space "the Debian configuration"
(cd "$build" && ctest --output-on-failure -j2 "${args[@]}")

if [ "${TRAINRUN_SANITIZE_SUITE:-1}" != "0" ]; then
  free_space "the sanitizer configuration"
  if [ "${1:-}" = "quick" ]; then
    "$root/scripts/sanitize.sh" -LE "slow|python|fuzz$" "${@:2}"
  else
    "$root/scripts/sanitize.sh" "${args[@]}"
  fi
  # CI builds in a fresh clone that nothing reuses: the sanitizer build (about 7 GB of objects
  # with their debug information) goes once its suite has passed, before PyPI's torch needs room.
  if [ "${CI:-}" = true ]; then
    echo "test: CI: removing the sanitizer build, which nothing reuses in a fresh clone" >&2
    rm -rf "${TRAINRUN_ASAN_BUILD_DIR:-$root/build-asan}"
  fi
fi

if [ "${TRAINRUN_PYPI_SUITE:-1}" != "0" ]; then
  echo "test: the PyTorch 2.x configuration (PyPI)" >&2
  free_space "the PyTorch 2.x configuration"
  "$root/scripts/setup.sh" --torch=pypi
  cd "${TRAINRUN_PYPI_BUILD_DIR:-$root/build-pypi}"
  ctest --output-on-failure -j2 -L torch "${args[@]}"
else
  echo "test: TRAINRUN_PYPI_SUITE=0: the PyTorch 2.x configuration was not tested" >&2
fi
