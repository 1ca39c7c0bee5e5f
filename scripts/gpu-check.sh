#!/usr/bin/env bash
# The GPU check: every GPU test, compute-sanitizer on the small kernel test
# sets, and the benchmarks with their peers and floors, on a machine with a
# Hopper GPU (H100 / H200) and the repository built by scripts/build.sh.
#
#   scripts/gpu-check.sh [--tests-only] [--quick] [--out DIR] [--build DIR]
#                        [--model FILE] [--no-sanitizer] [--no-peers]
#
#   --tests-only    the GPU tests and the sanitizers; no benchmark
#   --quick         a subset: the kernel tests (not the engine tests, which
#                   quantize a model on the CPU first), memcheck only, the
#                   kernel benchmarks on the 8B shapes and the decode step;
#                   no PyTorch peer that compiles (torch.compile takes minutes)
#   --out DIR       results folder (default gpu-check-results/); created,
#                   files of an earlier run in it are overwritten
#   --build DIR     the build folder (default build/)
#   --model FILE    the model of the engine rows (default: the one
#                   scripts/fetch-model.sh places in models/, fetched if missing)
#   --no-sanitizer  skip compute-sanitizer
#   --no-peers      skip the PyTorch peers
#
# Each step runs under a time limit; its output goes to DIR/logs/STEP.txt,
# benchmarks write DIR/STEP.json (and the markdown table they print to
# DIR/STEP.md). The PyTorch peers run only where `python3 -c "import torch"`
# works with a GPU; otherwise each is skipped with the reason. The summary
# table is printed last and kept in DIR/summary.md. Exit status: 1 if a test
# or sanitizer step failed, else 0 (a benchmark that fails is reported in the
# table, not in the status).
# shellcheck disable=SC2054  # commas inside flag values (-b 1,16,32), not separators
set -u
cd "$(dirname "$0")/.." || exit 2

OUT=gpu-check-results
BUILD=build
MODEL=
TESTS_ONLY=0
QUICK=0
SANITIZER=1
PEERS=1
while (($#)); do
  case $1 in
    --tests-only) TESTS_ONLY=1 ;;
    --quick) QUICK=1 ;;
    --out) OUT=${2:?--out needs a folder}; shift ;;
    --out=*) OUT=${1#--out=} ;;
    --build) BUILD=${2:?--build needs a folder}; shift ;;
    --build=*) BUILD=${1#--build=} ;;
    --model) MODEL=${2:?--model needs a file}; shift ;;
    --model=*) MODEL=${1#--model=} ;;
    --no-sanitizer) SANITIZER=0 ;;
    --no-peers) PEERS=0 ;;
    -h | --help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option $1 (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done

BIN=$BUILD/bin
mkdir -p "$OUT/logs" || exit 2
OUT=$(cd "$OUT" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
export PATH=$PATH:/usr/local/cuda/bin
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 # tensor-parallel tests: NVLink multicast off

ROWS=()      # summary rows: "step|status|seconds|result"
FAILED=0     # a test or sanitizer step failed
row() { ROWS+=("$1|$2|$3|$4"); }
skip_step() { row "$1" skipped - "$2"; echo "== $1: skipped ($2)"; }

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
  [[ $kind == test && $rc != 0 ]] && FAILED=1
  result=$(grep -E "$GREP" "$OUT/logs/$name.txt" | tail -1 | tr -d '|' | cut -c1-90)
  row "$name" "$status" $((SECONDS - t0)) "$result"
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
COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || COMMIT="$COMMIT+changes"
{
  echo "{\"gpu\": \"$GPU\", \"commit\": \"$COMMIT\", \"date\": \"$(date -u +%Y-%m-%dT%H:%M:%SZ)\","
  echo " \"cuda\": \"$(nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' | head -1)\", \"quick\": $QUICK}"
} > "$OUT/environment.json"

# The NCCL of a PyTorch install, if any (the tensor-parallel tests load libnccl
# at run time and skip without it).
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))' 2> /dev/null)
[ -n "$nccl" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl

# The default model (the engine tests and rows), and the text of the
# perplexity row, both where the build's compiled-in paths expect them.
DEFAULT_MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -z "$MODEL" ]; then
  MODEL=$DEFAULT_MODEL
  if [ ! -s "$MODEL" ]; then
    echo "== the default model is missing: scripts/fetch-model.sh"
    scripts/fetch-model.sh > "$OUT/logs/fetch-model.txt" 2>&1 ||
      echo "gpu-check: scripts/fetch-model.sh failed ($OUT/logs/fetch-model.txt): the engine tests will fail and the model rows are skipped" >&2
  fi
fi
HAVE_MODEL=0
[ -s "$MODEL" ] && HAVE_MODEL=1
TEXT=data/wikitext-2-raw/wiki.test.raw

TORCH_WHY=
if ((PEERS == 0)); then
  TORCH_WHY="--no-peers"
elif ! python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' > /dev/null 2>&1; then
  TORCH_WHY="python3 has no torch with CUDA"
fi
peer() { # peer NAME LIMIT SCRIPT ARGS...: a PyTorch peer, or a skipped row
  local name=$1
  if [ -n "$TORCH_WHY" ]; then skip_step "$name" "$TORCH_WHY"; return 1; fi
  GREP='peer|PEER|ERROR|Error|wrote|[0-9]'
  run bench "$@"
}

# ---- 1. the GPU tests -----------------------------------------------------------
# Every test with the ctest label `gpu` (tests/CMakeLists.txt): the kernel
# tests and the engine tests. --quick leaves out the engine tests.
EXCLUDE=()
((QUICK)) && EXCLUDE=(-E 'GpuEngine|GpuPrefill|GpuInvariance')
GREP='tests passed|tests failed'
run test gpu_tests 3000 ctest --test-dir "$BUILD" -L gpu --output-on-failure --timeout 1200 \
  --output-junit "$OUT/gpu_tests.xml" "${EXCLUDE[@]}"
# The server's determinism and speculative-decoding tests carry the label cpu
# (CI runs them on the CPU engine); with a GPU, --backend auto runs them on the
# GPU engine's defaults.
if ((!QUICK)); then
  for t in determinism speculative; do
    if [ -x "$BIN/server_${t}_test" ]; then
      run test server_${t}_gpu 900 "$BIN/server_${t}_test"
    else
      skip_step server_${t}_gpu "no $BIN/server_${t}_test"
    fi
  done
fi

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
if ((SANITIZER == 0)); then
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

if ((TESTS_ONLY)); then
  echo "== --tests-only: no benchmarks"
else
  # ---- 3. benchmarks, each with its floor (measured in the same process) and
  # its peers (cuBLASLt in the process; PyTorch written to a JSON first) -------
  P=$OUT/peers
  mkdir -p "$P"
  GREP='copy|TFLOP'
  run bench ceilings 300 "$BIN/ceilings_bench" --json "$OUT/ceilings.json"
  cp "$OUT/logs/ceilings.txt" "$OUT/ceilings.md"

  # Decode GEMMs (INT4 weights): ours, the no-compute floor, cuBLASLt BF16,
  # torch INT4 / BF16.
  W4_MODELS=SmolLM2-135M,Llama-3.1-8B,Llama-3.1-70B
  W4_M=1,2,4,8,16,32
  ((QUICK)) && { W4_MODELS=Llama-3.1-8B; W4_M=1,16; }
  PEER_ARG=()
  peer torch_decode_peer 600 python3 bench/peers/torch_decode_peer.py --out "$P/torch_decode.json" \
    --models "$W4_MODELS" --m "$W4_M" && PEER_ARG=(--peers "$P/torch_decode.json")
  GREP='layer'
  run bench w4a16 900 "$BIN/w4a16_bench" --models "$W4_MODELS" --m "$W4_M" --json "$OUT/w4a16.json" "${PEER_ARG[@]}"
  cp "$OUT/logs/w4a16.txt" "$OUT/w4a16.md"

  # Decode attention: ours (BF16 cache, INT4 mirror, rotated mirror), the
  # read floor, PyTorch SDPA (flash and cuDNN).
  DA=(--batch 1,8,32 --ctx 1024,8192,32768)
  ((QUICK)) && DA=(--batch 1,32 --ctx 8192)
  PEER_ARG=()
  peer torch_attention_peer 600 python3 bench/peers/torch_attention_peer.py --out "$P/torch_attention.json" \
    "${DA[@]}" && PEER_ARG=(--peers "$P/torch_attention.json")
  GREP='\| 32 '
  run bench decode_attention 600 "$BIN/decode_attention_bench" "${DA[@]}" --json "$OUT/decode_attention.json" "${PEER_ARG[@]}"
  cp "$OUT/logs/decode_attention.txt" "$OUT/decode_attention.md"

  # The LM head (ours against cuBLASLt and the floor) and the persistent
  # executor's projection chain (against launches with PDL and the floor; both
  # ways of streaming the weights; --breakdown: where each op's time goes).
  GREP='\| (Llama|SmolLM2)'
  run bench lm_head 600 "$BIN/lm_head_bench" --models smollm2,8b --m 1,16,32 --json "$OUT/lm_head.json"
  cp "$OUT/logs/lm_head.txt" "$OUT/lm_head.md"
  run bench persistent_step 300 "$BIN/persistent_step_bench" --models smollm2,8b --breakdown --json "$OUT/persistent_step.json"
  cp "$OUT/logs/persistent_step.txt" "$OUT/persistent_step.md"

  # FP8 prefill GEMM: ours (promoted and fast accumulation) against cuBLASLt in
  # both modes, in one process; the torch.compile peer of the fused epilogues
  # merges its rows into fp8_gemm_peers.{json,md} (minutes: not with --quick).
  FP8_M=2048,4096,8192
  ((QUICK)) && FP8_M=2048
  GREP='\| (8b|qkv|gate)'
  run bench fp8_gemm 900 "$BIN/fp8_gemm_bench" --compare-schedules --models 8b --m "$FP8_M" --json "$OUT/fp8_gemm.json"
  cp "$OUT/logs/fp8_gemm.txt" "$OUT/fp8_gemm.md"
  if ((QUICK)); then
    skip_step torch_prefill_peer "--quick (torch.compile of every fused epilogue)"
  elif [ -s "$OUT/fp8_gemm.json" ]; then
    peer torch_prefill_peer 900 python3 bench/peers/torch_prefill_peer.py --ours "$OUT/fp8_gemm.json" \
      --out "$OUT/fp8_gemm_peers.json" --md "$OUT/fp8_gemm_peers.md" --peer-json "$P/torch_prefill.json"
  fi

  # Prefill attention: ours against PyTorch SDPA (flash and cuDNN).
  PA=()
  ((QUICK)) && PA=(--models llama-3.1-8b --shapes 4x2048)
  PEER_ARG=()
  peer torch_prefill_attention_peer 600 python3 bench/peers/torch_prefill_attention_peer.py \
    --out "$P/torch_prefill_attention.json" "${PA[@]}" && PEER_ARG=(--peers "$P/torch_prefill_attention.json")
  GREP='TFLOP|\| (llama|smol)'
  run bench prefill_attention 600 "$BIN/prefill_attention_bench" "${PA[@]}" --json "$OUT/prefill_attention.json" \
    "${PEER_ARG[@]}"
  cp "$OUT/logs/prefill_attention.txt" "$OUT/prefill_attention.md"

  # The engine: the decode step (ms per step at ctx 1024) and the time to first
  # token (prefill path), on the model and on the synthetic Llama-3.1-8B
  # (random weights of its shapes: no download).
  B_DECODE=(-p 0 -n 32 -b 1,16,32 --ctx-list 1024 -r 3)
  B_TTFT=(-p 512,2048 -n 0 -r 3)
  ((QUICK)) && { B_DECODE=(-p 0 -n 32 -b 1,16 --ctx-list 1024 -r 2); B_TTFT=(-p 2048 -n 0 -r 2); }
  if ((HAVE_MODEL)); then
    GREP='\| '
    run bench decode_step_smollm2 600 "$BIN/futr" bench --model "$MODEL" --backend gpu "${B_DECODE[@]}" \
      --json "$OUT/decode_step_smollm2.json"
    GREP='\| '
    run bench ttft_smollm2 600 "$BIN/futr" bench --model "$MODEL" --backend gpu "${B_TTFT[@]}" \
      --json "$OUT/ttft_smollm2.json"
  else
    skip_step decode_step_smollm2 "no model ($MODEL)"
    skip_step ttft_smollm2 "no model ($MODEL)"
  fi
  GREP='\| '
  run bench decode_step_8b 600 "$BIN/futr" bench --synthetic llama-3.1-8b --backend gpu "${B_DECODE[@]}" \
    --json "$OUT/decode_step_8b.json"
  TTFT_8B=(-p 512,2048,8192 -n 0 -r 3)
  ((QUICK)) && TTFT_8B=("${B_TTFT[@]}")
  GREP='\| '
  run bench ttft_8b 600 "$BIN/futr" bench --synthetic llama-3.1-8b --backend gpu "${TTFT_8B[@]}" \
    --json "$OUT/ttft_8b.json"
  for f in decode_step_smollm2 ttft_smollm2 decode_step_8b ttft_8b; do
    [ -f "$OUT/logs/$f.txt" ] && grep -E '^\|' "$OUT/logs/$f.txt" > "$OUT/$f.md"
  done
  if ((QUICK)); then
    skip_step torch_step_peer "--quick (torch.compile of the decode step)"
    skip_step torch_prefill_model_peer "--quick (torch.compile of the layer and the model)"
  else
    peer torch_step_peer 900 python3 bench/peers/torch_step_peer.py --mode compile --out "$P/torch_step.json"
    peer torch_prefill_model_peer 900 python3 bench/peers/torch_prefill_model_peer.py --out "$P/torch_prefill_model.json" \
      --budget-s 600
  fi

  # The server under load: 128 streaming requests, 32 at a time (the openai
  # client where installed, else serve_load's standard-library client).
  if ((QUICK)); then
    skip_step serve "--quick"
  elif ((HAVE_MODEL == 0)); then
    skip_step serve "no model ($MODEL)"
  else
    GREP='^\| [0-9]'
    run bench serve 600 python3 bench/serve_load.py --futr "$BIN/futr" --client auto --requests 128 \
      --concurrency 32 --max-tokens 128 --time-limit 400 --json "$OUT/serve.json" --server-log "$OUT/logs/serve_server.txt" \
      -- --model "$MODEL" --backend gpu --max-seqs 32 --ctx 1024
  fi

  # GPU perplexity on the first 32,768 tokens of WikiText-2 (ctx 1024), decode
  # path with the BF16 cache and the FP8 prefill path.
  if ((QUICK)); then
    skip_step perplexity "--quick"
  elif ((HAVE_MODEL == 0)) || [ ! -s "$TEXT" ]; then
    skip_step perplexity "no model or no $TEXT"
  else
    GREP='"ppl"|perplexity'
    run bench perplexity_decode 600 "$BIN/futr" perplexity "$TEXT" --model "$MODEL" --backend gpu --prefill=off \
      --kv bf16 --ctx 1024 --max-tokens 32768 --json -q
    GREP='"ppl"|perplexity'
    run bench perplexity_prefill 600 "$BIN/futr" perplexity "$TEXT" --model "$MODEL" --backend gpu --prefill \
      --kv bf16 --ctx 1024 --batch 256 --max-tokens 32768 --json -q
    for f in perplexity_decode perplexity_prefill; do tail -n +2 "$OUT/logs/$f.txt" > "$OUT/$f.json"; done
  fi
fi

# ---- the summary ------------------------------------------------------------------
{
  echo "# GPU check"
  echo
  echo "$GPU; commit $COMMIT; $(date -u +%Y-%m-%d)$( ((QUICK)) && echo '; --quick')$( ((TESTS_ONLY)) && echo '; --tests-only')"
  echo
  echo "| step | status | s | result (last matching line of logs/STEP.txt) |"
  echo "|---|---|---:|---|"
  for r in "${ROWS[@]}"; do
    IFS='|' read -r a b c d <<< "$r"
    echo "| $a | $b | $c | $d |"
  done
  echo
  echo "Results: $OUT (JSON and markdown per benchmark, peers/, logs/)."
} > "$OUT/summary.md"
echo
cat "$OUT/summary.md"
if ((FAILED)); then
  echo
  echo "gpu-check: FAILED: a test or sanitizer step failed (logs under $OUT/logs)"
  grep -h -E "^\[  FAILED|ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]|The following tests FAILED" -A0 "$OUT"/logs/*.txt | head -20
  exit 1
fi
exit 0
