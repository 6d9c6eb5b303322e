#!/usr/bin/env bash
# The first of three calls on one warm H200: the build carried (.labso), the peers' first half kept in /tmp/peers
# (.peersA) for tune_call.sh, and the lean tuning shapes added for rows of 1024 to 4096 elements checked: their GPU
# tests, then the four sanitizers over them. The second call: `mkdir -p /tmp/peers && cp .peersB/irpart.ab
# /tmp/peers/` carrying .peersB; the third: tune_call.sh carrying .peers2.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/ || exit 1
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_cached_tune_shape" 2>&1 | tail -2 |
  tee $OUT/gpu_tests.txt
labels=""
for l in 32x32/32L 64x32/64L 128x16/128L 256x8/256L 128x32/128L 256x16/256L; do labels="$labels --tuning-label $l"; done
bash scripts/sanitize.sh build/sanitizer_lean --op softmax --tuning-shapes-only $labels 2>&1 | tee $OUT/sanitize.txt
