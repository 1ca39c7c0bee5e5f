#!/usr/bin/env bash
# Formats the C++ and CUDA sources (.cu .cuh .cpp .h under src/ tests/ bench/
# fuzz/ dev/, as git lists them) with .clang-format, in place. --check changes
# nothing: it lists what differs and fails.
# CLANG_FORMAT names another binary; the style was written for clang-format 14
# (scripts/install-deps.sh installs it), and other versions may format a few
# lines differently.
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
command -v "$cf" > /dev/null || { echo "format.sh: $cf not found (apt-get install clang-format)" >&2; exit 2; }
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
