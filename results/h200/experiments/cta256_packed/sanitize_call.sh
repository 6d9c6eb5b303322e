#!/usr/bin/env bash
# The four sanitizers over cluster.cu's new 256-thread packed shapes of 40 and 48 elements, every dtype they run in,
# persistent and not (scripts/sanitize_driver.py's tuning shapes). Run by check_call.sh, or alone on a machine
# where check_call.sh unpacked the build, carrying .peersA (its part kept in /tmp/peers for time_call.sh).
set -uo pipefail
[ -f .peersA/irpart.aa ] && mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/
[ -f lab/_C.abi3.so ] || { echo "no build: run check_call.sh first"; exit 1; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
labels=(); for l in 256x40s0P 256x40s1P 256x48s0P 256x48s1P; do labels+=(--tuning-label "$l"); done
timeout 200 bash scripts/sanitize.sh build/sanitizer --op softmax --tuning-shapes-only "${labels[@]}" 2>&1 |
  tee $OUT/sanitize_shapes.txt
