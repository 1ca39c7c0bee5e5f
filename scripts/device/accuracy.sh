#!/usr/bin/env bash
# Issue 10's accuracy matrix on the GPU machine: `futr perplexity --backend gpu`
# against the CPU quantized reference on SmolLM2-135M, INT4 weights from two
# .futr files (RTN and the default GPTQ recipe, both quantized here on the
# machine's CPU) x KV bf16 / int4 / int4-rot, the first NTOK tokens of
# wiki.test.raw at ctx 1024, with the mean KL between the two engines.
#
# Per configuration: the CPU reference in pieces of 32 tokens (the pieces the
# GPU engine's step takes, so both engines see the same rows per step) saves
# its per-token top-32 distributions (--save-kl-base); the GPU run and a
# second CPU run in pieces of 512 tokens (the reference's default: only its
# FP32 summation order changes) compare with them (--kl-base): KL, top-1
# agreement, delta ppl. The second CPU run is the reference's own spread.
# CPU runs go side by side (THREADS each); each GPU run starts when its base
# exists. Files: $OUT/acc.tgz (JSON and logs); summary printed last.
# Resumable: .devcarry/acc/ keeps the .futr and .klb files of a warm machine,
# and a configuration whose JSON exists is skipped.
#   usage: [NTOK=32768] [THREADS=4] [CONFIGS="rtn:bf16 ..."] [SKIP_CPU512=1] scripts/device/accuracy.sh
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/accuracy_out}
mkdir -p "$OUT"
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
touch "$LOG" "$SUM"
. "$(dirname "$0")/common.sh"  # step, engine_setup
engine_setup                   # M, B
NTOK=${NTOK:-32768}
THREADS=${THREADS:-4}
A=.devcarry/acc
mkdir -p "$A"
TXT=.devcarry/wiki.test.raw
[ -s "$TXT" ] || TXT=data/wikitext-2-raw/wiki.test.raw
CONFIGS=${CONFIGS:-"rtn:bf16 rtn:int4 rtn:int4-rot gptq:bf16 gptq:int4 gptq:int4-rot"}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$SUM"
t0=$SECONDS

# ---- the .futr files --------------------------------------------------------
# Only the files CONFIGS names (GPTQ takes ~260 s on the machine's 12 threads).
if [[ " $CONFIGS" == *" rtn:"* ]]; then
  [ -s "$A/rtn.futr" ] || step quant_rtn 200 "$B/futr" quantize --model "$M" -o "$A/rtn.futr" --quant rtn -t 4 &
fi
if [[ " $CONFIGS" == *" gptq:"* ]]; then
  [ -s "$A/gptq.futr" ] || step quant_gptq 500 "$B/futr" quantize --model "$M" -o "$A/gptq.futr" -t 12 &
fi
wait
sha256sum "$A"/*.futr | tee -a "$SUM"

P=(perplexity "$TXT" --ctx 1024 --max-tokens "$NTOK" --json -q)
# run NAME LIMIT CMD...: stdout (the JSON) to $A/NAME.json, stderr to $OUT/NAME.err,
# one line to the summary. Skipped when $A/NAME.json exists.
run() {
  local name=$1 limit=$2 t=$SECONDS rc
  shift 2
  [ -s "$A/$name.json" ] && return 0
  timeout "$limit" "$@" > "$A/$name.json.tmp" 2> "$OUT/$name.err"
  rc=$?
  [ $rc = 0 ] && mv "$A/$name.json.tmp" "$A/$name.json"
  echo "$name rc=$rc $((SECONDS - t))s $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print("ppl", round(j["ppl"], 5), "kl", j.get("kl_mean"), "tok/s", round(j["tokens_per_second"]))' "$A/$name.json" 2>/dev/null) $(tail -2 "$OUT/$name.err" | tr '\n' ' ')" >> "$SUM"
  return $rc
}
cpu_base() {  # W KV: the reference in 32-token pieces, saving the KL base
  local n=${1}_${2}
  [ -s "$A/$n.klb" ] && return 0
  run "cpu32_$n" 560 "$B/futr" "${P[@]}" -m "$A/$1.futr" --backend cpu --kv "$2" -t "$THREADS" --batch 32 \
    --save-kl-base "$A/$n.klb.tmp" && mv "$A/$n.klb.tmp" "$A/$n.klb"
}
for c in $CONFIGS; do cpu_base "${c%%:*}" "${c##*:}" & done
(  # the GPU runs, one at a time, each once its base exists
  for c in $CONFIGS; do
    n=${c%%:*}_${c##*:}
    while [ ! -s "$A/$n.klb" ] && (( SECONDS - t0 < 560 )); do sleep 2; done
    [ -s "$A/$n.klb" ] && run "gpu_$n" 300 "$B/futr" "${P[@]}" -m "$A/${c%%:*}.futr" --backend gpu --kv "${c##*:}" \
      --kl-base "$A/$n.klb"
  done
) &
wait
if [ -z "${SKIP_CPU512:-}" ]; then  # the reference against itself: 512-token pieces
  for c in $CONFIGS; do
    n=${c%%:*}_${c##*:}
    [ -s "$A/$n.klb" ] && run "cpu512_$n" 560 "$B/futr" "${P[@]}" -m "$A/${c%%:*}.futr" --backend cpu --kv "${c##*:}" \
      -t "$THREADS" --batch 512 --kl-base "$A/$n.klb" &
  done
  wait
fi

# ---- the table ----------------------------------------------------------------
python3 - "$A" $CONFIGS <<'EOF' | tee "$OUT/table.md" | tee -a "$SUM"
import json, os, sys
d = sys.argv[1]
def load(name):
    p = os.path.join(d, name + ".json")
    try:
        return json.load(open(p))
    except Exception:
        return None
print("| weights | KV | CPU ppl (32-token pieces) | GPU ppl | GPU - CPU | mean NLL delta +- SE | KL(CPU || GPU) | top-1 agree | CPU 512 - CPU 32 | its NLL delta +- SE | KL(CPU || CPU 512) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for c in sys.argv[2:]:
    w, kv = c.split(":")
    n = f"{w}_{kv}"
    base, gpu, c512 = load("cpu32_" + n), load("gpu_" + n), load("cpu512_" + n)
    f = lambda j, k, fmt: (fmt % j[k]) if j and k in j else "-"
    bp = base["ppl"] if base else None
    dg = ("%+.5f" % (gpu["ppl"] - bp)) if gpu and bp else "-"
    dc = ("%+.5f" % (c512["ppl"] - bp)) if c512 and bp else "-"
    nd = lambda j: ("%+.6f +- %.6f" % (j["nll_delta"], j["nll_delta_stderr"])) if j and "nll_delta" in j else "-"
    print(f"| {w} | {kv} | {f(base,'ppl','%.5f')} | {f(gpu,'ppl','%.5f')} | {dg} | {nd(gpu)} | {f(gpu,'kl_mean','%.3e')} | "
          f"{f(gpu,'top1_agreement','%.4f')} | {dc} | {nd(c512)} | {f(c512,'kl_mean','%.3e')} |")
EOF
echo "accuracy: $((SECONDS - t0)) s" | tee -a "$SUM"
tar -czf /tmp/acc.tgz -C "$OUT" . -C "$PWD/$A" $(cd "$A" && ls *.json 2>/dev/null) 2>/dev/null
mv /tmp/acc.tgz "$OUT/"
echo "----- failures"
cat "$OUT"/*.err 2>/dev/null | grep -v "^$" | head -20
echo "----- summary"
cat "$SUM"
