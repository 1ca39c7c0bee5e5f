#!/usr/bin/env bash
# scripts/gpu-check.sh's command line, on any machine: the step list, the
# options that refuse a bad value, and the exclusive selections. Every case
# here ends before the script looks for a GPU, so it runs nothing on one.
#   tests/scripts/gpu_check_test.sh [REPO]
set -u
ROOT=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
S=$ROOT/scripts/gpu-check.sh
fails=0
check() { # check NAME WANT_RC PATTERN ARGS...: exit status WANT_RC and output matching PATTERN
  local name=$1 want=$2 pat=$3 out rc
  shift 3
  out=$(bash "$S" "$@" 2>&1)
  rc=$?
  if [ "$rc" != "$want" ] || ! grep -qE -e "$pat" <<< "$out"; then
    echo "FAIL $name: rc $rc (want $want), output:"
    sed 's/^/  /' <<< "$out" | head -20
    fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
check list 0 '^gpu_kernel_tests +test' --list
check list_engine_tests 0 '^gpu_engine_tests +test' --list
check list_ends_with_perplexity 0 'perplexity_prefill +bench' --list
check help 0 '--jobs N' --help
check unknown_option 2 'unknown option --frobnicate' --frobnicate
check jobs_zero 2 '--jobs 0: a number of tests at a time' --jobs 0
check jobs_word 2 '--jobs many' --jobs many
check only_unknown_step 2 "no step named 'nosuch'" --only nosuch
check exclusive 2 'exclude each other' --tests-only --benchmarks-only
# Every step --list names has a limit and a kind of test or bench.
steps=$(bash "$S" --list | awk '$2 != "test" && $2 != "bench" {print $1}')
if [ -n "$steps" ]; then
  echo "FAIL steps without a kind: $steps"
  fails=$((fails + 1))
fi
((fails == 0)) && echo "gpu_check_test: all passed" || echo "gpu_check_test: $fails failed"
exit $((fails > 0))
