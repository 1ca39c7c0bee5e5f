#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz/ and runs
# each for SECONDS (default 120) on its committed seed corpus (fuzz/corpus/T),
# keeping what it finds in build-fuzz/corpus/T. Crashes are written to
# build-fuzz/artifacts/. Usage: fuzz/run.sh [SECONDS] [TARGET...]
# (targets: gguf safetensors hf_config futr tokenizer_json chat_template
# server_request). Inputs up to
# 1.2 MB (deep JSON nesting needs large inputs). Runs at nice 19 on one core.
# RUNS=N stops each target after N executions instead; MAX_LEN=B caps inputs
# at B bytes instead of 1.2 MB (the 10-million runs: fuzz/README.md says why).
# See fuzz/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-120}
shift || true
targets=${*:-gguf safetensors hf_config futr tokenizer_json chat_template server_request}
runs=${RUNS:+-runs=$RUNS}
max_len=${MAX_LEN:-1200000}
export PATH="/usr/local/cuda/bin:$PATH"
# Paths relative to the checkout in ccache's keys, as scripts/build.sh sets them.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFUTR_BUILD_FUZZ=ON \
  -DFUTR_BUILD_TESTS=OFF -DFUTR_BUILD_BENCH=OFF ${FUTR_CUDA:+-DFUTR_CUDA=$FUTR_CUDA} >/dev/null
nice -n 19 ninja -C build-fuzz ${JOBS:+-j $JOBS} $(for t in $targets; do echo "${t}_fuzz"; done)
mkdir -p build-fuzz/artifacts
status=0
for t in $targets; do
  mkdir -p "build-fuzz/corpus/$t"
  echo "fuzz: $t for ${secs}s"
  OMP_NUM_THREADS=1 nice -n 19 "build-fuzz/bin/${t}_fuzz" -max_total_time="$secs" $runs -max_len="$max_len" \
    -rss_limit_mb=2048 -timeout=10 \
    -dict="fuzz/$t.dict" -artifact_prefix="build-fuzz/artifacts/$t-" -print_final_stats=1 \
    "build-fuzz/corpus/$t" "fuzz/corpus/$t" $([ -d "fuzz/regressions/$t" ] && echo "fuzz/regressions/$t") \
    2>"build-fuzz/$t.log" || { status=1; echo "fuzz: $t FAILED (build-fuzz/$t.log)"; }
  grep -E "^(Done|stat::number_of_executed_units)" "build-fuzz/$t.log" || true
done
exit $status
