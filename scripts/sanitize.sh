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
# The driver makes its inputs on the CPU and checks its outputs there, so the kernels it runs on the GPU are the
# lab's, but for lab.linear_cross_entropy's matmuls (cuBLAS). racecheck and synccheck leave cuBLAS's Hopper kernels
# (nvjet_*) out: racecheck reports hazards inside its split-K kernels, which are not the lab's to fix. initcheck
# watches every kernel (a kernel it does not watch would leave what it writes looking uninitialized). The driver
# learns which tool runs (SANITIZER_TOOL): initcheck skips the head's section, synccheck many clusters of 16 CTAs.
for tool in ${TOOLS:-memcheck racecheck synccheck initcheck}; do
  log="$LOGS/$tool.log"
  filter=()
  case "$tool" in racecheck|synccheck) filter=(--kernel-name-exclude kns=nvjet) ;; esac
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} SANITIZER_TOOL=$tool "$SAN" --tool "$tool" "${filter[@]}" \
    --error-exitcode 9 "$PY" scripts/sanitize_driver.py "$@" >"$log" 2>&1
  rc=$?
  echo "compute-sanitizer --tool $tool (exit $rc): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
  grep -E ": ran" "$log" | sed 's/^/  /'
  [ "$rc" -eq 0 ] || { status=1; grep -m 20 -E "=========" "$log"; }
done
exit $status
