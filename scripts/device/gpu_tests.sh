#!/usr/bin/env bash
# Every GPU test of a commit on the GPU machine, in one call: the binaries in
# $B (default .devcarry/bin; `name.xz` files are decompressed first: carried
# binaries travel xz-compressed, docs/DEVICE.md) that exist among
#   decode_attention_test decode_ops_test w4a16_test fp8_gemm_test cublaslt_test logits_reduce_test gpu_engine_test
# then compute-sanitizer memcheck / racecheck / synccheck on the small sets,
# and, with `bench`, the decode attention benchmark with its SDPA peer.
# Logs and JSON under $OUT; a short summary is printed last.
#   usage: scripts/device/gpu_tests.sh [tests|bench|all]
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
B=${B:-.devcarry/bin}
OUT=${OUT:-/tmp/gpu_tests_out}
MODE=${1:-tests}
mkdir -p "$OUT" .devcarry/run
for z in "$B"/*.xz; do [ -e "$z" ] || continue; xz -dc "$z" > ".devcarry/run/$(basename "$z" .xz)" && chmod +x ".devcarry/run/$(basename "$z" .xz)"; done
for f in "$B"/*; do case "$f" in *.xz) ;; *) [ -x "$f" ] && cp "$f" .devcarry/run/ ;; esac; done
R=.devcarry/run
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$SUM"
. "$(dirname "$0")/common.sh"
if [[ $MODE == tests || $MODE == all ]]; then
  for t in cublaslt_test decode_attention_test decode_ops_test w4a16_test fp8_gemm_test logits_reduce_test gpu_engine_test; do
    [ -x "$R/$t" ] && step "$t" 300 "$R/$t"
  done
  for tool in memcheck racecheck synccheck; do
    [ -x "$R/logits_reduce_test" ] && step "logits_$tool" 200 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$R/logits_reduce_test"
    [ -x "$R/decode_attention_test" ] && step "attn_$tool" 200 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$R/decode_attention_test" --gtest_filter='DecodeAttentionSmall.*'
    [ -x "$R/decode_ops_test" ] && step "ops_$tool" 200 compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$R/decode_ops_test" --gtest_filter='-DecodeOps.RmsNormMatchesTheCpu'
  done
fi
if [[ $MODE == bench || $MODE == all ]]; then
  step torch_sdpa 300 python3 bench/peers/torch_attention_peer.py --out "$OUT/sdpa.json"
  step attention_bench 300 "$R/decode_attention_bench" --peers "$OUT/sdpa.json" --json "$OUT/decode_attention.json"
  sed -n '/Decode attention/,$p' "$LOG" | grep -E "^\||TARGET" | head -40
fi
echo "----- failures"
grep -E "^\[  FAILED|ERROR SUMMARY: [1-9]|error:" "$LOG" | head -20
echo "----- summary"
cat "$SUM"
