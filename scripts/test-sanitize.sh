#!/usr/bin/env bash
# README test command 2 (.ci/run runs it after scripts/test.sh, with
# FUTR_CUDA=OFF): the CPU test suite under AddressSanitizer +
# UndefinedBehaviorSanitizer, and the fuzz smoke run (every fuzz target over
# its committed corpus and regression inputs, then a few seconds of
# mutations). Sets up what test.sh sets up (packages, the model, the test
# venv), configures build-asan/ with clang and -DFUTR_SANITIZE=ON, builds the
# CPU tests (label "cpu": every test that does not need CUDA) and the
# fuzz targets, runs them (ctest -L 'cpu|fuzz'). Extra arguments go to ctest.
# See docs/RELIABILITY.md.
#
# Environment: FUTR_SANITIZE_DIR (build directory, default build-asan),
# FUTR_CUDA=OFF (leave the CUDA code out: the CPU tests do not need it, and
# the kernels are not instrumented anyway; saves their compile on small
# machines; CI sets it), JOBS (parallel compile and test jobs, default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/fetch-model.sh
scripts/test-venv.sh
export FUTR_PYTHON="$PWD/build/venv/bin/python"
export PATH="/usr/local/cuda/bin:$PATH"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths relative to the checkout in the cache's keys: a clone in another folder
# (CI's) reuses what an earlier build compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
# NOTE: protect_shadow_gap=0 lets the CUDA driver map the memory ASan would
# reserve (the GPU tests start where a GPU is present); leaks are checked.
export ASAN_OPTIONS="protect_shadow_gap=0:detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp"
B="${FUTR_SANITIZE_DIR:-build-asan}"
JOBS="${JOBS:-$(nproc)}"
mkdir -p "$B"
# Quiet unless it fails, like scripts/build.sh.
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DFUTR_SANITIZE=ON \
  -DFUTR_BUILD_BENCH=OFF ${FUTR_CUDA:+-DFUTR_CUDA=$FUTR_CUDA} \
  > "$B/configure.log" 2>&1 || { cat "$B/configure.log"; exit 1; }
# The CPU tests, futr and the fuzz targets (GPU tests and kernels are left to
# the normal build: they skip without a GPU and their device code is not
# instrumented anyway).
cmake --build "$B" -j "$JOBS" --target cpu_tests gguf_fuzz safetensors_fuzz hf_config_fuzz futr_fuzz \
  tokenizer_json_fuzz chat_template_fuzz server_request_fuzz
cd "$B" && ctest --output-on-failure -j "$JOBS" -L 'cpu|fuzz' "$@"
