#!/usr/bin/env bash
# The first of two calls on one warm H200: the build carried (.labso), the peers' compiler library kept in
# /tmp/peers (.peersA; .peersB comes in a call between, `mkdir -p /tmp/peers && cp .peersB/irpart.ab /tmp/peers/`,
# since the tree passes the carry's 64 MiB with both) for tune_call.sh, and the lean tuning shapes checked: their GPU tests, then the
# four sanitizers over the lean shapes added for the fixed sweep's row lengths.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/ || exit 1
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_cached_tune_shape" 2>&1 | tail -2 |
  tee $OUT/gpu_tests.txt
labels=""
for l in ${LABELS:-8x4/128L 16x4/128L 32x4/128L 16x8/128L 32x8/128L 16x16/128L 32x16/128L 64x16/128L 4x8/128L \
         8x8/128L 8x16/128L 64x16/128L 128x8/128L 32x32/128L}; do labels="$labels --tuning-label $l"; done
bash scripts/sanitize.sh build/sanitizer_lean --op softmax --tuning-shapes-only $labels 2>&1 | tee $OUT/sanitize.txt
