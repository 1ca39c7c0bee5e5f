#!/usr/bin/env bash
# Every kernel-level GPU test of a commit in one call (no model needed), with
# the sanitizers on the small sets and the benchmarks named in ARGS:
#   the FP8 GEMM (tests, memcheck / racecheck / synccheck, the benchmark of
#   ours in both accumulation modes against cuBLASLt in both: FP8_BENCH_ARGS),
#   cuBLASLt, decode attention, decode ops, logits reduce, top-k sampling,
#   the INT4 decode GEMMs, tensor parallelism at TP 1 through NCCL (the NCCL of
#   the machine's PyTorch), the FP8 activation quantizer and its delayed
#   scaling (+ sanitizers), the prefill attention (+ sanitizers, benchmark
#   against PyTorch SDPA where its binaries are carried).
# Binaries: $BIN/*.xz (default .devcarry/bin; docs/DEVICE.md). Logs under $OUT (one archive
# kernels.tgz); failures and a summary printed last.
#   usage: [SKIP="fp8 w4a16 ..."] scripts/device/kernels.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
OUT=${OUT:-/tmp/kernels_out}
mkdir -p "$OUT" .devcarry/run
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
BIN=${BIN:-.devcarry/bin}
for z in "$BIN"/*.xz; do [ -e "$z" ] || continue; b=.devcarry/run/$(basename "$z" .xz); xz -dc "$z" > "$b" && chmod +x "$b"; done
R=.devcarry/run
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2>/dev/null)
[ -n "$nccl" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$SUM"
echo "nccl: ${nccl:-none}" >> "$SUM"
STEP_GREP='PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|largest|SKIPPED|TARGET'
. "$(dirname "$0")/common.sh"
skip() { [[ " ${SKIP:-} " == *" $1 "* ]]; }
has() { [ -x "$R/$1" ]; }
san() {  # san NAME BINARY FILTER: the three compute-sanitizer tools on a small set
  local tool
  for tool in memcheck racecheck synccheck; do
    step "$1_$tool" 200 compute-sanitizer --tool "$tool" --error-exitcode 3 "$R/$2" --gtest_filter="$3"
  done
}
if has fp8_gemm_test && ! skip fp8; then
  FP8_PEER=0 FP8_TUNE=0 FP8_BUDGET_S=${FP8_BUDGET_S:-330} OUT=$OUT/fp8 FUTR_BIN=$R \
    FP8_BENCH_ARGS=${FP8_BENCH_ARGS:---models 8b --m 2048,4096,8192} scripts/device/fp8_gemm.sh all > "$OUT/fp8.txt" 2>&1
  sed -n '/==== summary/,$p' "$OUT/fp8.txt" | head -60 >> "$SUM"
fi
has cublaslt_test && step cublaslt_test 120 "$R/cublaslt_test"
if has decode_attention_test && ! skip attention; then
  step decode_attention_test 300 "$R/decode_attention_test"
  san attn decode_attention_test 'DecodeAttentionSmall.*'
fi
if has decode_ops_test; then
  step decode_ops_test 120 "$R/decode_ops_test"
  san ops decode_ops_test '-DecodeOps.RmsNormMatchesTheCpu'
fi
has logits_reduce_test && step logits_reduce_test 120 "$R/logits_reduce_test"
has sample_topk_test && step sample_topk_test 120 "$R/sample_topk_test"
if has w4a16_test && ! skip w4a16; then
  step w4a16_test 300 "$R/w4a16_test"
  step w4a16_memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$R/w4a16_test" \
    --gtest_filter='W4A16Small.*:W4A16.GemvWithSwigluInputEqualsSwigluThenGemv:W4A16.GemvWithNormInputMatchesRmsnormThenGemv'
  step w4a16_racecheck 200 compute-sanitizer --tool racecheck --error-exitcode 3 "$R/w4a16_test" \
    --gtest_filter='W4A16.GemvWithNormInputMatchesRmsnormThenGemv'
fi
has gpu_tp_engine_test && step gpu_tp_engine_test 200 "$R/gpu_tp_engine_test"
if has fp8_scaling_test; then
  step fp8_scaling_test 120 "$R/fp8_scaling_test"
  san fp8scale fp8_scaling_test 'Fp8ScalingSmall.*'
fi
if has prefill_attention_test; then
  step prefill_attention_test 300 "$R/prefill_attention_test"
  san prefill prefill_attention_test 'PrefillAttentionSmall.*'
  cuobjdump --dump-sass "$R/prefill_attention_test" 2>/dev/null | grep -o "HGMMA\.[^ ]*" | sort | uniq -c >> "$SUM"
fi
if has prefill_attention_bench && ! skip prefill_bench; then
  step torch_prefill_sdpa 300 python3 bench/peers/torch_prefill_attention_peer.py --out "$OUT/prefill_sdpa.json"
  step prefill_attention_bench 200 "$R/prefill_attention_bench" --peers "$OUT/prefill_sdpa.json" \
    --json "$OUT/prefill_attention.json"
fi
echo "----- failures"
grep -E "^\[  FAILED|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]|error:|Failure" "$LOG" "$OUT"/fp8/*.log 2>/dev/null | head -30
grep -h -E "^\|" "$LOG" | tail -30
echo "----- summary"
cat "$SUM"
tar -czf /tmp/kernels.tgz -C "$OUT" . && find "$OUT" -mindepth 1 ! -name summary.txt -delete && mv /tmp/kernels.tgz "$OUT/"
