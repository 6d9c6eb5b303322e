#!/usr/bin/env bash
# The lean tuning shapes of rows of 4096 elements (128 x 32 / 128 and 256 x 16 / 256) at the fixed sweep's 16384x4096,
# a grid of more than one wave, beside register_cached's table, lab.auto and the lab's Triton kernels that have led
# auto there (triton.multirow in bfloat16, triton.fused in float32), in interleaved rounds; the tutorial's 4096x4096
# beside them. One call on an H200, carrying .labso (2c08e57's build); the peers are not installed.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for dtype in bfloat16 float32; do
  python scripts/tune_register_cached.py --dtype $dtype --shape 16384x4096 --shape 4096x4096 \
    --variants lab.auto,triton.multirow,triton.fused --rounds 9 --reps 50 --json $OUT/tune_$dtype.json
done 2>&1 | grep -v "^\[" | tee $OUT/tune.txt
