#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck and synccheck over every CUDA variant (scripts/sanitize_driver.py).
# Needs a GPU and a built lab._C. Prints each tool's summary; exits non-zero if any tool reports
# an error. Usage: bash scripts/sanitize.sh [log dir]
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
LOGS=${1:-build/sanitizer}
mkdir -p "$LOGS"
status=0
for tool in memcheck racecheck synccheck; do
  log="$LOGS/$tool.log"
  # --kernel-name kns=softmax_kernel: only the lab's kernels are instrumented (not torch's input generation).
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$SAN" --tool "$tool" --kernel-name kns=softmax_kernel --error-exitcode 9 "$PY" scripts/sanitize_driver.py >"$log" 2>&1
  rc=$?
  echo "compute-sanitizer --tool $tool (exit $rc): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
  grep -E "^[a-z_]+: ran" "$log" | sed 's/^/  /'
  [ "$rc" -eq 0 ] || { status=1; grep -m 20 -E "=========" "$log"; }
done
exit $status
