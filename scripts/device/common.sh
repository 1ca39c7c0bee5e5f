# Shared by the scripts in scripts/device/ (sourced, not run).
#
# step NAME LIMIT CMD...: runs CMD with a time limit, appends its output to
# $LOG and one line (rc, seconds, the lines matching $STEP_GREP) to $SUM.
STEP_GREP=${STEP_GREP:-'PASSED|FAILED|ERROR SUMMARY|RACECHECK SUMMARY|TARGET|largest'}
step() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "===== $name: $*" >> "$LOG"
  timeout "$limit" "$@" > "$OUT/$name.tmp" 2>&1
  local rc=$?
  cat "$OUT/$name.tmp" >> "$LOG"
  echo "$name rc=$rc $((SECONDS - t0))s | $(grep -E "$STEP_GREP" "$OUT/$name.tmp" | tail -6 | tr '\n' ' ')" >> "$SUM"
  rm -f "$OUT/$name.tmp"
  return $rc
}
