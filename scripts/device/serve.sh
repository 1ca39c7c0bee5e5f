#!/usr/bin/env bash
# Issue 13 on the GPU machine: the `futr serve` load row of docs/PERF.md
# ("Server") on the GPU engine. Starts `futr serve --backend gpu` on
# SmolLM2-135M-Instruct with 32 sequences decoded at once and runs
# bench/serve_load.py against it: 128 streaming /v1/completions, 32 at a
# time, greedy, max_tokens 128, prompts of 4-24 words; TTFT and TPOT p50/p99,
# generated tokens/s. The GPU machine has no `openai` package, so serve_load
# uses its standard-library client there (--client raw; it says so).
# Results go to $OUT:
#   logs.txt             every step's output
#   serve_load_gpu.json  serve_load's results (bench/results/ when committed)
#   serve_gpu.log        the server's own log (one line per request)
# and the table row is printed last.
#
# What travels is what engine.sh needs (docs/DEVICE.md): the model in three
# parts (.devcarry/m1, m2, m3; joined once per warm machine), futr as
# .devcarry/bin/futr.xz, its shared libraries in .devcarry/lib.
#   usage: scripts/device/serve.sh [requests] [concurrency] [max_tokens]
#   env:   MAX_SEQS (32), CTX (1024), BACKEND (gpu; cpu for a check on a
#          machine without a GPU), SERVE_ARGS (more `futr serve` flags),
#          CLIENT (auto|raw|openai), OUT
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/serve_out}
mkdir -p "$OUT"
N=${1:-128}
C=${2:-32}
NTOK=${3:-128}
MAX_SEQS=${MAX_SEQS:-32}
CTX=${CTX:-1024}
BACKEND=${BACKEND:-gpu}
LOG=$OUT/logs.txt
SUM=$OUT/summary.txt
: > "$LOG"
: > "$SUM"
STEP_GREP='futr serve at|openai package|\| [0-9]|Error|error'
. "$(dirname "$0")/common.sh"  # step, engine_setup
engine_setup  # M, B
[ -x "$B/futr" ] || { echo "no futr in $B (carry .devcarry/bin/futr.xz)" | tee -a "$SUM"; exit 3; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | tee -a "$SUM"

# serve_load starts the server (--port 0), waits for "listening on", runs the
# load, then SIGTERM (drain) and waits for the server to exit.
step "serve_$BACKEND" 300 python3 bench/serve_load.py --futr "$B/futr" --client "${CLIENT:-auto}" \
  --requests "$N" --concurrency "$C" --max-tokens "$NTOK" --time-limit 240 \
  --json "$OUT/serve_load_$BACKEND.json" --server-log "$OUT/serve_$BACKEND.log" \
  -- --model "$M" --backend "$BACKEND" --max-seqs "$MAX_SEQS" --ctx "$CTX" ${SERVE_ARGS:-}
rc=$?

echo "----- server log (engine, sequences, last lines)"
grep -E "^futr serve: .* \| |sequences x" "$OUT/serve_$BACKEND.log" 2>/dev/null | head -3
echo "requests answered 200: $(grep -c 'POST /v1/completions 200' "$OUT/serve_$BACKEND.log" 2>/dev/null)"
tail -3 "$OUT/serve_$BACKEND.log" 2>/dev/null
echo "----- failures"
grep -E "FAILED|Traceback|error:|Error" "$LOG" | head -20
echo "----- summary"
cat "$SUM"
echo "----- serve load: futr serve --backend $BACKEND, SmolLM2-135M, --max-seqs $MAX_SEQS ($(git rev-parse --short HEAD 2>/dev/null))"
grep -E '^\|( requests|---| [0-9])' "$LOG" | tail -3
exit $rc
