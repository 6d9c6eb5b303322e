#!/usr/bin/env bash
# After bfloat16 rows of 32768 elements, 1024 rows or more, took 256 x 64 packed and staged on 2 CTAs (cluster.cu,
# kPlan16): the build carried (.labso), the peers' first half kept in /tmp/peers (.peersA) for the calls after it,
# the GPU tests of cluster and auto, the four sanitizers over cuda.cluster's and cuda.auto's whole variant path
# (each entry for many rows among its shapes) and over the staged shapes' tuning launches.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
[ -f .peersA/irpart.aa ] && mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_dispatch.py tests/test_stagger.py \
  tests/test_cluster_rows.py -k "cluster or auto or stagger" 2>&1 | tail -4 | tee $OUT/gpu_tests_route.txt
bash scripts/sanitize.sh build/sanitizer --op softmax --variant cuda.cluster --variant cuda.auto 2>&1 |
  tee $OUT/sanitize_route.txt
bash scripts/sanitize.sh build/sanitizer_staged --op softmax --tuning-shapes-only --tuning-label 256x64s1P --tuning-label 128x64s1P --tuning-label 128x128s1P 2>&1 |
  tee $OUT/sanitize_staged.txt
