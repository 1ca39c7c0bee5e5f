#!/usr/bin/env bash
# Configures and builds everything (library, futr, tests, benchmarks; all CUDA
# code for sm_90a) into build/, or only the targets in FUTR_TARGETS. Extra
# arguments go to CMake. Without the CUDA
# toolkit the build is CPU-only (said at configure time); FUTR_CUDA=ON in the
# environment makes CUDA required (CI), FUTR_CUDA=OFF leaves it out.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
# Paths relative to the checkout in the cache's keys: a clone in another folder
# (CI's) reuses what an earlier build compiled.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
mkdir -p build
# Quiet unless it fails, but the line saying whether CUDA is in the build is shown.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${FUTR_CUDA:+-DFUTR_CUDA=$FUTR_CUDA} "$@" \
  > build/configure.log 2>&1 || { cat build/configure.log; exit 1; }
grep -A3 "FuTransformer:" build/configure.log || true
# FUTR_TARGETS="futr ...": only these targets (scripts/setup.sh builds futr
# first; scripts/test.sh builds everything).
# shellcheck disable=SC2086
cmake --build build -j "$(nproc)" ${FUTR_TARGETS:+--target $FUTR_TARGETS}
