#!/usr/bin/env bash
# Issues 4 and 11 on the GPU machine: the INT4 decode GEMM's tests (plain, then
# compute-sanitizer memcheck, racecheck and synccheck on the small set), the
# cuBLASLt wrapper's test and the ceilings, the PyTorch peer, the benchmark
# (with its no-compute floor) and ncu on the stream kernel.
# Binaries come prebuilt from $B (default .devcarry/bin; `name.xz` files are
# decompressed first, docs/DEVICE.md); results go to $OUT:
#   logs.txt            every step's output
#   w4a16_h200.json     the benchmark (bench/results/w4a16_h200.json when committed)
#   torch_peers.json    the PyTorch peer's numbers
#   ceilings.json       ceilings_bench
# and a short summary is printed last.
#   usage: scripts/device/w4a16.sh [all|tests|bench] [extra w4a16_bench args...]
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=${B:-.devcarry/bin}
OUT=${OUT:-/tmp/w4a16_out}
mkdir -p "$OUT" .devcarry/run
for z in "$B"/*.xz; do [ -e "$z" ] || continue; xz -dc "$z" > ".devcarry/run/$(basename "$z" .xz)" && chmod +x ".devcarry/run/$(basename "$z" .xz)"; done
for f in "$B"/*; do case "$f" in *.xz) ;; *) [ -x "$f" ] && cp "$f" .devcarry/run/ ;; esac; done
B=.devcarry/run
PEER_MODELS=${PEER_MODELS:-}
MODE=${1:-all}
shift || true
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$SUM"

STEP_GREP='PASSED|FAILED|ERROR SUMMARY|torch peer|TARGET'
. "$(dirname "$0")/common.sh"  # step NAME LIMIT CMD...

if [[ $MODE == all || $MODE == tests ]]; then
  if ! step cublaslt_test 90 "$B/cublaslt_test"; then
    step cublaslt_test_log 60 env CUBLASLT_LOG_MASK=5 "$B/cublaslt_test"
  fi
  step ceilings 90 "$B/ceilings_bench" --json "$OUT/ceilings.json"
  step int4_pack_test 60 "$B/int4_pack_test"
  step w4a16_test 240 "$B/w4a16_test"
fi
if [[ $MODE == all || $MODE == bench ]]; then
  step torch_peer 240 python3 bench/peers/torch_decode_peer.py --out "$OUT/torch_peers.json" ${PEER_MODELS:+--models "$PEER_MODELS"}
  step w4a16_bench 300 "$B/w4a16_bench" --peers "$OUT/torch_peers.json" --json "$OUT/w4a16_h200.json" "$@"
fi
if [[ $MODE == all || $MODE == bench || $MODE == ncu ]]; then
  # Hardware counters of two representative launches (clocks left alone).
  for target in ${NCU_TARGETS:-Llama-3.1-8B:gate_up:1 Llama-3.1-8B:gate_up:32}; do
    step "ncu_${target//:/_}" 120 ncu --clock-control none --target-processes all -k regex:sm90_w4a16 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section Occupancy --section LaunchStats \
      --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_not_selected_per_issue_active.ratio,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio,smsp__average_warps_issue_stalled_dispatch_stall_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio \
      "$B/w4a16_bench" --only "$target"
  done
fi
if [[ $MODE == all || $MODE == tests ]]; then
  step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/w4a16_test" --gtest_filter='W4A16Small*'
  step racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/w4a16_test" --gtest_filter='W4A16Small.*'
  step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 "$B/w4a16_test" --gtest_filter='W4A16Small*'
fi

echo "----- key benchmark rows"
grep -E "layer|largest relative|TARGET|copy bandwidth" "$LOG" | grep -E "SmolLM2|Llama-3.1-8B|Llama-3.1-70B|largest|TARGET|copy" | cut -c1-260 | head -60
echo "----- failures"
grep -E "^\[  FAILED|ERROR SUMMARY: [1-9]|error:" "$LOG" | head -20
echo "----- summary"
cat "$SUM"
