#!/usr/bin/env bash
# --preload on a GPU node (scripts/gpu-check.sh runs it where a trainrun is at hand):
#  1. one NCCL rank and two Gloo ranks train on cuda:0 with and without --preload=torch: the
#     preloaded workers had torch before their script ran, none had CUDA initialised, no fallback
#     line, the same losses;
#  2. --preload=torch,cuda_at_import (a module that initialises CUDA): one line names it, workers
#     start the ordinary way, the same losses;
#  3. 8 Gloo workers (one CUDA step each) from launch to their end: without --preload, with it,
#     and under `python -m torch.distributed.run`.
#
#   TRAINRUN=/path/to/trainrun PYTHON=/path/to/python3 scripts/gpu/preload-check.sh
#
# Exits 0 when every check passes, 1 when one fails, 2 when this machine cannot run them.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-python3}
trainrun=${TRAINRUN:-$(command -v trainrun || true)}
say() { echo "preload-check: $*" >&2; }
[[ -n $trainrun && -x $trainrun ]] || { say "no trainrun launcher: set TRAINRUN"; exit 2; }
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  { say "$python has no torch that sees a GPU"; exit 2; }
export PYTHON_EXEC=$python
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=0
fail() { say "FAILED: $*"; failed=1; }

# launch NAME ARGS...: a standalone job, its stdout and stderr in $work/NAME.{out,err}.
launch() {
  local name=$1
  shift
  "$trainrun" --standalone --log-dir "$work/logs-$name" "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  ((rc == 0)) || { fail "$name exited $rc"; sed 's/^/    /' "$work/$name.err" | tail -20 >&2; }
}
losses() { grep -E '^(\[[^]]*\]:)?step ' "$work/$1.out" | sed -E 's/^\[[^]]*\]://'; }
check_pair() {  # plain preloaded expected_preloaded
  local plain=$1 warm=$2 expect=$3
  grep -q "CUDA initialised at start True" "$work/$plain.out" "$work/$warm.out" &&
    fail "$warm: a worker began with CUDA initialised"
  grep -q "torch preloaded True" "$work/$plain.out" && fail "$plain: torch preloaded without --preload"
  if [[ $expect == True ]]; then
    grep -q "torch preloaded False" "$work/$warm.out" && fail "$warm: a worker was not forked from the template"
    grep -q "ordinary way" "$work/$warm.err" && fail "$warm: fell back: $(grep 'ordinary way' "$work/$warm.err")"
  fi
  if [[ -z $(losses "$plain") ]]; then
    fail "$plain printed no losses"
  elif [[ $(losses "$plain") != "$(losses "$warm")" ]]; then
    fail "$plain and $warm differ:"
    diff <(losses "$plain") <(losses "$warm") >&2
  else
    echo "$warm: $(losses "$warm" | wc -l) losses as without --preload (last: $(losses "$warm" | tail -1))"
  fi
}

say "NCCL, one rank, with and without --preload=torch"
# One worker: trainrun (as torchrun) leaves OMP_NUM_THREADS unset, and torch's OpenMP pool would
# start at import, in the template; the job sets it as the workers of two would have it.
OMP_NUM_THREADS=1 launch nccl --nproc-per-node=1 "$here/preload_job.py" nccl 5
OMP_NUM_THREADS=1 launch nccl-warm --nproc-per-node=1 --preload=torch "$here/preload_job.py" nccl 5
check_pair nccl nccl-warm True
say "Gloo, two ranks on cuda:0, with and without --preload=torch"
launch gloo --nproc-per-node=2 "$here/preload_job.py" gloo 5
launch gloo-warm --nproc-per-node=2 --preload=torch "$here/preload_job.py" gloo 5
check_pair gloo gloo-warm True
say "--preload=torch,cuda_at_import: one line, workers start the ordinary way"
launch cuda-import --nproc-per-node=2 --preload=torch,cuda_at_import "$here/preload_job.py" gloo 5
check_pair gloo cuda-import False
lines=$(grep -c "ordinary way" "$work/cuda-import.err")
if [[ $lines != 1 ]] || ! grep "ordinary way" "$work/cuda-import.err" | grep -q cuda_at_import; then
  fail "cuda-import: expected one line naming cuda_at_import, got $lines:"
  cat "$work/cuda-import.err" >&2
else
  echo "cuda-import: $(grep 'ordinary way' "$work/cuda-import.err")"
fi
grep -q "torch preloaded True" "$work/cuda-import.out" && fail "cuda-import: a worker was forked after CUDA was initialised"

say "8 Gloo workers, one CUDA step each, launch to end"
timed() {  # NAME COMMAND...
  local name=$1 start end
  shift
  start=$(date +%s.%N)
  if ! "$@" >"$work/$name.out" 2>"$work/$name.err"; then
    fail "$name failed:"
    grep -E 'Error|error' "$work/$name.err" | tail -3 >&2
  fi
  end=$(date +%s.%N)
  printf '%-28s %6.2f s\n' "$name" "$(echo "$end - $start" | bc -l 2>/dev/null || "$python" -c "print($end - $start)")"
}
for round in 1 2; do
  timed "trainrun (round $round)" "$trainrun" --standalone --nproc-per-node=8 "$here/preload_job.py" gloo 1
  timed "trainrun --preload=torch ($round)" "$trainrun" --standalone --nproc-per-node=8 --preload=torch "$here/preload_job.py" gloo 1
  timed "torchrun ($round)" "$python" -m torch.distributed.run --standalone --nproc-per-node=8 "$here/preload_job.py" gloo 1
done
((failed == 0)) && say "passed"
exit $failed
