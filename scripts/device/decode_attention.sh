#!/usr/bin/env bash
# Issue 9 on the GPU machine: the decode KV-cache kernels' tests (plain, then
# compute-sanitizer memcheck / racecheck / synccheck on the small set), the
# PyTorch SDPA peer and the benchmark, in one call. Binaries come prebuilt
# (docs/DEVICE.md) from $B (default .devcarry/bin); results go to $OUT:
#   logs.txt                 every step's output
#   decode_attention.json    the benchmark (bench/results/decode_attention_h200.json when committed)
#   sdpa.json                the PyTorch peer
# and a short summary is printed last.
#   usage: scripts/device/decode_attention.sh [all|tests|bench] [extra decode_attention_bench args...]
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=${B:-.devcarry/bin}
OUT=${OUT:-/tmp/decode_attention_out}
mkdir -p "$OUT"
MODE=${1:-all}
shift || true
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$SUM"

. "$(dirname "$0")/common.sh"

if [[ $MODE == all || $MODE == tests ]]; then
  step attention_test 300 "$B/decode_attention_test"
  for tool in memcheck racecheck synccheck; do
    step "$tool" 200 compute-sanitizer --tool "$tool" --error-exitcode 3 "$B/decode_attention_test" --gtest_filter='DecodeAttentionSmall.*'
  done
fi
if [[ $MODE == all || $MODE == bench ]]; then
  step torch_sdpa 300 python3 bench/peers/torch_attention_peer.py --out "$OUT/sdpa.json"
  step attention_bench 300 "$B/decode_attention_bench" --peers "$OUT/sdpa.json" --json "$OUT/decode_attention.json" "$@"
fi

echo "----- benchmark"
sed -n '/Decode attention/,$p' "$LOG" | grep -E "^\||TARGET" | head -60
echo "----- failures"
grep -E "FAILED|Failure|error:|ERROR SUMMARY: [1-9]" "$LOG" | head -20
echo "----- summary"
cat "$SUM"
