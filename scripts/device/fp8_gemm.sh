#!/usr/bin/env bash
# FP8 prefill GEMM on the GPU machine (issue 5), from the repo root, with the
# binaries built here and carried in build-fp8/bin (docs/DEVICE.md):
#
#   scripts/device/fp8_gemm.sh [all|tests|sanitizer|bench|profile] [gtest filter]
#
# Steps (each under `timeout`, all inside one overall deadline so a hang
# cannot eat the call): SASS check (QGMMA/HGMMA in the kernels, no local
# memory), a smoke test (stops everything if the kernel hangs), the GPU tests,
# compute-sanitizer memcheck/racecheck/synccheck on the small-shape subset, the
# benchmark and its PyTorch peer (merged into fp8_gemm_h200.{json,md}).
# Logs and JSON go to $OUT (at most 8 files come back); a summary prints last.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
BIN=${FUTR_BIN:-build-fp8/bin}
OUT=${OUT:-/tmp/fp8_gemm_out}
mkdir -p "$OUT"
MODE=${1:-all}
FILTER=${2:-*}
BUDGET=${FP8_BUDGET_S:-560}   # seconds for the whole script
T0=$(date +%s)
SUMMARY=()

left() { echo $((BUDGET - ($(date +%s) - T0))); }
# step NAME MAX_SECONDS LOG cmd...: runs with min(MAX, time left - 15 s).
step() {
  local name=$1 max=$2 log=$3
  shift 3
  local t=$(( $(left) - 15 ))
  (( t > max )) && t=$max
  if (( t < 10 )); then SUMMARY+=("$name: skipped (no time left)"); return 99; fi
  local s=$(date +%s)
  echo "=== $name (timeout ${t}s): $*" >> "$log"
  timeout --kill-after=5 "$t" "$@" >> "$log" 2>&1
  local rc=$?
  SUMMARY+=("$name: rc=$rc in $(( $(date +%s) - s ))s$([ $rc = 124 ] && echo ' TIMEOUT')")
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader

# SASS: the main loops must be QGMMA (FP8) / HGMMA (BF16), no local memory.
{
  echo "kernels: $(cuobjdump --list-elf "$BIN/fp8_gemm_test" 2>/dev/null | wc -l) elf images"
  cuobjdump --dump-sass "$BIN/fp8_gemm_test" > /tmp/fp8.sass 2>&1
  awk '/Function :/{f=$3} /QGMMA|HGMMA/{g[f]++} /LDL|STL/{l[f]++} END{for (k in g) if (k ~ /sm90_gemm_kernel/) printf "%4d GMMA %3d LDL/STL  %s\n", g[k], l[k]+0, substr(k,1,160)}' /tmp/fp8.sass
  grep -m3 -E "QGMMA|HGMMA" /tmp/fp8.sass
} > "$OUT/sass.txt" 2>&1
SUMMARY+=("sass: $(grep -c GMMA "$OUT/sass.txt") kernel lines with GMMA; LDL/STL in gemm kernels: $(awk '{s+=$3} END{print s+0}' "$OUT/sass.txt")")

if [[ $MODE == all || $MODE == tests ]]; then
  step smoke 60 "$OUT/tests.log" "$BIN/fp8_gemm_test" --gtest_filter='Fp8GemmArgs.*:Fp8GemmVariants.*:Fp8GemmSanitizer.*'
  rc=$?
  if [[ $rc == 124 || $rc == 137 ]]; then echo "smoke test timed out: kernel hang? stopping"; MODE=none; fi
  [[ $MODE != none ]] && step tests 240 "$OUT/tests.log" "$BIN/fp8_gemm_test" --gtest_filter="Fp8Gemm.$FILTER"
fi
if [[ $MODE == all || $MODE == sanitizer ]]; then
  for tool in memcheck synccheck racecheck; do
    step "$tool" 100 "$OUT/sanitizer.log" compute-sanitizer --tool "$tool" --error-exitcode 3 \
      "$BIN/fp8_gemm_test" --gtest_filter='Fp8GemmSanitizer.*'
  done
fi
if [[ $MODE == all || $MODE == bench ]]; then
  step bench 240 "$OUT/bench.log" "$BIN/fp8_gemm_bench" --compare-schedules --json "$OUT/ours.json" ${FP8_BENCH_ARGS:-}
  if [[ ${FP8_TUNE:-1} == 1 ]]; then  # sensitivity on 8B shapes (markdown only, in bench.log)
    step "tune residual without L2 prefetch" 40 "$OUT/bench.log" "$BIN/fp8_gemm_bench" --models 8b \
      --proj o,down --m 8192 --no-lt --res-pad 4
    step "tune group-m 16" 40 "$OUT/bench.log" "$BIN/fp8_gemm_bench" --models 8b --proj gateup,down,o \
      --m 2048,8192 --no-lt --group-m 16
  fi
  if [[ -s $OUT/ours.json && ${FP8_PEER:-1} == 1 ]]; then  # FP8_PEER=0: no torch.compile peer (minutes)
    step bench_bf16 60 "$OUT/bench.log" "$BIN/fp8_gemm_bench" --bf16 --models 8b --m 8192 --json /tmp/bf16.json
    step peer 300 "$OUT/bench.log" python3 bench/peers/torch_prefill_peer.py --ours "$OUT/ours.json" \
      --bf16 /tmp/bf16.json --out "$OUT/fp8_gemm_h200.json" --md "$OUT/fp8_gemm_h200.md" --peer-json "$OUT/peer.json"
  fi
fi
if [[ $MODE == profile ]]; then
  # Nsight Compute on one launch of chosen kernels (ping-pong plain, residual,
  # SwiGLU): stall reasons per SASS instruction, to see where epilogues wait.
  for spec in "plain:o:8192:ScheduleE1EEENS0_3epi5ChainIJNS6_8ColScaleENS6_9StoreBf16" \
              "residual:o:8192:ScheduleE1EEENS0_3epi5ChainIJNS6_8ColScaleENS6_11AddResidual" \
              "swiglu:gateup:2048:ScheduleE1EEENS0_3epi5ChainIJNS6_8ColScaleENS6_9SwiGluFp8"; do
    IFS=: read -r name proj m rx <<< "$spec"
    step "ncu $name" 150 "$OUT/profile.log" ncu --clock-control none --kernel-name-base mangled --kernel-name "regex:$rx" --launch-skip 3 \
      --launch-count 1 --set full --import-source no --export "/tmp/$name" --force-overwrite \
      "$BIN/fp8_gemm_bench" --models 8b --proj "$proj" --m "$m" --no-lt --reps 10
    ncu --import "/tmp/$name.ncu-rep" --page details > "$OUT/${name}_details.txt" 2>&1
    ncu --import "/tmp/$name.ncu-rep" --page source --csv --print-source sass > "/tmp/${name}_src.csv" 2>&1
    python3 - "/tmp/${name}_src.csv" >> "$OUT/${name}_details.txt" 2>&1 <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr_i = next(i for i, r in enumerate(rows) if any("Source" == c.strip() for c in r))
hdr, body = rows[hdr_i], rows[hdr_i + 1:]
def col(name):
    return next((i for i, h in enumerate(hdr) if name in h), None)
samp = col("Warp Stall Sampling (All")
src = col("Source")
stall_cols = [i for i, h in enumerate(hdr) if h.startswith("stall_") or "Stall" in h]
def num(x):
    try: return float(x.replace(",", ""))
    except Exception: return 0.0
total = sum(num(r[samp]) for r in body if len(r) > samp) or 1.0
print("\n=== top SASS instructions by warp stall samples (of %d)" % total)
for r in sorted(body, key=lambda r: -num(r[samp]) if len(r) > samp else 0)[:30]:
    det = sorted(((num(r[i]), hdr[i]) for i in stall_cols if i != samp and len(r) > i and num(r[i]) > 0), reverse=True)[:3]
    print("%5.1f%%  %-60s %s" % (100 * num(r[samp]) / total, r[src][:60], ", ".join("%s=%g" % (h, v) for v, h in det)))
PY
  done
fi

echo
echo "================ summary ($(( $(date +%s) - T0 ))s)"
printf '%s\n' "${SUMMARY[@]}"
cat "$OUT/sass.txt" | head -14
if [[ -f $OUT/tests.log ]]; then
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |DIAG|Failure|\[observed\]|error" "$OUT/tests.log" | grep -v "^\[  SKIPPED \] Fp8Gemm\." | head -60
fi
[[ -f $OUT/sanitizer.log ]] && grep -E "ERROR SUMMARY|RACECHECK SUMMARY|=== |\[  (PASSED|FAILED)" "$OUT/sanitizer.log" | head -20
[[ -f $OUT/bench.log ]] && sed -n '/=== tune/,/=== peer/p' "$OUT/bench.log" | grep -E "^=== tune|^\| 8b" | cut -d'|' -f1-11,16-17 | head -30
[[ -f $OUT/fp8_gemm_h200.md ]] && cat "$OUT/fp8_gemm_h200.md"
[[ ! -f $OUT/fp8_gemm_h200.md && -f $OUT/bench.log ]] && tail -40 "$OUT/bench.log"
for f in "$OUT"/*_details.txt; do
  [[ -f $f ]] || continue
  echo "--- $f"
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Compute \(SM\) Throughput|Memory Throughput|stalled|Stall" "$f" | head -14
  sed -n '/=== top SASS/,$p' "$f" | head -22
done
exit 0
