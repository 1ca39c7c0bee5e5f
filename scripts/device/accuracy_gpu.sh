#!/usr/bin/env bash
# The GPU half of issue 10's accuracy matrix, the CPU half computed on the
# development machine (docs/DEVICE.md): for each .devcarry/klb*/<quant>_<kv>.klb
# (the CPU reference's top-32 distributions over the first NTOK tokens of
# wiki.test.raw at ctx 1024, in pieces of 32 tokens, INT4 weights quantized on
# load from the GGUF with --quant <quant>), `futr perplexity --backend gpu
# --prefill=off` on the same weights and KV format compares with it (KL, top-1
# agreement, delta ppl). Then, where time is left: `futr generate`'s time to
# first token and `futr bench --breakdown` of the prefill path (SmolLM2, and
# the synthetic 8B at 2048 prompt tokens), and gpu_prefill_test where carried.
# Outputs under $OUT; a summary last.
# GPTQ rows: the `.futr` file made here (futr quantize) travels xz-compressed
# in parts (.devcarry/g1..g3/*, joined in order) with its bases xz-compressed
# (.devcarry/gk*/gptq_<kv>.klb.xz, a call each where the carry limit asks); a gptq_* base then runs on that file.
#   usage: [NTOK=32768] [KL_ONLY=1] scripts/device/accuracy_gpu.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/accuracy_gpu_out}
NTOK=${NTOK:-32768}
mkdir -p "$OUT" models .devcarry/run
M=models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -s "$M" ] || cat .devcarry/m1/* .devcarry/m2/* .devcarry/m3/* > "$M"
sha256sum "$M" | cut -c1-16
xz -dc .devcarry/e/futr.xz > .devcarry/run/futr && chmod +x .devcarry/run/futr
F=.devcarry/run/futr
G=.devcarry/run/gptq.futr
if ls .devcarry/g1/* > /dev/null 2>&1 && [ ! -s "$G" ]; then
  cat .devcarry/g1/* .devcarry/g2/* .devcarry/g3/* | xz -dc > "$G" || rm -f "$G"
fi
mkdir -p .devcarry/klbg
for z in .devcarry/gk*/*.klb.xz; do [ -e "$z" ] && xz -dc "$z" > .devcarry/klbg/$(basename "$z" .xz); done
T=.devcarry/wiki.test.raw
[ -s "$T" ] || T=data/wikitext-2-raw/wiki.test.raw
for klb in .devcarry/klb*/*.klb; do
  n=$(basename "$klb" .klb)
  q=${n%%_*}
  kv=${n#*_}
  src=(-m "$M" --weights int4 --quant "$q")
  [ "$q" = gptq ] && { [ -s "$G" ] || continue; src=(-m "$G"); }
  [ -e ".devcarry/run/done_$n" ] && continue  # measured by an earlier call on this machine
  timeout 120 $F perplexity "$T" "${src[@]}" --backend gpu --prefill=off --kv "$kv" \
    --ctx 1024 --max-tokens "$NTOK" --json -q --kl-base "$klb" > "$OUT/gpu_$n.json" 2> "$OUT/gpu_$n.err"
  rc=$?
  [ $rc = 0 ] && touch ".devcarry/run/done_$n"
  echo "gpu_$n rc=$rc $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("ppl", round(j["ppl"], 5), "delta", j.get("ppl_delta"), "kl", j.get("kl_mean"), "top1", j.get("top1_agreement"))' "$OUT/gpu_$n.json" 2>/dev/null)" | tee -a "$OUT/summary.txt"
done
[ "${KL_ONLY:-0}" = 1 ] && { cat "$OUT/summary.txt"; exit 0; }
timeout 60 $F generate -m "$M" --backend gpu -n 16 --temperature 0 "The history of the Roman Empire begins with" \
  > "$OUT/generate.txt" 2>&1
grep -E "load|first token|prompt" "$OUT/generate.txt" | tee -a "$OUT/summary.txt"
timeout 60 $F bench -m "$M" --backend gpu -p 512,2048 -n 0 -r 3 --breakdown > "$OUT/breakdown_smollm2.md" 2>&1
timeout 90 $F bench --synthetic llama-3.1-8b --backend gpu -p 2048 -n 0 -r 2 --breakdown > "$OUT/breakdown_8b.md" 2>&1
cat "$OUT/breakdown_smollm2.md" "$OUT/breakdown_8b.md" | grep -E "^\||^breakdown|^sum" | head -60
if [ -s .devcarry/e/gpu_prefill_test.xz ]; then  # the prefill tests at this commit, where carried
  xz -dc .devcarry/e/gpu_prefill_test.xz > .devcarry/run/gpu_prefill_test && chmod +x .devcarry/run/gpu_prefill_test
  [ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
  timeout 150 .devcarry/run/gpu_prefill_test > "$OUT/gpu_prefill_test.txt" 2>&1
  echo "gpu_prefill_test rc=$? $(grep -E 'PASSED|FAILED' "$OUT/gpu_prefill_test.txt" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
fi
cat "$OUT/summary.txt"
