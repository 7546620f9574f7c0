#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs each one for
# SECONDS (default 60) on its seed corpus in fuzz/corpus/<target>/. New inputs are kept in
# build-fuzz/fuzz/corpus/<target>/; a crash leaves its input in build-fuzz/artifacts/ and makes
# this script fail. Replay one with: build-fuzz/fuzz/fuzz_<target> <file>
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]     (build directory: $TRAINRUN_FUZZ_BUILD_DIR)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TRAINRUN_FUZZ_BUILD_DIR:-$root/build-fuzz}"
seconds="${1:-60}"
shift || true

all=(frame_decoder client_message server_message error_file nnodes std_spec rdzv_conf rank_list
     command_line line_prefix line_splitter hostlist)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DTRAINRUN_FUZZ=ON -DTRAINRUN_BUILD_RUNTIME=OFF >/dev/null
cmake --build "$build" -j"${TRAINRUN_JOBS:-2}" --target "${targets[@]/#/fuzz_}"

mkdir -p "$build/artifacts"
failed=()
for t in "${targets[@]}"; do
  scratch="$build/fuzz/corpus/$t"
  mkdir -p "$scratch"
  echo "fuzz: $t for ${seconds} s" >&2
  if ! "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/$t-" "$scratch" "$root/fuzz/corpus/$t" \
      >"$build/artifacts/$t.log" 2>&1; then
    failed+=("$t")
    tail -n 40 "$build/artifacts/$t.log" >&2
  else
    grep -E "stat::number_of_executed_runs|cov:" "$build/artifacts/$t.log" | tail -n 2 >&2 || true
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: crashes in ${failed[*]}; inputs in $build/artifacts/" >&2
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds} s each, no crash" >&2
