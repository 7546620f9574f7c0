#!/usr/bin/env bash
# The loaded-machine check of docs/reliability.md: the whole test command (scripts/test.sh, with
# the same arguments) run RUNS times in a row with two busy loops beside it, stopping at the first
# failure. After each run it lists any process the tests left behind (below), and a run that
# leaves one counts as failed.
# Usage: scripts/test-loaded.sh [RUNS] [scripts/test.sh ARGS...]     (RUNS: default 5)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
runs=5
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then
  runs="$1"
  shift
fi
if [ "$runs" -lt 1 ]; then
  echo "test-loaded: RUNS must be at least 1 (got $runs)" >&2
  exit 2
fi

loops=()
stop_loops() {
  if [ "${#loops[@]}" -gt 0 ]; then kill "${loops[@]}" 2>/dev/null || true; fi
}
trap stop_loops EXIT
for _ in 1 2; do
  bash -c 'while :; do :; done' &
  loops+=("$!")
done

# What a test may have started and must not leave: any process running a program built in this
# tree (trainrun, the test workers, the examples), and etcd or Slurm daemons, whose command line
# names this tree or a pytest temporary directory.
leftovers() {
  local exe cmd pid
  for pid in $(ps -eo pid= 2>/dev/null); do
    exe="$(readlink "/proc/$pid/exe" 2>/dev/null)" || continue
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || continue
    case "$exe" in
      "$root"/*) echo "$pid $cmd" ;;
      */etcd | */slurmctld | */slurmd | */munged)
        case "$cmd" in *"$root"* | */pytest-of-*) echo "$pid $cmd" ;; esac ;;
    esac
  done
}

for run in $(seq 1 "$runs"); do
  start=$(date +%s)
  echo "test-loaded: run $run of $runs, $(date -u +%FT%TZ), two busy loops beside it" >&2
  if ! "$root/scripts/test.sh" "$@"; then
    echo "test-loaded: run $run of $runs FAILED after $(($(date +%s) - start)) s" >&2
    exit 1
  fi
  left="$(leftovers)"
  if [ -n "$left" ]; then
    echo "test-loaded: run $run of $runs left processes behind:" >&2
    echo "$left" >&2
    exit 1
  fi
  echo "test-loaded: run $run of $runs passed in $(($(date +%s) - start)) s" >&2
done
echo "test-loaded: all $runs runs passed in a row" >&2
