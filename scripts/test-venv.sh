#!/usr/bin/env bash
# The test-only Python packages (the Hugging Face `tokenizers` and `gguf`
# references, the openai client for tests/server/serve_openai_test.py) in a
# venv, build/venv; idempotent. Used by scripts/test.sh and
# scripts/test-sanitize.sh, which point the tests at it with
# FUTR_PYTHON=build/venv/bin/python (without it those tests skip, saying why).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/venv/bin/python ]; then
  mkdir -p build
  python3 -m venv build/venv
  build/venv/bin/pip install --quiet --disable-pip-version-check tokenizers==0.23.3 gguf==0.19.0 jinja2 numpy
fi
# The openai client also into venvs made before the serve test existed.
build/venv/bin/python -c "import openai" 2>/dev/null ||
  build/venv/bin/pip install --quiet --disable-pip-version-check openai==3.51.0
