#!/usr/bin/env bash
# README command 1: set up a fresh machine and run the main job.
# Installs Debian packages, fetches the default model, builds, and runs
# `futr generate` on SmolLM2-135M-Instruct (CPU backend without a GPU, Hopper
# kernels with one). Extra arguments replace the default prompt.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/fetch-model.sh
scripts/build.sh
if (($#)); then build/bin/futr generate "$@"; else build/bin/futr generate "The capital of France is"; fi
