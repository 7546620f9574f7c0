#!/usr/bin/env bash
# The loaded-machine check of docs/reliability.md: the whole test command (scripts/test.sh, with
# the same arguments) run RUNS times in a row with two busy loops beside it, stopping at the first
# failure. After each run it lists any process the tests left behind (below), and a run that
# leaves one counts as failed.
# Usage: scripts/test-loaded.sh [--resume] [RUNS] [scripts/test.sh ARGS...]     (RUNS: default 1)
#
# --resume: a series may span several sittings (five runs take hours on two cores). Each passed
# run is written to .test-loaded-state with the commit it ran at; --resume goes on from there
# when the tree is still at that commit with nothing changed, and starts again from run 1
# otherwise. A failed run, or a run interrupted part-way, counts for nothing: the state file
# keeps only runs that passed one after another at one commit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
state="$root/.test-loaded-state"
resume=0
if [ "${1:-}" = "--resume" ]; then
  resume=1
  shift
fi
runs=1
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

commit="$(git -C "$root" rev-parse HEAD)"
if [ -n "$(git -C "$root" status --porcelain)" ]; then
  commit="$commit-modified"
fi
first=1
if [ "$resume" = 1 ] && [ -f "$state" ] && [ "$(head -1 "$state")" = "commit $commit" ] \
  && [ "$commit" = "${commit%-modified}" ]; then
  passed="$(grep -c '^passed ' "$state" || true)"
  first=$((passed + 1))
  echo "test-loaded: resuming at $commit: $passed run(s) passed in a row already" >&2
  grep '^passed ' "$state" >&2 || true
else
  echo "commit $commit" >"$state"
fi

for run in $(seq "$first" "$runs"); do
  start=$(date +%s)
  echo "test-loaded: run $run of $runs, $(date -u +%FT%TZ), two busy loops beside it" >&2
  if ! "$root/scripts/test.sh" "$@"; then
    echo "test-loaded: run $run of $runs FAILED after $(($(date +%s) - start)) s" >&2
    echo "commit $commit" >"$state"
    exit 1
  fi
  left="$(leftovers)"
  if [ -n "$left" ]; then
    echo "test-loaded: run $run of $runs left processes behind:" >&2
    echo "$left" >&2
    echo "commit $commit" >"$state"
    exit 1
  fi
  echo "test-loaded: run $run of $runs passed in $(($(date +%s) - start)) s" >&2
  echo "passed run $run $(date -u +%FT%TZ) $(($(date +%s) - start)) s" >>"$state"
done
echo "test-loaded: all $runs runs passed in a row" >&2
