#!/usr/bin/env bash
# README command 1: set up a fresh machine and run the main job.
# Installs Debian packages, fetches the default model, builds `futr` only (the
# tests and benchmarks are built by scripts/test.sh), and runs `futr generate`
# on SmolLM2-135M-Instruct (the CPU engine without a GPU or without the CUDA
# toolkit: a CPU-only build, said once; the GPU engine on a Hopper GPU).
# Extra arguments replace the default prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$SECONDS
scripts/install-deps.sh
scripts/fetch-model.sh
FUTR_TARGETS=futr scripts/build.sh
echo "setup: futr built in $((SECONDS - t0)) s (build/bin/futr); scripts/test.sh builds and runs the tests"
if (($#)); then build/bin/futr generate "$@"; else build/bin/futr generate "The capital of France is"; fi
