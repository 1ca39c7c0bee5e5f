#!/usr/bin/env bash
# README command 2 (and .ci/run): build everything and run the whole test suite.
# GPU tests skip with a reason on machines without a Hopper GPU. Test-only
# Python packages (the Hugging Face `tokenizers` reference) go into a venv.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/fetch-model.sh
if [ ! -x build/venv/bin/python ]; then
  python3 -m venv build/venv
  build/venv/bin/pip install --quiet --disable-pip-version-check tokenizers==0.23.3 gguf==0.19.0 jinja2 numpy
fi
# The openai client for the `futr serve` test (tests/server/serve_openai_test.py);
# also into venvs made before that test existed.
build/venv/bin/python -c "import openai" 2>/dev/null ||
  build/venv/bin/pip install --quiet --disable-pip-version-check openai==3.51.0
export FUTR_PYTHON="$PWD/build/venv/bin/python"
scripts/build.sh
cd build && ctest --output-on-failure -j "$(nproc)" "$@"
