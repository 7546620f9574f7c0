#!/usr/bin/env bash
# Installs what is missing, builds, and runs the test suite in both PyTorch configurations.
# Usage: scripts/test.sh [quick | --only TEST | CTEST_ARGS...]
#   quick        skip tests labelled slow
#   --only TEST  the one ctest TEST (ctest -N lists them), in the first configuration only; says so
#   otherwise    extra arguments go to ctest (e.g. -L e2e, -R python_dropin)
# 1. Debian's PyTorch 1.13 (build/): the whole suite.
# 2. Unless TRAINRUN_SANITIZE_SUITE=0: the launcher's unit and fuzz-replay tests and the e2e suites
#    labelled `sanitize` again under ASan + UBSan + LSan (scripts/sanitize.sh, build-asan/), with
#    the same arguments.
# 3. Unless TRAINRUN_PYPI_SUITE=0: the current PyTorch from PyPI (scripts/setup.sh --torch=pypi,
#    build-pypi/): every test that involves torch (runtime, examples, Python drop-in, parity with
#    the newest torchrun). It needs PyPI: without it this part fails, it is never skipped silently.
# At its end, passed or failed, it prints each stage's time and the ten slowest tests.
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
# Each stage's time and each ctest run's output, for the summary printed at the end.
timings="$(mktemp -d "${TMPDIR:-/tmp}/trainrun-timings.XXXXXX")"
stages=()
stage_name=""
stage_began=$SECONDS
stage() {
  stage_done
  stage_name="$1"
  stage_began=$SECONDS
}
stage_done() {
  if [ -n "$stage_name" ]; then
    stages+=("$(printf '%6d s  %s' $((SECONDS - stage_began)) "$stage_name")")
  fi
  stage_name=""
}
# ctest with its arguments, its output also kept under the configuration's name ($1).
run_ctest() {
  local configuration="$1"
  shift
  ctest "$@" 2>&1 | tee -a "$timings/$configuration"
}
summary() {
  stage_done
  echo "test: time by stage (${SECONDS} s in all):" >&2
  if [ "${#stages[@]}" -gt 0 ]; then printf '  %s\n' "${stages[@]}" >&2; fi
  echo "test: the ten slowest tests:" >&2
  # ctest's lines: "  3/81 Test  #5: name ......   Passed   12.34 sec"
  for f in "$timings"/*; do
    [ -f "$f" ] || continue
    sed -nE "s/^.*Test +#[0-9]+: ([^ ]+) \.+.* ([0-9.]+) sec\$/\2 \1 ($(basename "$f"))/p" "$f"
  # awk reads to the end and keeps ten: `head` would close the pipe under sort, whose SIGPIPE
  # (141) then became the whole command's exit status though every test had passed.
  done | sort -rn | awk 'NR <= 10 { printf "  %6.0f s  %s %s\n", $1, $2, $3 }' >&2
  rm -rf "$timings"
}

# Everything the tests and the jobs they run leave in the temporary directory (the log trees that
# failed jobs keep, as a user's would be kept; torchrun's own; checkpoints of killed workers) goes
# in one directory of this run: removed when every test passed, kept and named when one failed.
tests_tmp="$(mktemp -d "${TMPDIR:-/tmp}/trainrun-tests.XXXXXX")"
finish() {
  local status=$?
  # The summary only reports: whatever happens in it, the exit status stays the tests'.
  summary || echo "test: the summary of times could not be printed" >&2
  if [ "$status" -eq 0 ]; then
    rm -rf "$tests_tmp"
  else
    echo "test: the tests' temporary files are kept in $tests_tmp" >&2
  fi
  return "$status"
}
trap finish EXIT

stage "setup and build: the Debian configuration (build/)"
"$root/scripts/setup.sh" --tests
export TMPDIR="$tests_tmp"
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
stage "tests: the Debian configuration"
(cd "$build" && run_ctest Debian --output-on-failure -j2 "${args[@]}")

if [ "${TRAINRUN_SANITIZE_SUITE:-1}" != "0" ]; then
  free_space "the sanitizer configuration"
  stage "build and tests: the sanitizer configuration (build-asan/)"
  sanitize_args=("${args[@]}")
  if [ "${1:-}" = "quick" ]; then
    sanitize_args=(-L "^(unit|sanitize)$" -LE "slow|python|fuzz$" "${@:2}")
  fi
  "$root/scripts/sanitize.sh" "${sanitize_args[@]}" 2>&1 | tee -a "$timings/sanitizer"
  # CI builds in a fresh clone that nothing reuses: the sanitizer build (its objects, about 4 GB)
  # goes once its suite has passed, before PyPI's torch needs room.
  if [ "${CI:-}" = true ]; then
    echo "test: CI: removing the sanitizer build, which nothing reuses in a fresh clone" >&2
    rm -rf "${TRAINRUN_ASAN_BUILD_DIR:-$root/build-asan}"
  fi
fi

if [ "${TRAINRUN_PYPI_SUITE:-1}" != "0" ]; then
  echo "test: the PyTorch 2.x configuration (PyPI)" >&2
  free_space "the PyTorch 2.x configuration"
  stage "setup and build: the PyTorch 2.x configuration (build-pypi/)"
  "$root/scripts/setup.sh" --torch=pypi
  stage "tests: the PyTorch 2.x configuration"
  cd "${TRAINRUN_PYPI_BUILD_DIR:-$root/build-pypi}"
  run_ctest PyTorch-2.x --output-on-failure -j2 -L torch "${args[@]}"
else
  echo "test: TRAINRUN_PYPI_SUITE=0: the PyTorch 2.x configuration was not tested" >&2
fi
