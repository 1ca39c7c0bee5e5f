#!/usr/bin/env bash
# Runs the README's commands, in the README's order, in a fresh clone of this
# repository in DIR/futr (with no DIR/shared, the clone has no ../shared: what
# a new user has), and records each command's exit status, wall time and last
# lines in DIR/readme-check.log; a summary table is printed last: in a fresh
# clone in a temporary directory with no ../shared, the README's commands all
# work. The README's order, except that the two test commands run last.
#
#   usage: scripts/readme-check.sh DIR [--skip-tests] [--skip-slow]
#     --skip-tests  leaves out scripts/test.sh and scripts/test-sanitize.sh
#     --skip-slow   leaves out the calibrated `futr quantize` (14-17 min on two
#                   cores) and the 65k-token perplexity pair
# Interactive commands get their input from a pipe (`futr chat`: one turn,
# then /exit; `futr generate` reading stdin). `futr serve` is started on a
# free port, asked the README's three requests, and stopped with SIGTERM.
set -uo pipefail
DIR=${1:?usage: scripts/readme-check.sh DIR [--skip-tests] [--skip-slow]}
shift
SKIP_TESTS= SKIP_SLOW=
for a in "$@"; do
  case $a in
    --skip-tests) SKIP_TESTS=1 ;;
    --skip-slow) SKIP_SLOW=1 ;;
    *) echo "readme-check: unknown option $a" >&2; exit 2 ;;
  esac
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
# The clone is DIR/futr: its ../shared is DIR/shared.
[ -e "$DIR/shared" ] && echo "readme-check: note: $DIR/shared exists beside the clone (a fresh machine has none)" >&2
rm -rf "$DIR/futr"
git clone -q "$SRC" "$DIR/futr" || exit 1
cd "$DIR/futr"
LOG=$DIR/readme-check.log
: > "$LOG"
ROWS=()
run() {  # run NAME CMD... (through bash -c, so pipes work)
  local name=$1 t0=$SECONDS rc
  shift
  echo "===== $name: $*" >> "$LOG"
  bash -c "$*" >> "$LOG" 2>&1
  rc=$?
  ROWS+=("| $name | $rc | $((SECONDS - t0)) s |")
  echo "----- $name: rc=$rc $((SECONDS - t0)) s" >> "$LOG"
  return $rc
}
run setup scripts/setup.sh
run version "build/bin/futr --version"
run install "cmake --install build --prefix $DIR/prefix > /dev/null && $DIR/prefix/bin/futr --version"
run generate-sampled 'build/bin/futr generate "Once upon a time" --max-tokens 64 --temperature 0.7 --top-p 0.9 --seed 1'
run generate-chat 'build/bin/futr generate --chat "What is the capital of France?"'
run chat "printf 'What is the capital of France?\n/reset\nHello\n/exit\n' | build/bin/futr chat"
run generate-controls 'build/bin/futr generate "Once upon a time" --min-p 0.05 --repetition-penalty 1.1 --stop "The End"'
run generate-stdin 'echo "The history of" | build/bin/futr generate'
run perplexity "build/bin/futr perplexity --ctx 1024 --max-tokens 20000"
run info "build/bin/futr info"
run bench "build/bin/futr bench -p 512 -n 128 -b 1,16,32 --ctx-list 0,1024 -r 3"
# The synthetic 8B line needs a Hopper GPU: without one it must be refused clearly (rc 1).
run bench-synthetic-gpu "build/bin/futr bench --synthetic llama-3.1-8b --backend gpu -p 0 -b 1,16 --ctx-list 1024"
if [[ -z $SKIP_SLOW ]]; then
  run quantize-default "build/bin/futr quantize -o smollm2-int4.futr"
fi
run quantize-rtn "build/bin/futr quantize -o smollm2-rtn.futr --quant rtn"
run quantize-fp8 "build/bin/futr quantize -o smollm2-fp8.futr --weights fp8"
Q=smollm2-int4.futr
[[ -n $SKIP_SLOW ]] && Q=smollm2-rtn.futr
if [[ -z $SKIP_SLOW ]]; then
  run ppl-base "build/bin/futr perplexity --max-tokens 65536 --weights bf16 --save-kl-base base.klb"
  run ppl-int4-kl "build/bin/futr perplexity --max-tokens 65536 -m $Q --kv int4-rot --kl-base base.klb"
fi
run generate-futr "build/bin/futr generate -m $Q --kv int4-rot \"The capital of France is\""
PORT=$((20000 + RANDOM % 20000))
run serve "build/bin/futr serve --port $PORT & pid=\$!; \
  for i in \$(seq 100); do curl -sf http://127.0.0.1:$PORT/health > /dev/null && break; sleep 0.2; done; \
  curl -sf http://127.0.0.1:$PORT/v1/chat/completions -H 'Content-Type: application/json' -d '{\"model\": \"SmolLM2-135M-Instruct.Q4_1\", \"messages\": [{\"role\": \"user\", \"content\": \"What is the capital of France?\"}], \"max_tokens\": 32, \"temperature\": 0}' && echo && \
  curl -sfN http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' -d '{\"model\": \"SmolLM2-135M-Instruct.Q4_1\", \"prompt\": \"Once upon a time\", \"max_tokens\": 32, \"stream\": true}' | tail -3 && \
  curl -sf http://127.0.0.1:$PORT/metrics | grep -c ^futr_; rc=\$?; kill -TERM \$pid; wait \$pid; exit \$rc"
# The test commands last (the longest: ~16 + ~14 min on two cores with a warm ccache).
if [[ -z $SKIP_TESTS ]]; then
  run test scripts/test.sh
  run test-sanitize "FUTR_CUDA=OFF scripts/test-sanitize.sh"
  grep -E "tests passed|Skipped|SKIPPED" "$LOG" | sort | uniq -c | head -20 >> "$LOG"
fi
echo "| command | rc | time |"
echo "|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo "(log: $LOG)"
