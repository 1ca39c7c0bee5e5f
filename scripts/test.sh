#!/usr/bin/env bash
# README test command 1 (.ci/run runs it, then test-sanitize.sh): build
# everything into build/ and run the whole test suite. GPU tests skip with a
# reason on machines without a Hopper GPU. Test-only Python packages (the
# Hugging Face `tokenizers` reference) go into a venv (scripts/test-venv.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/fetch-model.sh
scripts/test-venv.sh
export FUTR_PYTHON="$PWD/build/venv/bin/python"
scripts/build.sh
cd build && ctest --output-on-failure -j "$(nproc)" "$@"
