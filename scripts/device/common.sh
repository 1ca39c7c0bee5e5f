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

# engine_setup: what engine.sh and serve.sh need from .devcarry (docs/DEVICE.md):
# the SmolLM2 model joined from the parts .devcarry/m1, m2, m3 into models/
# (checked by SHA-256; an ignored path, so it stays between calls of a warm
# machine), /work/main linked to this checkout (the binaries' compiled-in
# paths) where it is missing, and .devcarry/bin/*.xz decompressed into
# .devcarry/run. Sets M (the model file) and B (the binaries' folder); needs $SUM.
engine_setup() {
  M=models/SmolLM2-135M-Instruct.Q4_1.gguf
  local sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 z b
  mkdir -p models .devcarry/run
  if ! echo "$sha  $M" | sha256sum -c --status 2>/dev/null; then
    cat .devcarry/m1/* .devcarry/m2/* .devcarry/m3/* > "$M" 2>/dev/null
    echo "$sha  $M" | sha256sum -c --status || { echo "model parts missing or corrupt" | tee -a "$SUM"; ls -la .devcarry/*; exit 3; }
  fi
  [ -e /work/main ] || { mkdir -p /work && ln -sfn "$PWD" /work/main; }
  for z in .devcarry/bin/*.xz; do
    [ -e "$z" ] || continue
    b=.devcarry/run/$(basename "$z" .xz)
    xz -dc "$z" > "$b" && chmod +x "$b"
  done
  B=.devcarry/run
}
