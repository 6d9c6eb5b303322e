#!/usr/bin/env bash
# The first of three calls on one warm H200, carrying .labso (the build with cluster.cu's four 256-thread packed
# shapes of 40 and 48 elements) and .peersB (its part of the peers' compiler library kept in /tmp/peers for
# time_call.sh; .peersA with this build would pass the 64 MiB a call may carry): the GPU tests of
# cluster, register_cached, auto and the stagger (the new shapes on every cluster size, and both sides of every
# plan entry's end among them), then the four sanitizers over the new shapes
# (sanitize_call.sh).
set -uo pipefail
source scripts/device_call.sh
begin_call
timeout 400 python -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_gpu.py tests/test_dispatch.py \
  tests/test_stagger.py tests/test_cluster_rows.py -k "cluster or auto or stagger or register_cached" 2>&1 |
  tail -15 | tee "$OUT/gpu_tests.txt"
status=${PIPESTATUS[0]}
if [ "${SKIP_SANITIZE:-}" != 1 ]; then
  bash results/h200/experiments/cta256_packed/sanitize_call.sh || status=1
fi
exit "$status"
