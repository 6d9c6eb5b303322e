#!/usr/bin/env bash
# The first of the calls after the lean shapes went into register_cached's table (16-bit N <= 128, 257-512 and
# 513-1024, float32 257-512): the build carried (.labso), the peers' first half kept in /tmp/peers (.peersA) for the
# lab run after it, and the GPU tests of register_cached and auto (the lean routes among them).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
[ -f .peersA/irpart.aa ] && mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_cached or auto" 2>&1 | tail -4 |
  tee $OUT/gpu_tests_route.txt
