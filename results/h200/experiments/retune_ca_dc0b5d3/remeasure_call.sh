#!/usr/bin/env bash
# The near ties of lab_call.sh's run (build/last/h200/results.json, left on the warm machine), timed three times
# with the peers that call installed in /tmp/site. Pass the run's LAB_COMMIT here too: without it the runs record the
# device copy's git HEAD, which can be stale (the 4c37e70 run's re-measures read dd52ad7).
set -uo pipefail
# ANY_GPU=1: on whatever card came, as lab_call.sh.
[ "${ANY_GPU:-}" = 1 ] || nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 ||
  { echo "not an H200: stopping"; exit 3; }
[ -f build/last/h200/results.json ] && [ -d /tmp/site ] || { echo "no lab run or peers here (the machine went cold?)"; exit 1; }
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
CARRIED_SO=${CARRIED_SO:-here} bash scripts/h200.sh remeasure build/last/h200/results.json
