#!/usr/bin/env bash
# compute-sanitizer memcheck, racecheck, synccheck and initcheck over every CUDA variant and every launch shape
# compiled for tuning (scripts/sanitize_driver.py).
# Needs a GPU and a built lab._C. Prints each tool's summary; exits non-zero if any tool reports
# an error. Usage: bash scripts/sanitize.sh [log dir] [sanitize_driver.py options]
#   e.g. bash scripts/sanitize.sh build/sanitizer --op softmax --variant cuda.register_cached
# TOOLS="memcheck racecheck" picks the tools (default: all four).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
LOGS=${1:-build/sanitizer}
shift $(( $# > 0 ? 1 : 0 ))  # the rest go to the driver
mkdir -p "$LOGS"
status=0
# No kernel-name filter: the driver makes its inputs on the CPU and checks its outputs there, so the
# only kernels it runs on the GPU are the lab's, and each tool watches all of them.
for tool in ${TOOLS:-memcheck racecheck synccheck initcheck}; do
  log="$LOGS/$tool.log"
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$SAN" --tool "$tool" --error-exitcode 9 \
    "$PY" scripts/sanitize_driver.py "$@" >"$log" 2>&1
  rc=$?
  echo "compute-sanitizer --tool $tool (exit $rc): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
  grep -E ": ran" "$log" | sed 's/^/  /'
  [ "$rc" -eq 0 ] || { status=1; grep -m 20 -E "=========" "$log"; }
done
exit $status
