#!/usr/bin/env bash
# Builds the launcher (no LibTorch runtime) with AddressSanitizer + UndefinedBehaviorSanitizer in
# build-asan/ and runs there every unit and fuzz-replay test and the end-to-end suites labelled
# `sanitize` (tests/e2e/CMakeLists.txt says which and why; the others run in build/ alone).
# LeakSanitizer is on for every launcher process; any report fails the test that triggered it.
# Usage: scripts/sanitize.sh [CTEST_ARGS...]      (build directory: $TRAINRUN_ASAN_BUILD_DIR)
#   CTEST_ARGS narrow that selection (-R e2e_cli); one that selects by label itself (-L or -LE)
#   replaces it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRAINRUN_ASAN_BUILD_DIR:-$root/build-asan}"
. "$root/scripts/compiler-cache.sh"

# The sanitizers find what they find at any optimisation: -O0 with line tables only (-g1, enough
# for the reports' file:line) compiles five times faster than -O2 -g with ASan and UBSan, and the
# libraries compile as a few large files (unity build) with Asio, fmt and nlohmann-json parsed
# once (precompiled header). The build from nothing is minutes rather than most of an hour.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 -g1 -DNDEBUG" -DCMAKE_UNITY_BUILD=ON -DTRAINRUN_PCH=ON \
  -DTRAINRUN_SANITIZE=ON -DTRAINRUN_BUILD_RUNTIME=OFF >/dev/null
cmake --build "$build" -j"${TRAINRUN_JOBS:-2}"

# halt_on_error: an UBSan finding fails the process instead of scrolling past.
# detect_leaks=1 is the default on x86-64 Linux; said here so that nobody's environment turns it
# off. A process that ends with _exit (the watchdog, a child after fork) is not leak-checked.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-}"

# torch's Python tests load no launcher code under test here; libFuzzer runs are fuzz.sh's job.
select=(-L "^(unit|sanitize)$" -LE "python|fuzz$")
for a in "$@"; do
  case "$a" in -L | -LE) select=() ;; esac
done
cd "$build"
ctest --output-on-failure -j"${TRAINRUN_JOBS:-2}" "${select[@]}" "$@"
