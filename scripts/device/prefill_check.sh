#!/usr/bin/env bash
# One call that checks and measures the GPU engine's FP8 prefill path (issue 12):
# the engine with prefill against the CPU FP8 reference (gpu_prefill_test, +
# memcheck on one prompt), the decode engine's tests (regression), the
# perplexity of the first 32,768 tokens through the prefill path (ctx 1024,
# pieces of 256 rows: the CPU reference's calls), time to first token
# (futr bench -p, SmolLM2 and the synthetic 8B, prefill on and off), futr
# generate's TTFT line, and the PyTorch peers where the script is carried.
# Binaries: $BIN/*.xz (default .devcarry/e); the model from .devcarry/m1..m3
# (joined once: a warm machine keeps models/). Logs under $OUT (one archive).
#   usage: [BIN=dir] [SKIP="engine ttft peers"] [PEER_BUDGET=s] scripts/device/prefill_check.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/prefill_check_out}
mkdir -p "$OUT" models .devcarry/run
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
BIN=${BIN:-.devcarry/e}
for z in "$BIN"/*.xz; do [ -e "$z" ] || continue; b=.devcarry/run/$(basename "$z" .xz); xz -dc "$z" > "$b" && chmod +x "$b"; done
R=.devcarry/run
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
echo "$SHA  $M" | sha256sum -c --status 2>/dev/null || cat .devcarry/m1/* .devcarry/m2/* .devcarry/m3/* > "$M" 2>/dev/null
echo "$SHA  $M" | sha256sum -c --status || { echo "model parts missing or wrong"; exit 2; }
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
TEXT=.devcarry/wiki.test.raw
[ -s "$TEXT" ] || TEXT=data/wikitext-2-raw/wiki.test.raw
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$SUM"
STEP_GREP='PASSED|FAILED|ERROR SUMMARY|"ppl"|mean rel|perplexity:'
. "$(dirname "$0")/common.sh"
skip() { [[ " ${SKIP:-} " == *" $1 "* ]]; }
[ -x "$R/decode_ops_test" ] && step decode_ops_gather 60 "$R/decode_ops_test" --gtest_filter='DecodeOps.GatherRows*'
step gpu_prefill_test 400 "$R/gpu_prefill_test"
step prefill_memcheck 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$R/gpu_prefill_test" \
  --gtest_filter='GpuPrefill.ChunksAndPackedRequestsMatchOneChunkRuns'
if [ -x "$R/gpu_engine_test" ] && ! skip engine; then step gpu_engine_test 300 "$R/gpu_engine_test"; fi
step ppl_gpu_prefill 200 "$R/futr" perplexity --model "$M" "$TEXT" --backend gpu --prefill --kv bf16 \
  --ctx 1024 --batch 256 --max-tokens 32768 --json -q
step ppl_gpu_prefill_b1024 200 "$R/futr" perplexity --model "$M" "$TEXT" --backend gpu --prefill --kv bf16 \
  --ctx 1024 --batch 1024 --max-tokens 32768 --json -q
for pf in on off; do
  skip ttft && break
  timeout 150 "$R/futr" bench --model "$M" --backend gpu --prefill=$pf -p 512,2048 -n 0 -r 5 \
    --json "$OUT/ttft_smollm2_$pf.json" > "$OUT/ttft_smollm2_$pf.md" 2>&1
  echo "ttft_smollm2_$pf rc=$?" >> "$SUM"
  timeout 200 "$R/futr" bench --synthetic llama-3.1-8b --backend gpu --prefill=$pf -p 512,2048,8192 -n 0 -r 3 \
    --json "$OUT/ttft_8b_$pf.json" > "$OUT/ttft_8b_$pf.md" 2>&1
  echo "ttft_8b_$pf rc=$?" >> "$SUM"
done
timeout 60 "$R/futr" generate --model "$M" --backend gpu -n 32 --temperature 0 \
  "The history of the Roman Empire begins with the founding of the city of Rome, which according to legend" \
  > "$OUT/generate.txt" 2>&1
echo "generate rc=$? $(grep -E 'first token|engine|prompt' "$OUT/generate.txt" | tr '\n' ' ')" >> "$SUM"
if [ -f bench/peers/torch_prefill_model_peer.py ] && ! skip peers; then
  step torch_prefill_model 480 python3 bench/peers/torch_prefill_model_peer.py --out "$OUT/torch_prefill_model.json" \
    --budget-s "${PEER_BUDGET:-400}"
fi
echo "----- failures"
grep -E "^\[  FAILED|ERROR SUMMARY: [1-9]|Failure|error:" "$LOG" | head -20
echo "----- prefill vs reference"
grep -E "mean rel L2|perplexity:|decode after prefill|\"prefill\"|fp8_calls" "$LOG" | head -20
echo "----- ttft"
grep -h -E "^\|" "$OUT"/ttft_*.md | head -30
echo "----- summary"
cat "$SUM"
tar -czf /tmp/prefill_check.tgz -C "$OUT" . && find "$OUT" -mindepth 1 ! -name summary.txt -delete && mv /tmp/prefill_check.tgz "$OUT/"
