#!/usr/bin/env bash
# The GPU check: every GPU test, compute-sanitizer on the small kernel test
# sets, and the benchmarks with their peers and floors, on a machine with a
# Hopper GPU (H100 / H200) and the repository built by scripts/build.sh.
#
#   scripts/gpu-check.sh [--tests-only | --benchmarks-only | --only STEP[,STEP...]]
#                        [--quick] [--out DIR] [--build DIR] [--model FILE]
#                        [--no-sanitizer] [--no-peers] [--jobs N]
#   scripts/gpu-check.sh --list
#
#   --tests-only       the GPU tests and the sanitizers; no benchmark
#   --benchmarks-only  the benchmarks and their peers; no test, no sanitizer
#   --only STEPS       only the named steps (comma-separated, or --only again)
#   --list             the steps in order: name, kind, time limit, what it runs
#   --quick            a subset: the kernel tests (not the engine tests, which
#                      run a CPU reference of the model first), memcheck only, the
#                      kernel benchmarks on the 8B shapes and the decode step;
#                      no PyTorch peer that compiles (torch.compile takes minutes)
#   --out DIR          results folder (default gpu-check-results/), created
#   --build DIR        the build folder (default build/)
#   --model FILE       the model of the engine rows (default: the one
#                      scripts/fetch-model.sh places in models/, fetched if missing)
#   --no-sanitizer     skip compute-sanitizer
#   --no-peers         skip the PyTorch peers
#   --jobs N           GPU tests run N at a time (default: a quarter of the CPU
#                      cores, 1 to 4), sharing the GPU; each one's CPU reference
#                      runs on its share of the cores (OMP_NUM_THREADS = cores / N
#                      unless set)
#
# Each step runs under a time limit; its output goes to DIR/logs/NAME.txt,
# benchmarks write DIR/NAME.json (and the markdown table they print to
# DIR/NAME.md). The PyTorch peers run only where `python3 -c "import torch"`
# works with a GPU; otherwise each is skipped with the reason.
#
# Parts: runs into the same --out folder combine into one summary. Each step
# that runs keeps its rows in DIR/rows/STEP.row (replacing that step's rows of
# an earlier part; a step cut off keeps an INTERRUPTED row), and DIR/summary.md
# is rebuilt from the rows of every part, in step order, with the parts and the
# steps no part has run yet; it is printed last. For a check from scratch, use
# a new or empty folder. Exit status: 1 if a test or sanitizer row of the
# combined summary did not pass (one of an earlier part too), else 0 (a
# benchmark that fails is reported in the table, not in the status).
#
# Long steps (on an H200 with 16 cores): gpu_engine_tests (~3 minutes with
# --jobs 4, ~10 one at a time; limit 3000 s: the CPU reference of every engine
# test) and the torch.compile peers torch_step_peer (~6 minutes),
# torch_prefill_model_peer (~4) and torch_prefill_peer (~1). Where a command
# may run only 10 minutes, give the first two peers and the engine tests a
# part each (--only STEP) and group the other steps into parts (--list gives
# each step's limit).
# shellcheck disable=SC2054  # commas inside flag values (-b 1,16,32), not separators
set -u
cd "$(dirname "$0")/.." || exit 2

# The steps, in the order they run: name|kind|time limit|what it runs. A test
# step that fails fails the check; a bench step is reported only. A step may
# write several rows (the sanitizer one per set and tool, a benchmark its peer's
# row too). Keep the limits here in step with the run calls below.
STEPS=(
  "gpu_kernel_tests|test|1200 s|ctest -L gpu -LE engine: the kernels through their launchers against their references"
  "gpu_engine_tests|test|3000 s|ctest -L gpu_engine: the GPU engine against the CPU quantized reference (not with --quick)"
  "server_determinism_gpu|test|900 s|server_determinism_test on the GPU engine (not with --quick)"
  "server_speculative_gpu|test|900 s|server_speculative_test on the GPU engine (not with --quick)"
  "sanitizer|test|600 s a run|compute-sanitizer memcheck, racecheck, synccheck on 7 small sets (--quick: memcheck)"
  "ceilings|bench|300 s|ceilings_bench: the copy and GEMM ceilings of this GPU"
  "w4a16|bench|600+900 s|torch_decode_peer.py, then w4a16_bench (decode GEMMs, INT4 weights)"
  "decode_attention|bench|600+600 s|torch_attention_peer.py, then decode_attention_bench"
  "lm_head|bench|600 s|lm_head_bench (against cuBLASLt and the floor)"
  "persistent_step|bench|300 s|persistent_step_bench --breakdown (the projection chain)"
  "fp8_gemm|bench|900 s|fp8_gemm_bench --compare-schedules (FP8 prefill GEMM, against cuBLASLt)"
  "torch_prefill_peer|bench|900 s|LONG: torch_prefill_peer.py, torch.compile of the fused epilogues (not with --quick)"
  "prefill_attention|bench|600+600 s|torch_prefill_attention_peer.py, then prefill_attention_bench"
  "decode_step_smollm2|bench|600 s|futr bench: the decode step on the model"
  "ttft_smollm2|bench|600 s|futr bench: the time to first token on the model"
  "decode_step_8b|bench|600 s|futr bench: the decode step on the synthetic Llama-3.1-8B"
  "ttft_8b|bench|600 s|futr bench: the time to first token on the synthetic Llama-3.1-8B"
  "torch_step_peer|bench|900 s|LONG: torch_step_peer.py --mode compile, the compiled decode step (not with --quick)"
  "torch_prefill_model_peer|bench|600 s|LONG: torch_prefill_model_peer.py, the compiled layer and model (not with --quick)"
  "serve|bench|600 s|bench/serve_load.py: 128 streaming requests, 32 at a time (not with --quick)"
  "speculative|bench|600 s|bench/speculative_generate.py: batch 1, drafts off vs on, per workload (not with --quick)"
  "perplexity_decode|bench|600 s|futr perplexity, decode path, 32,768 tokens of WikiText-2 (not with --quick)"
  "perplexity_prefill|bench|600 s|futr perplexity, FP8 prefill path, the same tokens (not with --quick)"
)
STEP_NAMES=()
for s in "${STEPS[@]}"; do STEP_NAMES+=("${s%%|*}"); done
step_kind() { local s; for s in "${STEPS[@]}"; do [[ $s == "$1|"* ]] && { s=${s#*|}; echo "${s%%|*}"; return; }; done; }
list_steps() {
  local s n k l d
  for s in "${STEPS[@]}"; do
    IFS='|' read -r n k l d <<< "$s"
    printf '%-25s %-5s %-12s %s\n' "$n" "$k" "$l" "$d"
  done
}

OUT=gpu-check-results
BUILD=build
MODEL=
TESTS_ONLY=0
BENCH_ONLY=0
ONLY=
QUICK=0
SANITIZER=1
PEERS=1
JOBS=$(($(nproc 2> /dev/null || echo 4) / 4))
((JOBS < 1)) && JOBS=1
((JOBS > 4)) && JOBS=4
ARGS=${*:-}
while (($#)); do
  case $1 in
    --tests-only) TESTS_ONLY=1 ;;
    --benchmarks-only) BENCH_ONLY=1 ;;
    --only) ONLY=$ONLY,${2:?--only needs step names (--list names them)}; shift ;;
    --only=*) ONLY=$ONLY,${1#--only=} ;;
    --list) list_steps; exit 0 ;;
    --quick) QUICK=1 ;;
    --out) OUT=${2:?--out needs a folder}; shift ;;
    --out=*) OUT=${1#--out=} ;;
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    --build=*) BUILD=${1#--build=} ;;
    --model) MODEL=${2:?--model needs a file}; shift ;;
    --model=*) MODEL=${1#--model=} ;;
    --no-sanitizer) SANITIZER=0 ;;
    --no-peers) PEERS=0 ;;
    --jobs) JOBS=${2:?--jobs needs a number}; shift ;;
    --jobs=*) JOBS=${1#--jobs=} ;;
    -h | --help) sed -n '2,/^# shellcheck/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done

# The steps of this run, as ",a,b,": all, those of one kind, or --only's.
if ((TESTS_ONLY + BENCH_ONLY + (${#ONLY} > 0) > 1)); then
  echo "gpu-check: --tests-only, --benchmarks-only and --only exclude each other" >&2
  exit 2
fi
SELECTED=,
for s in "${STEPS[@]}"; do
  IFS='|' read -r n k _ <<< "$s"
  ((TESTS_ONLY)) && [ "$k" != test ] && continue
  ((BENCH_ONLY)) && [ "$k" != bench ] && continue
  [ -n "$ONLY" ] && [[ $ONLY, != *",$n,"* ]] && continue
  SELECTED=$SELECTED$n,
done
if [ -n "$ONLY" ]; then
  IFS=, read -r -a names <<< "${ONLY#,}"
  for n in "${names[@]}"; do
    [ -z "$n" ] || [[ " ${STEP_NAMES[*]} " == *" $n "* ]] && continue
    {
      echo "gpu-check: --only: no step named '$n'; the steps, in order:"
      list_steps
    } >&2
    exit 2
  done
fi
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || { echo "gpu-check: --jobs $JOBS: a number of tests at a time, >= 1" >&2; exit 2; }
[ "$SELECTED" != , ] || { echo "gpu-check: no step to run (--list names them)" >&2; exit 2; }
selected() { [[ $SELECTED == *",$1,"* ]]; }

BIN=$BUILD/bin
mkdir -p "$OUT/logs" "$OUT/rows" || exit 2
OUT=$(cd "$OUT" && pwd)
ROWS_DIR=$OUT/rows
rm -f "$ROWS_DIR"/*.tmp # of a part that was cut off
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 # tensor-parallel tests: NVLink multicast off

# ---- the rows and the summary ------------------------------------------------------
# A row: "kind|name|status|seconds|result|part". begin STEP starts a selected
# step (false for the others): its row file holds an INTERRUPTED row until the
# step ends and its rows replace it (finish_step). summary rebuilds
# DIR/summary.md from the row files of every part, in step order.
CUR=
PART=0
row() { printf '%s|%s|%s|%s|%s|%s\n' "$1" "$2" "$3" "$4" "$(tr -d '|' <<< "$5")" "$PART" >> "$ROWS_DIR/$CUR.tmp"; }
skip_step() { row - "$1" skipped - "$2"; echo "== $1: skipped ($2)"; }
finish_step() {
  [ -n "$CUR" ] || return 0
  [ -s "$ROWS_DIR/$CUR.tmp" ] || row - "$CUR" skipped - "nothing to run"
  mv -f "$ROWS_DIR/$CUR.tmp" "$ROWS_DIR/$CUR.row"
  CUR=
  summary
}
begin() {
  finish_step
  selected "$1" || return 1
  CUR=$1
  printf '%s|%s|INTERRUPTED (the run ended in this step)|-|logs/%s.txt|%s\n' "$(step_kind "$1")" "$1" "$1" "$PART" \
    > "$ROWS_DIR/$1.row"
  : > "$ROWS_DIR/$1.tmp"
  rm -f "$OUT/$1.json" "$OUT/$1.md"
  summary
}
summary() {
  local n k name status secs result part missing=() commits
  {
    echo "# GPU check"
    echo
    [ -s "$OUT/parts.txt" ] && while IFS='|' read -r part k name status; do
      echo "- part $part: $k; commit $name; $status"
    done < "$OUT/parts.txt"
    commits=$(cut -d'|' -f3 "$OUT/parts.txt" 2> /dev/null | sort -u | wc -l)
    ((commits > 1)) && echo "- the parts ran on different commits"
    echo
    echo "| step | status | s | part | result (last matching line of logs/STEP.txt) |"
    echo "|---|---|---:|---:|---|"
    for n in "${STEP_NAMES[@]}"; do
      if [ -f "$ROWS_DIR/$n.row" ]; then
        while IFS='|' read -r k name status secs result part; do
          echo "| $name | $status | $secs | $part | $result |"
        done < "$ROWS_DIR/$n.row"
      else
        missing+=("$n")
      fi
    done
    echo
    ((${#missing[@]})) && echo "Not run in any part yet: ${missing[*]}." && echo
    echo "Results: $OUT (JSON and markdown per benchmark, peers/, logs/, rows/)."
  } > "$OUT/summary.md"
}
# The test rows of every part that did not pass, as "name|status".
failed_tests() {
  local n k name status _
  for n in "${STEP_NAMES[@]}"; do
    [ -f "$ROWS_DIR/$n.row" ] || continue
    while IFS='|' read -r k name status _; do
      [ "$k" = test ] && [ "$status" != ok ] && [ "$status" != skipped ] && echo "$name|$status"
    done < "$ROWS_DIR/$n.row"
  done
}

# run KIND NAME LIMIT CMD...: runs CMD with a time limit (seconds), output to
# logs/NAME.txt; KIND is test (a failure fails the check) or bench. The result
# column is the last line of the log matching $GREP (set per step).
GREP='.'
run() {
  local kind=$1 name=$2 limit=$3 t0=$SECONDS rc status result
  shift 3
  echo "== $name: $*"
  echo "\$ $*" > "$OUT/logs/$name.txt"
  timeout --kill-after=10 "$limit" "$@" >> "$OUT/logs/$name.txt" 2>&1
  rc=$?
  case $rc in
    0) status=ok ;;
    124 | 137) status="TIMEOUT (${limit} s)" ;;
    *) status="FAILED (rc $rc)" ;;
  esac
  result=$(grep -E "$GREP" "$OUT/logs/$name.txt" | tail -1 | cut -c1-90)
  row "$kind" "$name" "$status" $((SECONDS - t0)) "$result"
  GREP='.'
  return $rc
}

# ---- the machine --------------------------------------------------------------
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi > /dev/null 2>&1; then
  echo "gpu-check: no NVIDIA driver here (nvidia-smi fails): nothing to check" >&2
  exit 2
fi
GPU=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader | head -1)
echo "GPU: $GPU"
case $GPU in
  *", 9.0,"*) ;;
  *) echo "gpu-check: the kernels are built for sm_90a (Hopper, compute capability 9.0); this GPU is not one: the GPU tests will skip" >&2 ;;
esac
[ -d "$BIN" ] || { echo "gpu-check: no $BIN: build first (scripts/build.sh)" >&2; exit 2; }
[ -x "$BIN/cublaslt_test" ] || {
  echo "gpu-check: $BIN has no GPU binaries: the build was CPU-only (no CUDA toolkit at configure time?)" >&2
  exit 2
}
# The commit of the checkout and the one the binaries were built from (futr
# --version; "-dirty": built with uncommitted changes), both when they differ.
BUILT=$("$BIN/futr" --version 2> /dev/null | sed -n 's/.*(commit \([0-9a-f]*\)\(-dirty\)\{0,1\},.*/\1\2/p' | head -1)
[[ $BUILT == *-dirty ]] && BUILT=${BUILT:0:7}-dirty || BUILT=${BUILT:0:7}
COMMIT=$(git rev-parse --short HEAD 2> /dev/null)
[ -n "$COMMIT" ] && ! git diff --quiet HEAD 2> /dev/null && COMMIT="$COMMIT+changes"
if [ -z "$COMMIT" ]; then
  COMMIT="${BUILT:-unknown} (the binaries'; no git checkout here)"
elif [ -n "$BUILT" ] && [ "$BUILT" != "$COMMIT" ]; then
  COMMIT="$COMMIT (binaries of $BUILT)"
fi
{
  echo "{\"gpu\": \"$GPU\", \"commit\": \"$COMMIT\", \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo " \"cuda\": \"$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)\", \"quick\": $QUICK,"
  echo " \"options\": \"${ARGS//\"/\\\"}\"}"
} > "$OUT/environment.json"
# This part: its number and its line in DIR/parts.txt ("N|GPU|commit|date; options").
PART=1
[ -f "$OUT/parts.txt" ] && PART=$(($(wc -l < "$OUT/parts.txt") + 1))
printf '%s|%s|%s|%s; %s\n' "$PART" "$GPU" "$COMMIT" "$(date -u +%Y-%m-%dT%H:%MZ)" "${ARGS:-all steps}" >> "$OUT/parts.txt"
echo "gpu-check: part $PART into $OUT: ${SELECTED:1:${#SELECTED}-2}" | tr ',' ' '

# The NCCL of a PyTorch install, if any (the tensor-parallel tests load libnccl
# at run time and skip without it).
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2> /dev/null)
[ -n "$nccl" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl

# The default model (the engine tests and rows), and the text of the
# perplexity row, both where the build's compiled-in paths expect them;
# fetched only when a step of this run uses it.
DEFAULT_MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
NEEDS_MODEL=0
for s in gpu_kernel_tests gpu_engine_tests server_determinism_gpu server_speculative_gpu decode_step_smollm2 ttft_smollm2 serve speculative \
  perplexity_decode perplexity_prefill; do
  selected $s && NEEDS_MODEL=1
done
if [ -z "$MODEL" ]; then
  MODEL=$DEFAULT_MODEL
  if ((NEEDS_MODEL)) && [ ! -s "$MODEL" ]; then
    echo "== the default model is missing: scripts/fetch-model.sh"
    scripts/fetch-model.sh > "$OUT/logs/fetch-model.txt" 2>&1 ||
      echo "gpu-check: scripts/fetch-model.sh failed ($OUT/logs/fetch-model.txt): the engine tests will fail and the model rows are skipped" >&2
  fi
fi
HAVE_MODEL=0
[ -s "$MODEL" ] && HAVE_MODEL=1
TEXT=data/wikitext-2-raw/wiki.test.raw

P=$OUT/peers
TORCH_WHY=unchecked
peer() { # peer NAME LIMIT SCRIPT ARGS...: a PyTorch peer, or a skipped row
  local name=$1
  if [ "$TORCH_WHY" = unchecked ]; then
    if ((PEERS == 0)); then
      TORCH_WHY="--no-peers"
    elif ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
      TORCH_WHY="python3 has no torch with CUDA"
    else
      TORCH_WHY=
    fi
  fi
  if [ -n "$TORCH_WHY" ]; then skip_step "$name" "$TORCH_WHY"; return 1; fi
  mkdir -p "$P"
  GREP='peer|PEER|ERROR|Error|wrote|[0-9]'
  run bench "$@"
}

# ---- 1. the GPU tests -----------------------------------------------------------
# The ctest labels (tests/CMakeLists.txt): gpu, the kernels through their
# launchers against their CPU references; gpu_engine, the GPU engine against
# the CPU quantized reference on the default model (most of their time is that
# reference, on the CPU). --jobs N runs N at a time, each reference on its
# share of the cores: N processes that each took every core would wait for
# one another at every parallel region (OMP_NUM_THREADS caps futr's default).
ctest_gpu() { # ctest_gpu STEP LIMIT CTEST-ARGS...
  local name=$1 limit=$2 omp=${OMP_NUM_THREADS:-}
  shift 2
  if [ -z "$omp" ]; then
    omp=$(($(nproc 2> /dev/null || echo "$JOBS") / JOBS))
    ((omp < 1)) && omp=1
  fi
  GREP='tests passed|tests failed'
  run test "$name" "$limit" env OMP_NUM_THREADS="$omp" ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure \
    --timeout 1200 --output-junit "$OUT/$name.xml" "$@"
}
begin gpu_kernel_tests && ctest_gpu gpu_kernel_tests 1200 -L gpu -LE engine
if begin gpu_engine_tests; then
  if ((QUICK)); then
    skip_step gpu_engine_tests "--quick (the engine tests quantize a model and run its CPU reference first)"
  else
    ctest_gpu gpu_engine_tests 3000 -L gpu_engine
  fi
fi
# The server's determinism and speculative-decoding tests carry the label cpu
# (CI runs them on the CPU engine); with a GPU, --backend auto runs them on the
# GPU engine's defaults.
for t in determinism speculative; do
  begin server_${t}_gpu || continue
  if ((QUICK)); then
    skip_step server_${t}_gpu "--quick"
  elif [ -x "$BIN/server_${t}_test" ]; then
    run test server_${t}_gpu 900 "$BIN/server_${t}_test"
  else
    skip_step server_${t}_gpu "no $BIN/server_${t}_test"
  fi
done

# ---- 2. compute-sanitizer on the small sets ------------------------------------
# Each kernel family's small shapes (named *Small.* or *Sanitizer.*: a few
# launches, seconds under the sanitizer) under memcheck, and racecheck and
# synccheck for the kernels that use shared memory and barriers.
TOOLS="memcheck racecheck synccheck"
((QUICK)) && TOOLS=memcheck
SETS=(
  "decode_attention_test:DecodeAttentionSmall.*"
  "decode_ops_test:-DecodeOps.RmsNormMatchesTheCpu"
  "logits_reduce_test:*"
  "w4a16_test:W4A16Small*"
  "fp8_gemm_test:Fp8GemmSanitizer.*"
  "fp8_scaling_test:Fp8ScalingSmall.*"
  "prefill_attention_test:PrefillAttentionSmall.*"
)
if ! begin sanitizer; then
  :
elif ((SANITIZER == 0)); then
  skip_step sanitizer "--no-sanitizer"
elif ! command -v compute-sanitizer > /dev/null; then
  skip_step sanitizer "compute-sanitizer is not on PATH"
else
  for s in "${SETS[@]}"; do
    b=${s%%:*}
    f=${s#*:}
    [ -x "$BIN/$b" ] || { skip_step "${b%_test}_sanitizer" "no $BIN/$b"; continue; }
    for tool in $TOOLS; do
      GREP='ERROR SUMMARY|RACECHECK SUMMARY'
      run test "${b%_test}_$tool" 600 compute-sanitizer --tool "$tool" --error-exitcode 3 "$BIN/$b" --gtest_filter="$f"
    done
  done
fi

# ---- 3. benchmarks, each with its floor (measured in the same process) and
# its peers (cuBLASLt in the process; PyTorch written to a JSON first) -------
if begin ceilings; then
  GREP='copy|TFLOP'
  run bench ceilings 300 "$BIN/ceilings_bench" --json "$OUT/ceilings.json"
  cp "$OUT/logs/ceilings.txt" "$OUT/ceilings.md"
fi

# Decode GEMMs (INT4 weights): ours, the no-compute floor, cuBLASLt BF16,
# torch INT4 / BF16.
if begin w4a16; then
  W4_MODELS=SmolLM2-135M,Llama-3.1-8B,Llama-3.1-70B
  W4_M=1,2,4,8,16,32
  ((QUICK)) && { W4_MODELS=Llama-3.1-8B; W4_M=1,16; }
  PEER_ARG=()
  peer torch_decode_peer 600 python3 bench/peers/torch_decode_peer.py --out "$P/torch_decode.json" \
    --models "$W4_MODELS" --m "$W4_M" && PEER_ARG=(--peers "$P/torch_decode.json")
  GREP='layer'
  run bench w4a16 900 "$BIN/w4a16_bench" --models "$W4_MODELS" --m "$W4_M" --json "$OUT/w4a16.json" "${PEER_ARG[@]}"
  cp "$OUT/logs/w4a16.txt" "$OUT/w4a16.md"
fi

# Decode attention: ours (BF16 cache, INT4 mirror, rotated mirror), the
# read floor, PyTorch SDPA (flash and cuDNN).
if begin decode_attention; then
  DA=(--batch 1,8,32 --ctx 1024,8192,32768)
  ((QUICK)) && DA=(--batch 1,32 --ctx 8192)
  PEER_ARG=()
  peer torch_attention_peer 600 python3 bench/peers/torch_attention_peer.py --out "$P/torch_attention.json" \
    "${DA[@]}" && PEER_ARG=(--peers "$P/torch_attention.json")
  GREP='\| 32 '
  run bench decode_attention 600 "$BIN/decode_attention_bench" "${DA[@]}" --json "$OUT/decode_attention.json" "${PEER_ARG[@]}"
  cp "$OUT/logs/decode_attention.txt" "$OUT/decode_attention.md"
fi

# The LM head (ours against cuBLASLt and the floor) and the persistent
# executor's projection chain (against launches with PDL and the floor; both
# ways of streaming the weights; --breakdown: where each op's time goes).
if begin lm_head; then
  GREP='\| (Llama|SmolLM2)'
  run bench lm_head 600 "$BIN/lm_head_bench" --models smollm2,8b --m 1,16,32 --json "$OUT/lm_head.json"
  cp "$OUT/logs/lm_head.txt" "$OUT/lm_head.md"
fi
if begin persistent_step; then
  run bench persistent_step 300 "$BIN/persistent_step_bench" --models smollm2,8b --breakdown --json "$OUT/persistent_step.json"
  cp "$OUT/logs/persistent_step.txt" "$OUT/persistent_step.md"
fi

# FP8 prefill GEMM: ours (promoted and fast accumulation) against cuBLASLt in
# both modes, in one process; the torch.compile peer of the fused epilogues
# merges its rows into fp8_gemm_peers.{json,md} (minutes: not with --quick; it
# reads the fp8_gemm.json of this part or of an earlier one).
if begin fp8_gemm; then
  FP8_M=2048,4096,8192
  ((QUICK)) && FP8_M=2048
  GREP='\| (8b|qkv|gate)'
  run bench fp8_gemm 900 "$BIN/fp8_gemm_bench" --compare-schedules --models 8b --m "$FP8_M" --json "$OUT/fp8_gemm.json"
  cp "$OUT/logs/fp8_gemm.txt" "$OUT/fp8_gemm.md"
fi
if begin torch_prefill_peer; then
  rm -f "$OUT/fp8_gemm_peers.json" "$OUT/fp8_gemm_peers.md"
  if ((QUICK)); then
    skip_step torch_prefill_peer "--quick (torch.compile of every fused epilogue)"
  elif [ ! -s "$OUT/fp8_gemm.json" ]; then
    skip_step torch_prefill_peer "no fp8_gemm.json: run the fp8_gemm step first"
  else
    peer torch_prefill_peer 900 python3 bench/peers/torch_prefill_peer.py --ours "$OUT/fp8_gemm.json" \
      --out "$OUT/fp8_gemm_peers.json" --md "$OUT/fp8_gemm_peers.md" --peer-json "$P/torch_prefill.json"
  fi
fi

# Prefill attention: ours against PyTorch SDPA (flash and cuDNN).
if begin prefill_attention; then
  PA=()
  ((QUICK)) && PA=(--models llama-3.1-8b --shapes 4x2048)
  PEER_ARG=()
  peer torch_prefill_attention_peer 600 python3 bench/peers/torch_prefill_attention_peer.py \
    --out "$P/torch_prefill_attention.json" "${PA[@]}" && PEER_ARG=(--peers "$P/torch_prefill_attention.json")
  GREP='TFLOP|\| (llama|smol)'
  run bench prefill_attention 600 "$BIN/prefill_attention_bench" "${PA[@]}" --json "$OUT/prefill_attention.json" \
    "${PEER_ARG[@]}"
  cp "$OUT/logs/prefill_attention.txt" "$OUT/prefill_attention.md"
fi

# The engine: the decode step (ms per step at ctx 1024) and the time to first
# token (prefill path), on the model and on the synthetic Llama-3.1-8B
# (random weights of its shapes: no download).
B_DECODE=(-p 0 -n 32 -b 1,16,32 --ctx-list 1024 -r 3)
B_TTFT=(-p 512,2048 -n 0 -r 3)
((QUICK)) && { B_DECODE=(-p 0 -n 32 -b 1,16 --ctx-list 1024 -r 2); B_TTFT=(-p 2048 -n 0 -r 2); }
TTFT_8B=(-p 512,2048,8192 -n 0 -r 3)
((QUICK)) && TTFT_8B=("${B_TTFT[@]}")
engine_row() { # engine_row STEP ARGS...: futr bench, its table to DIR/STEP.md
  local name=$1
  shift
  GREP='\| '
  [[ $name == ttft_* ]] && GREP='\| pp' # the longest prompt's row (futr bench adds a decode row)
  run bench "$name" 600 "$BIN/futr" bench "$@" --json "$OUT/$name.json"
  grep -E '^\|' "$OUT/logs/$name.txt" > "$OUT/$name.md"
}
for s in decode_step_smollm2 ttft_smollm2; do
  begin $s || continue
  if ((HAVE_MODEL == 0)); then
    skip_step $s "no model ($MODEL)"
  elif [ $s = decode_step_smollm2 ]; then
    engine_row $s --model "$MODEL" --backend gpu "${B_DECODE[@]}"
  else
    engine_row $s --model "$MODEL" --backend gpu "${B_TTFT[@]}"
  fi
done
begin decode_step_8b && engine_row decode_step_8b --synthetic llama-3.1-8b --backend gpu "${B_DECODE[@]}"
begin ttft_8b && engine_row ttft_8b --synthetic llama-3.1-8b --backend gpu "${TTFT_8B[@]}"
if begin torch_step_peer; then
  if ((QUICK)); then
    skip_step torch_step_peer "--quick (torch.compile of the decode step)"
  else
    peer torch_step_peer 900 python3 bench/peers/torch_step_peer.py --mode compile --out "$P/torch_step.json"
  fi
fi
if begin torch_prefill_model_peer; then
  if ((QUICK)); then
    skip_step torch_prefill_model_peer "--quick (torch.compile of the layer and the model)"
  else
    peer torch_prefill_model_peer 600 python3 bench/peers/torch_prefill_model_peer.py --out "$P/torch_prefill_model.json" \
      --budget-s 420
  fi
fi

# model_step STEP: begins STEP and says whether it runs (not with --quick,
# nor without the model: a skipped row with the reason).
model_step() {
  begin "$1" || return 1
  if ((QUICK)); then
    skip_step "$1" "--quick"
    return 1
  elif ((HAVE_MODEL == 0)); then
    skip_step "$1" "no model ($MODEL)"
    return 1
  fi
}

# The server under load: 128 streaming requests, 32 at a time (the openai
# client where installed, else serve_load's standard-library client).
if model_step serve; then
  GREP='^\| [0-9]'
  run bench serve 600 python3 bench/serve_load.py --futr "$BIN/futr" --client auto --requests 128 \
    --concurrency 32 --max-tokens 128 --time-limit 400 --json "$OUT/serve.json" --server-log "$OUT/logs/serve_server.txt" \
    -- --model "$MODEL" --backend gpu --max-seqs 32 --ctx 1024
fi

# Speculative decoding at batch 1 on the model: each workload (copying a
# passage, editing code, free text) without and with prompt-lookup drafts
# (the same text; tokens/s, acceptance, tokens per step).
if model_step speculative; then
  GREP='^\| copy'
  run bench speculative 600 python3 bench/speculative_generate.py --futr "$BIN/futr" --reps 3 --max-tokens 96 \
    --json "$OUT/speculative.json" -- --model "$MODEL" --backend gpu
  grep -E '^\|' "$OUT/logs/speculative.txt" > "$OUT/speculative.md"
fi

# GPU perplexity on the first 32,768 tokens of WikiText-2 (ctx 1024), decode
# path with the BF16 cache and the FP8 prefill path.
for s in perplexity_decode perplexity_prefill; do
  begin $s || continue
  if ((QUICK)); then
    skip_step $s "--quick"
  elif ((HAVE_MODEL == 0)) || [ ! -s "$TEXT" ]; then
    skip_step $s "no model or no $TEXT"
  else
    GREP='"ppl"|perplexity'
    if [ $s = perplexity_decode ]; then
      run bench $s 600 "$BIN/futr" perplexity "$TEXT" --model "$MODEL" --backend gpu --prefill=off \
        --kv bf16 --ctx 1024 --max-tokens 32768 --json -q
    else
      run bench $s 600 "$BIN/futr" perplexity "$TEXT" --model "$MODEL" --backend gpu --prefill \
        --kv bf16 --ctx 1024 --batch 256 --max-tokens 32768 --json -q
    fi
    tail -n +2 "$OUT/logs/$s.txt" > "$OUT/$s.json"
  fi
done
finish_step

# ---- the summary ------------------------------------------------------------------
echo
cat "$OUT/summary.md"
FAILS=$(failed_tests)
if [ -n "$FAILS" ]; then
  echo
  echo "gpu-check: FAILED: test or sanitizer rows did not pass (logs under $OUT/logs):"
  while IFS='|' read -r n status; do
    echo "  $n: $status"
    grep -h -E "^\[  FAILED|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]|The following tests FAILED" \
      "$OUT/logs/$n.txt" 2> /dev/null | head -10 | sed 's/^/    /'
  done <<< "$FAILS"
  exit 1
fi
exit 0
