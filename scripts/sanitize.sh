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
# Softmax's kernels are named *softmax_kernel*: a kernel-name filter instruments only them (not torch's
# input generation). The other operators run unfiltered: slower, but nothing of theirs goes unwatched.
run_tool() {  # tool, log, filter args..., -- driver args...
  local tool=$1 log=$2; shift 2
  local filter=(); while [ "$1" != "--" ]; do filter+=("$1"); shift; done; shift
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$SAN" --tool "$tool" "${filter[@]}" --error-exitcode 9 \
    "$PY" scripts/sanitize_driver.py "$@" >>"$log" 2>&1
}
for tool in memcheck racecheck synccheck; do
  log="$LOGS/$tool.log"
  : >"$log"
  run_tool "$tool" "$log" --kernel-name kns=softmax_kernel -- --op softmax
  rc=$?
  run_tool "$tool" "$log" -- --op vector_add --op softmax_backward
  rc2=$?
  [ "$rc" -eq 0 ] && rc=$rc2
  echo "compute-sanitizer --tool $tool (exit $rc): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tr '\n' ' ')"
  grep -E ": ran" "$log" | sed 's/^/  /'
  [ "$rc" -eq 0 ] || { status=1; grep -m 20 -E "=========" "$log"; }
done
exit $status
