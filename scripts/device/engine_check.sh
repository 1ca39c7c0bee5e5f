#!/usr/bin/env bash
# One call that checks the GPU decode engine's kernels and measures its step
# (issue 10 / 11 work): the GEMM tests touched by the engine's fusions (SwiGLU
# in the gemv, PDL chains, the small compute-sanitizer set), the decode-attention
# and small-kernel tests (+ memcheck / racecheck / synccheck on the small
# sets), the engine against the CPU reference (gpu_engine_test), the step per
# kernel (futr bench --breakdown: SmolLM2 and the synthetic 8B, batch 1 and 16,
# ctx 1024), the GEMM sweep of SmolLM2's shapes, and the GPU perplexity of the
# first 32,768 tokens (bf16 KV). Binaries: .devcarry/bin*/ *.xz (docs/DEVICE.md);
# the model from .devcarry/m1..m3. Logs and JSON under $OUT; summary last.
#   usage: scripts/device/engine_check.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/engine_check_out}
mkdir -p "$OUT" models .devcarry/run
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
for z in .devcarry/bin*/*.xz; do b=.devcarry/run/$(basename "$z" .xz); xz -dc "$z" > "$b" && chmod +x "$b"; done
R=.devcarry/run
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$M" ] || cat .devcarry/m1/* .devcarry/m2/* .devcarry/m3/* > "$M"
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$SUM"
STEP_GREP='PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|largest|"ppl"'
. "$(dirname "$0")/common.sh"
W4='W4A16.GemvWithSwigluInputEqualsSwigluThenGemv:W4A16.GemvWithNormInputMatchesRmsnormThenGemv:W4A16.AllShapesHeuristic:W4A16.PdlChainInGraphEqualsEager:W4A16Small.*'
step w4a16_test 200 "$R/w4a16_test" --gtest_filter="$W4"
step w4a16_memcheck 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$R/w4a16_test" \
  --gtest_filter='W4A16Small.*:W4A16.GemvWithSwigluInputEqualsSwigluThenGemv:W4A16.GemvWithNormInputMatchesRmsnormThenGemv'
step w4a16_racecheck 200 compute-sanitizer --tool racecheck --error-exitcode 3 "$R/w4a16_test" \
  --gtest_filter='W4A16.GemvWithNormInputMatchesRmsnormThenGemv'
step decode_attention_test 120 "$R/decode_attention_test"
step decode_ops_test 60 "$R/decode_ops_test"
for tool in memcheck racecheck synccheck; do
  step "ops_$tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 3 "$R/decode_ops_test" \
    --gtest_filter='-DecodeOps.RmsNormMatchesTheCpu'
done
step gpu_engine_test 300 "$R/gpu_engine_test"
for s in smollm2-135m llama-3.1-8b; do
  timeout 120 "$R/futr" bench --synthetic "$s" --backend gpu -p 0 -n 0 -b 1,16 --ctx-list 1024 -r 3 --steps 32 \
    --breakdown --json "$OUT/breakdown_$s.json" > "$OUT/breakdown_$s.md" 2>&1
  echo "breakdown_$s rc=$?" >> "$SUM"
done
timeout 120 "$R/futr" bench --model "$M" --backend gpu -p 0 -n 0 -b 1,16 --ctx-list 1024 -r 3 --steps 32 \
  --json "$OUT/bench_smollm2.json" > "$OUT/bench_smollm2.md" 2>&1
# The residual + RMSNorm fused into the one-row gemv (GpuEngineOptions::fuse_norm), batch 1:
for s in smollm2-135m llama-3.1-8b; do
  FUTR_GPU_FUSE_NORM=1 timeout 120 "$R/futr" bench --synthetic "$s" --backend gpu -p 0 -n 0 -b 1 --ctx-list 1024 \
    -r 3 --steps 32 --json "$OUT/bench_fused_$s.json" > "$OUT/bench_fused_$s.md" 2>&1
  echo "bench_fused_$s rc=$?" >> "$SUM"
done
# Prompts through the decode kernels in chunks of 32 rows (time to first token):
timeout 120 "$R/futr" bench --model "$M" --backend gpu -p 512 -n 16 -b 1 --ctx-list 0 -r 3 \
  --json "$OUT/bench_prompt_smollm2.json" > "$OUT/bench_prompt_smollm2.md" 2>&1
echo "bench_prompt_smollm2 rc=$?" >> "$SUM"
step w4a16_sweep 200 "$R/w4a16_bench" --models SmolLM2-135M --m 1,16 --sweep SmolLM2-135M --json "$OUT/w4a16_sweep.json"
step ppl_gpu_bf16 200 "$R/futr" perplexity --model "$M" .devcarry/wiki.test.raw --backend gpu --weights int4 --kv bf16 \
  --ctx 1024 --max-tokens 32768 --json -q
echo "----- failures"
grep -E "FAILED|Failure|error:|Error" "$LOG" | head -20
echo "----- summary"
cat "$SUM"
grep -h -E "^\| (synthetic|Smol)|sum of" "$OUT"/breakdown_*.md "$OUT/bench_smollm2.md" "$OUT"/bench_fused_*.md \
  "$OUT/bench_prompt_smollm2.md"
grep -A14 "Sweep" "$LOG" | head -24
# The server's load row (issue 13): futr serve --backend gpu, 32 at a time.
OUT=$OUT/serve timeout 150 scripts/device/serve.sh > "$OUT/serve.txt" 2>&1
tail -4 "$OUT/serve.txt"
# Everything in one archive (a call brings back a limited number of files).
tar -czf /tmp/engine_check.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/engine_check.tgz "$OUT/"
