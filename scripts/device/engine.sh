#!/usr/bin/env bash
# Issue 10 on the GPU machine: the GPU engine against the CPU quantized
# reference on SmolLM2-135M (tests/gpu/engine_test.cpp), then `futr generate`
# and `futr perplexity` on both engines, in one call. Results go to $OUT:
#   logs.txt, ppl_<engine>_<kv>.json, and a short summary printed last.
#
# What travels (docs/DEVICE.md): one call carries at most 64 MiB, so
#   - the model (98 MB) comes in three parts, .devcarry/m1, m2, m3 (each from
#     `split -n 3`), carried by three consecutive calls of a warm machine; this
#     script joins them into models/ (kept there between calls: ignored path);
#   - the binaries come xz-compressed (.devcarry/bin/*.xz, ~5 MB each: the
#     static OpenBLAS is most of their 32 MB);
#   - the binaries' compiled-in paths (/work/main/...) point at this checkout
#     through a symlink; the perplexity text is .devcarry/wiki.test.raw.
# `bench`: futr bench on SmolLM2 (GPU and CPU int4) and on the synthetic
# Llama shapes (1B, 8B, 70B) on the GPU, graphs on and off: bench_*.json.
# `breakdown`: the decode step per kernel (futr bench --breakdown) on SmolLM2
# and the synthetic 8B at batch 1 and 16, ctx 1024, with PDL, and the same
# steps without PDL: bench_breakdown_*.json / .md.
# With PEERS=1 the bench mode also runs the PyTorch peers of the full decode
# step (docs/ANCHORS "Decode: full model step"), on the machine's own torch:
#   bench/peers/torch_step_peer.py  -> torch_step_peer.json  (~30-90 s; TORCH_PEER_ARGS
#                                      adds flags, e.g. "--mode compile --models smollm2")
#   bench/peers/hf_generate_peer.py -> hf_generate_peer.json (~60 s; HF_PEER_ARGS)
# and prints their tables after the summary. `peers` runs only the peers (no
# binaries or model needed: nothing to carry but the checkout).
#   usage: [PEERS=1] scripts/device/engine.sh [tests|cli|bench|breakdown|all|peers] [max_tokens]
set -u
# .devcarry/lib: the shared libraries futr links that the GPU machine lacks
# (cpp-httplib, prometheus-cpp, brotli), copied from this machine's Debian packages.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/engine_out}
mkdir -p "$OUT" models
MODE=${1:-all}
NTOK=${2:-32768}
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
. "$(dirname "$0")/common.sh"  # step, engine_setup
[[ $MODE == peers ]] || engine_setup  # M, B
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$SUM"

STEP_GREP='PASSED|FAILED|largest|perplexity kv|"ppl"|Paris|futr: engine|\| (decode|tg[0-9]|pp[0-9])|step peer:|generate peer:|PEER ERROR'

if [[ $MODE == all || $MODE == tests ]]; then
  step logits_reduce_test 120 "$B/logits_reduce_test"
  step gpu_engine_test 400 "$B/gpu_engine_test"
fi
if [[ $MODE == all || $MODE == bench ]]; then
  step bench_smollm2_gpu 300 "$B/futr" bench --model "$M" --backend gpu -p 128 -n 64 -b 1,16,32 --ctx-list 0,1024 \
    -r 3 --json "$OUT/bench_smollm2_gpu.json"
  step bench_smollm2_gpu_eager 300 "$B/futr" bench --model "$M" --backend gpu --graphs 0 -p 0 -n 64 -b 1,16 \
    --ctx-list 1024 -r 3 --json "$OUT/bench_smollm2_gpu_eager.json"
  for s in ${SYNTHETIC:-llama-3.2-1b llama-3.1-8b llama-3.1-70b}; do
    step "bench_${s}_gpu" 400 "$B/futr" bench --synthetic "$s" --backend gpu -p 0 -n 32 -b 1,16,32 --ctx-list 0,1024 \
      -r 3 --json "$OUT/bench_${s}.json"
  done
fi
if [[ $MODE == breakdown ]]; then
  for who in smollm2 llama-3.1-8b; do
    if [[ $who == smollm2 ]]; then src=(--model "$M"); else src=(--synthetic "$who"); fi
    timeout 300 "$B/futr" bench "${src[@]}" --backend gpu -p 0 -n 0 -b 1,16 --ctx-list 1024 -r 3 \
      --steps 32 --breakdown --json "$OUT/bench_breakdown_${who}.json" > "$OUT/bench_breakdown_${who}.md" 2>&1
    echo "breakdown_${who} rc=$?" >> "$SUM"
    step "nopdl_${who}" 300 "$B/futr" bench "${src[@]}" --backend gpu --pdl 0 -p 0 -n 0 -b 1,16 --ctx-list 1024 \
      -r 3 --steps 32 --json "$OUT/bench_nopdl_${who}.json"
  done
  for f in "$OUT"/bench_breakdown_*.md; do echo "== $f" >> "$SUM"; grep -E "^\| |sum of|breakdown" "$f" >> "$SUM"; done
  for f in "$OUT"/bench_nopdl_*.json; do
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); [print(sys.argv[1].split('/')[-1], r['batch'], r['ctx'], round(r['ms_per_step']['mean'],4)) for r in j['results']]" "$f" >> "$SUM"
  done
fi
RUN_PEERS=
[[ $MODE == peers || ( -n ${PEERS:-} && ( $MODE == all || $MODE == bench || $MODE == breakdown ) ) ]] && RUN_PEERS=1
if [[ -n $RUN_PEERS ]]; then
  export PYTHONUNBUFFERED=1
  step torch_step_peer 300 python3 bench/peers/torch_step_peer.py --out "$OUT/torch_step_peer.json" ${TORCH_PEER_ARGS:-}
  step hf_generate_peer 240 python3 bench/peers/hf_generate_peer.py --out "$OUT/hf_generate_peer.json" ${HF_PEER_ARGS:-}
fi
if [[ $MODE == all || $MODE == cli ]]; then
  P="The capital of France is"
  step gen_gpu 120 "$B/futr" generate --model "$M" --backend gpu --temperature 0 -n 48 "$P"
  [ -n "${SKIP_CPU_PPL:-}" ] || step gen_cpu 120 "$B/futr" generate --model "$M" --backend cpu --weights int4 --temperature 0 -n 48 "$P"
  for kv in bf16 int4 int4-rot; do
    step "ppl_gpu_$kv" 300 "$B/futr" perplexity --model "$M" .devcarry/wiki.test.raw --backend gpu --weights int4 \
      --kv "$kv" --ctx 1024 --max-tokens "$NTOK" --json -q
    [ -n "${SKIP_CPU_PPL:-}" ] || step "ppl_cpu_$kv" 300 "$B/futr" perplexity --model "$M" .devcarry/wiki.test.raw --backend cpu --weights int4 \
      --kv "$kv" --ctx 1024 --max-tokens "$NTOK" --json -q
  done
  grep -h -A1 "===== ppl_" "$LOG" | head -40 > "$OUT/ppl.txt"
fi
echo "----- failures"
grep -E "FAILED|Failure|error:|Error" "$LOG" | head -20
echo "----- summary"
cat "$SUM"
if [[ -n $RUN_PEERS ]]; then
  echo "----- peers (full decode step; HF generate)"
  awk '/^===== /{p = ($2 == "torch_step_peer:" || $2 == "hf_generate_peer:")} p && /^\|/' "$LOG"
fi
