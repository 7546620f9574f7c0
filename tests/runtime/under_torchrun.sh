#!/bin/sh
# under_torchrun.sh PYTHON TORCHRUN PROGRAM [ARGS...]
# Runs PROGRAM on 2 workers under the reference torchrun with a static rendezvous on a free port
# (the launcher hosts the store: TORCHELASTIC_USE_AGENT_STORE=True), and passes when it exits 0
# and both ranks print a line ending in " ok".
set -u
python=$1 torchrun=$2 program=$3
shift 3
tests=$(cd "$(dirname "$0")/.." && pwd)
port=$(PYTHONPATH="$tests" "$python" -c 'from ports import free_port; print(free_port())')
out=$("$python" "$torchrun" --nnodes=1 --nproc_per_node=2 --master_addr=127.0.0.1 \
  --master_port="$port" --monitor_interval=0.1 --no_python "$program" "$@" 2>&1)
code=$?
echo "$out"
[ "$code" -eq 0 ] || { echo "under_torchrun: torchrun exited $code"; exit 1; }
ok=$(echo "$out" | grep -c ' ok$')
[ "$ok" -eq 2 ] || { echo "under_torchrun: expected 2 ranks ending in ' ok', got $ok"; exit 1; }
