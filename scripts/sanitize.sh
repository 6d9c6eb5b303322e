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
# lab's, but for lab.linear_cross_entropy's matmuls (cuBLAS). synccheck leaves cuBLAS's Hopper kernels (nvjet_*) out.
# racecheck watches them: with them left out it stopped at the head's bfloat16 case on "Internal Sanitizer Error: The
# Sanitizer failed to handle a hardware exception"; watched, it reports hazards inside their split-K kernels, which
# are not the lab's to fix. A racecheck run passes when the driver ran to its end and every hazard it counted is
# displayed and lies in nvjet kernels on both sides (cublas_only). initcheck watches every kernel (a kernel it does
# not watch would leave what it writes looking uninitialized). The driver learns which tool runs (SANITIZER_TOOL):
# initcheck skips the head's section, synccheck many clusters of 16 CTAs.
cublas_only() {  # LOG: racecheck's log shows every hazard it counted, each between two accesses in nvjet_* kernels,
  # and no other error; the driver ran to its end
  local log=$1 shown displayed counted sides
  grep -qE "Target application returned an error|Internal Sanitizer Error" "$log" && return 1
  shown=$(grep -cE "(Error|Warning): Race reported between" "$log")
  displayed=$(grep -oE "RACECHECK SUMMARY: [0-9]+ hazards? displayed" "$log" | grep -oE "[0-9]+" | tail -1)
  counted=$(grep -oE "RACECHECK SUMMARY: [0-9]+ hazards? displayed \([0-9]+ errors?, [0-9]+ warnings?\)" "$log" |
    tail -1 | grep -oE "[0-9]+ (errors?|warnings?)" | awk '{n += $1} END {print n + 0}')
  [ "$shown" -gt 0 ] && [ "$shown" = "${displayed:-}" ] && [ "$shown" -eq "$counted" ] || return 1
  sides=$(grep -oE "(Race reported between|and) (Read|Write) access at [^+ ]+" "$log")
  [ "$(grep -c . <<<"$sides")" -eq $((2 * shown)) ] && ! grep -vq "access at nvjet_" <<<"$sides"
}
for tool in ${TOOLS:-memcheck racecheck synccheck initcheck}; do
  log="$LOGS/$tool.log"
  options=()
  case "$tool" in
    racecheck) options=(--print-limit 100000) ;;
    synccheck) options=(--kernel-name-exclude kns=nvjet) ;;
  esac
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} SANITIZER_TOOL=$tool "$SAN" --tool "$tool" "${options[@]}" \
    --error-exitcode 9 "$PY" scripts/sanitize_driver.py "$@" >"$log" 2>&1
  rc=$?
  summary=$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)
  if [ "$tool" = racecheck ] && [ "$rc" -ne 0 ] && cublas_only "$log"; then
    rc=0 summary="0 hazards in the lab's kernels; $summary, every one inside cuBLAS's nvjet_* kernels"
  fi
  echo "compute-sanitizer --tool $tool (exit $rc): $summary"
  grep -E ": ran|: not run" "$log" | sed 's/^/  /'  # what the driver ran, and each section it left out
  [ "$rc" -eq 0 ] || { status=1; grep -m 20 -E "=========" "$log"; }
done
exit $status
