#!/usr/bin/env bash
# After the off-sweep entries (cluster.cu's plans, register_cached.cu's 208, 1536, 3072 and 6144 entries): the first
# of the chain's calls on one warm H200, carrying .labso (the build) and .peersA (kept in /tmp/peers for the lab
# call): the GPU tests of cluster, register_cached, auto and the stagger (every tuning shape among them).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
[ -f .peersA/irpart.aa ] && mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
timeout 560 python -m pytest -q -p no:cacheprovider -x -rfE --tb=short tests/test_gpu.py tests/test_dispatch.py \
  tests/test_stagger.py tests/test_cluster_rows.py -k "cluster or auto or stagger or register_cached" 2>&1 |
  tail -15 | tee $OUT/gpu_tests_route.txt
