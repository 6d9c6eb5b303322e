#!/usr/bin/env bash
# bfloat16 rows of 16385-28671 elements (kPlan16's 512 x 64 packed entry on one CTA), where call3/ found the table at
# 92.96 us against QuACK's 85.70 at 4096x20480: the resident shapes that split such rows over 2 to 4 CTAs, packed,
# loaded straight or staged, beside the table, in interleaved rounds (results/h200/experiments/cluster_lean/
# lean_vs_plan.py). One call, the build carried
# (.labso); the peers are not installed.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
EXTRA="20:2 21:2 31:2 34:2 18:3 33:3 18:4 33:4 26:1 27:1" python results/h200/experiments/cluster_lean/lean_vs_plan.py \
  bfloat16 4096x18432 4096x20480 4096x24576 4096x26624 1024x20480 256x20480 2>&1 | grep -v "^\[" | tee $OUT/mid.txt
