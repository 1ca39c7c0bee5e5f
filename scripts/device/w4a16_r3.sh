#!/usr/bin/env bash
# Issue 11 round 3 on the GPU machine, one call: the stream-K gemv (sm90_w4a16_sk,
# M <= 8) against the heuristic's gemv / skinny kernels and the no-compute
# floor, then inside the decode step of the GPU engine.
#   1. w4a16_test (every variant, sk with SwiGLU input; SKIP_TESTS=1 skips it);
#      with SAN=1 memcheck / racecheck / synccheck on the small set (W4A16Small*: sk included);
#   2. w4a16_bench --m 1,2,4,8 on the 8B, 70B and SmolLM2 shapes: the heuristic,
#      then each of CONFIGS (default: sk variants, and sk without its epilogue,
#      probe=1); floor in the same run (bench_<i>.json);
#   3. futr bench --synthetic (8B, SmolLM2 shapes) at batch 1, 4, 8, ctx 1024,
#      with the heuristic and with FUTR_DECODE_CONFIG_M8=<each of ENGINE_CONFIGS>.
# NCU_TARGETS adds ncu of single launches; SKIP_ENGINE=1 skips step 3.
# Binaries: .devcarry/bin/{w4a16_test,w4a16_bench,futr}.xz (docs/DEVICE.md).
# Results in $OUT, a summary last.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
OUT=${OUT:-/tmp/r3_out}
mkdir -p "$OUT" .devcarry/run
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
STEP_GREP='PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|\| (decode|tg)'
. "$(dirname "$0")/common.sh"
for z in .devcarry/bin/*.xz; do xz -dc "$z" > ".devcarry/run/$(basename "$z" .xz)" && chmod +x ".devcarry/run/$(basename "$z" .xz)"; done
B=.devcarry/run
[ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$SUM"
CONFIGS=${CONFIGS:-"kernel=sk,loads=4 kernel=sk,loads=4,batches=2 kernel=sk,loads=2 kernel=sk,loads=4,probe=1"}
ENGINE_CONFIGS=${ENGINE_CONFIGS:-"kernel=sk,loads=4 kernel=sk,loads=4,batches=2"}
MODELS=${MODELS:-Llama-3.1-8B,Llama-3.1-70B,SmolLM2-135M}
if [[ -z ${SKIP_TESTS:-} ]]; then
  step w4a16_test 300 "$B/w4a16_test"
fi
if [[ -n ${SAN:-} ]]; then
  step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/w4a16_test" --gtest_filter='W4A16Small*'
  step racecheck 150 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/w4a16_test" --gtest_filter='W4A16Small.*'
  step synccheck 150 compute-sanitizer --tool synccheck --error-exitcode 3 "$B/w4a16_test" --gtest_filter='W4A16Small*'
fi
i=0
step bench_0 200 "$B/w4a16_bench" --models "$MODELS" --m 1,2,4,8 --reps 20 --json "$OUT/bench_0.json"
for c in $CONFIGS; do
  i=$((i + 1))
  step "bench_$i" 200 "$B/w4a16_bench" --models "$MODELS" --m 1,2,4,8 --reps 20 --config "$c" --json "$OUT/bench_$i.json"
done
# ncu of single launches: NCU_TARGETS="MODEL:PROJ:M|config ..." (config "-" = the heuristic).
for t in ${NCU_TARGETS:-}; do
  tgt=${t%%|*} cfg=${t#*|}
  args=(--only "$tgt")
  [[ $cfg == - ]] || args+=(--config "$cfg")
  step "ncu_${tgt//:/_}_${cfg//[=,]/_}" 120 ncu --clock-control none -k regex:sm90_w4a16 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
    --metrics smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio,smsp__warps_active.avg.per_cycle_active,dram__bytes_read.sum.per_second \
    "$B/w4a16_bench" "${args[@]}"
done
[[ -n ${SKIP_ENGINE:-} ]] && ENGINE_MODELS="" || ENGINE_MODELS="llama-3.1-8b smollm2-135m"
for s in $ENGINE_MODELS; do
  step "engine_${s}_heur" 200 "$B/futr" bench --synthetic "$s" --backend gpu -p 0 -n 0 -b 1,4,8 --ctx-list 1024 -r 3 \
    --steps 32 --json "$OUT/engine_${s}_heur.json"
  e=0
  for c in $ENGINE_CONFIGS; do
    e=$((e + 1))
    step "engine_${s}_c$e" 200 env FUTR_DECODE_CONFIG_M8="$c" "$B/futr" bench --synthetic "$s" --backend gpu -p 0 -n 0 \
      -b 1,4,8 --ctx-list 1024 -r 3 --steps 32 --json "$OUT/engine_${s}_c$e.json"
  done
done
{
  echo "----- per projection / layer (us): config, int4, floor, x floor"
  for f in "$OUT"/bench_*.json; do
    python3 - "$f" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
rows = j.get("rows") or j.get("results") or []
for r in rows:
    if "int4 us" not in r or r.get("int4 us") is None: continue
    print(sys.argv[1].split("/")[-1], r.get("model"), r.get("proj"), "M=%s" % r.get("M"), r.get("config"),
          "%.2f" % r["int4 us"], "floor %.2f" % (r.get("floor us") or 0), "x%.3f" % (r.get("x floor") or 0))
PY
  done
  echo "----- engine (ms per step)"
  for f in "$OUT"/engine_*.json; do
    python3 -c "import json,sys; j=json.load(open(sys.argv[1])); [print(sys.argv[1].split('/')[-1], r['batch'], r['ctx'], round(r['ms_per_step']['mean'],4)) for r in j['results']]" "$f"
  done
} > "$OUT/table.txt" 2>&1
echo "----- failures"
grep -E "FAILED|Failure|error:|Error" "$LOG" | head -20
echo "----- summary"
cat "$SUM"
grep -E "M=1 |layer, PDL" "$OUT/table.txt" | head -120
grep -A20 "engine (ms" "$OUT/table.txt"
cd "$OUT" && tar czf /tmp/r3.tgz . && mv /tmp/r3.tgz "$OUT/r3.tgz"
