#!/usr/bin/env bash
# After many float32 rows of 2049-4096 elements took the lean kernel (RowShape.lean_many 128 x 32 / 128): the build
# carried (.labso), the GPU tests of register_cached and auto, the four sanitizers over cuda.register_cached's and
# cuda.auto's whole variant path (1300x4096 among its shapes, many such rows), then the same timing as tune_call.sh
# in float32, where the table should now read as the lean shape.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_cached or auto" 2>&1 | tail -4 |
  tee $OUT/gpu_tests_route.txt
bash scripts/sanitize.sh build/sanitizer --op softmax --variant cuda.register_cached --variant cuda.auto 2>&1 |
  tee $OUT/sanitize_route.txt
python scripts/tune_register_cached.py --dtype float32 --shape 16384x4096 --shape 4096x4096 \
  --variants lab.auto,triton.multirow,triton.fused --rounds 9 --reps 50 --json $OUT/tune_route_float32.json 2>&1 |
  grep -v "^\[" | tee $OUT/tune_route.txt
