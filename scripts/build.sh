#!/usr/bin/env bash
# Configures and builds everything (library, futr, tests, benchmarks; all CUDA
# code for sm_90a) into build/. Extra arguments go to CMake.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/cuda/bin:$PATH"
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build build -j "$(nproc)"
