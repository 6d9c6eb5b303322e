#!/usr/bin/env bash
# The first of three calls on one warm machine, carrying .labso (the build with cluster.cu's one-row shapes,
# 256x64s1R and 128x64s1R) and .peersB (its part of the peers' compiler library kept in /tmp/peers for
# time_call.sh): the GPU tests of cluster (the one-row shapes on every cluster size, their persistent launches
# refused), the tuning script and auto's explanations, then the four sanitizers over the one-row shapes.
# Then a call carrying .peersA (`source scripts/device_call.sh; require_h200; keep_peer_parts`), then
# time_call.sh carrying .peers2.
set -uo pipefail
source scripts/device_call.sh
begin_call
timeout 330 python -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_gpu.py tests/test_dispatch.py \
  tests/test_tune_cluster.py -k "cluster or explain" 2>&1 | grep -E "^(FAILED|ERROR)|passed|failed" |
  tee "$OUT/gpu_tests.txt"
status=${PIPESTATUS[0]}
labels=(); for l in 256x64s1R 128x64s1R; do labels+=(--tuning-label "$l"); done
timeout 200 bash scripts/sanitize.sh build/sanitizer --op softmax --tuning-shapes-only "${labels[@]}" 2>&1 |
  tee "$OUT/sanitize_shapes.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit "$status"
