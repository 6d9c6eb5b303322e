#!/usr/bin/env bash
# After the few-rows lean shapes of 128 and 1024 changed (lean_tutorial): the build carried
# (.labso), the peers' first half kept in /tmp/peers (.peersA) for the calls after it, the GPU tests of
# register_cached and auto, and the four sanitizers over cuda.register_cached's and cuda.auto's whole variant path
# (few and many rows of whole packs among its shapes).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
[ -f .peersA/irpart.aa ] && mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_cached or auto" 2>&1 | tail -4 |
  tee $OUT/gpu_tests_route.txt
bash scripts/sanitize.sh build/sanitizer --op softmax --variant cuda.register_cached --variant cuda.auto 2>&1 |
  tee $OUT/sanitize_route.txt
