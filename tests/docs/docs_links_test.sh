#!/usr/bin/env bash
# The docs point at what exists: every relative link in README.md and
# docs/*.md names a file or folder of the repository, and no comment or doc in
# src/ tests/ bench/ scripts/ docs/ (or README.md) cites a note kept outside
# the repository (the design, anchors and GPU-machine notes: $pattern below).
# Run by ctest (tests/docs/CMakeLists.txt) with the repository root as $1.
set -u
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$ROOT" || exit 2
bad=0

# 1. Relative links: [text](target) and [text]: target, anchors and
# absolute URLs left out; a target is relative to the file that holds it.
for md in README.md docs/*.md; do
  dir=$(dirname "$md")
  while IFS= read -r target; do
    t=${target%%#*}
    t=${t%% *}
    [ -z "$t" ] && continue
    case $t in http://* | https://* | mailto:* | /*) continue ;; esac
    if [ ! -e "$dir/$t" ]; then
      echo "$md: broken link: $target"
      bad=1
    fi
  done < <(grep -oE '\]\([^)]+\)' "$md" | sed -E 's/^\]\(//; s/\)$//'
           grep -oE '^\[[^]]+\]: *[^ ]+' "$md" | sed -E 's/^\[[^]]+\]: *//')
done

# 2. Citations of files outside the repository.
pattern='DESIGN\.md|ANCHORS\.md|GPU_MACHINE\.md|docs/ANCHORS'
if command -v git > /dev/null && git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  hits=$(git grep -nE "$pattern" -- src tests bench scripts docs README.md ':!tests/docs/docs_links_test.sh')
else
  hits=$(grep -rnE "$pattern" src tests bench scripts docs README.md --exclude=docs_links_test.sh)
fi
if [ -n "$hits" ]; then
  echo "cites a file that is not in the repository (say what the code does instead):"
  echo "$hits"
  bad=1
fi

if ((bad)); then exit 1; fi
echo "docs links: every relative link resolves; no citation of files outside the repository"
