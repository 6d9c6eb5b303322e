#!/usr/bin/env bash
# The four sanitizers over cluster.cu's new 256-thread packed shapes of 40 and 48 elements, every dtype they run in,
# persistent and not (scripts/sanitize_driver.py's tuning shapes). Run by check_call.sh, or alone on a machine
# where check_call.sh unpacked the build, carrying .peersA (its part kept in /tmp/peers for time_call.sh).
set -uo pipefail
source scripts/device_call.sh
require_h200
keep_peer_parts
unpack_build
lab_env
labels=(); for l in 256x40s0P 256x40s1P 256x48s0P 256x48s1P; do labels+=(--tuning-label "$l"); done
timeout 200 bash scripts/sanitize.sh build/sanitizer --op softmax --tuning-shapes-only "${labels[@]}" 2>&1 |
  tee "$OUT/sanitize_shapes.txt"
exit "${PIPESTATUS[0]}"
