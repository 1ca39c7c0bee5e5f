#!/usr/bin/env bash
# Formats the C++ and CUDA sources (.cu .cuh .cpp .h under src/ tests/ bench/
# fuzz/ dev/, as git lists them) with .clang-format, in place. --check changes
# nothing: it lists what differs and fails (ctest runs it as format_check;
# exit 77, skipped, without clang-format 14).
# CLANG_FORMAT names another binary; the style was written for clang-format 14
# (scripts/install-deps.sh installs it), and other versions may format a few
# lines differently.
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
if ! command -v "$cf" > /dev/null; then
  echo "format.sh: $cf not found (scripts/install-deps.sh installs clang-format 14)" >&2
  [ "${1:-}" = --check ] && { echo "format.sh: check skipped" >&2; exit 77; }
  exit 2
fi
# --check with another major version than 14 skips (exit 77, what ctest counts
# as skipped): other versions lay out a few constructs differently.
if [ "${1:-}" = --check ] && ! "$cf" --version | grep -qE 'version 14\.'; then
  echo "format.sh: check skipped: $("$cf" --version) is not clang-format 14 (CLANG_FORMAT names another binary)" >&2
  exit 77
fi
mapfile -t files < <(git ls-files -- 'src/*' 'tests/*' 'bench/*' 'fuzz/*' 'dev/*' | grep -E '\.(cu|cuh|cpp|h)$')
case ${1:-} in
  --check)
    if printf '%s\0' "${files[@]}" | xargs -0 -n 32 -P "$(nproc)" "$cf" --style=file --dry-run --Werror; then
      echo "format.sh: ${#files[@]} files match .clang-format ($("$cf" --version))"
    else
      echo "format.sh: the files above differ from .clang-format: run scripts/format.sh" >&2
      exit 1
    fi ;;
  "")
    # Twice: clang-format 14 settles a few macro continuations and string
    # arrays only on a second pass.
    for _ in 1 2; do
      printf '%s\0' "${files[@]}" | xargs -0 -n 32 -P "$(nproc)" "$cf" --style=file -i
    done
    echo "format.sh: formatted ${#files[@]} files" ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
