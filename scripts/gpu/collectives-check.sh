#!/usr/bin/env bash
# The flight recorder of an NCCL process group read through a worker's diagnosis channel
# (docs/hangs.md, "The collectives"), on a GPU node; scripts/gpu-check.sh runs it where a
# trainrun is at hand. One GPU holds one NCCL rank (NCCL refuses two ranks on one device), so the
# check is one rank: three all-reduces on cuda:0, then a pause in which `trainrun --stacks` must
# show the group's last collective as NCCL recorded it, completed, with its size and dtype.
#
#   TRAINRUN=/path/to/trainrun PYTHON=/path/to/python3 scripts/gpu/collectives-check.sh
#
# Exits 0 when the check passes, 1 when it fails, 2 when this machine cannot run it.
set -uo pipefail

python=${PYTHON:-python3}
trainrun=${TRAINRUN:-$(command -v trainrun || true)}
say() { echo "collectives-check: $*" >&2; }
[[ -n $trainrun && -x $trainrun ]] || { say "no trainrun launcher: set TRAINRUN"; exit 2; }
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
  { say "$python has no torch that sees a GPU"; exit 2; }
work=$(mktemp -d)
job=""
trap '[[ -n $job ]] && kill "$job" 2>/dev/null; rm -rf "$work"' EXIT
cat >"$work/job.py" <<'PY'
import os, sys, time
import torch, torch.distributed as dist
dist.init_process_group("nccl")
t = torch.ones(1024, device="cuda:0")
for _ in range(3):
    dist.all_reduce(t)
torch.cuda.synchronize()
open(sys.argv[1], "w").close()
deadline = time.time() + 120
while not os.path.exists(sys.argv[2]) and time.time() < deadline:
    time.sleep(0.05)
dist.destroy_process_group()
PY
PYTHON_EXEC=$python TRAINRUN_RUNTIME_DIR=$work/rt "$trainrun" --standalone --nproc-per-node=1 \
  "$work/job.py" "$work/ready" "$work/release" >"$work/job.out" 2>"$work/job.err" &
job=$!
for _ in $(seq 600); do [[ -e $work/ready ]] && break; sleep 0.1; done
[[ -e $work/ready ]] || { say "FAILED: the job did not reach its pause"; tail -20 "$work/job.err" >&2; exit 1; }
TRAINRUN_RUNTIME_DIR=$work/rt "$trainrun" --stacks >"$work/stacks.out" 2>&1
touch "$work/release"
wait "$job"
rc=$?
sed 's/^/    /' "$work/stacks.out" >&2
if ! grep -Eq '^  group 0 \(default_pg\): rank 0 at #3 all_reduce\(1024 float32\), completed' \
  "$work/stacks.out"; then
  say "FAILED: --stacks did not show the NCCL group's last all-reduce (above)"
  exit 1
fi
((rc == 0)) || { say "FAILED: the job exited $rc"; tail -20 "$work/job.err" >&2; exit 1; }
say "passed: NCCL's flight recorder read through the diagnosis channel"
