#!/usr/bin/env bash
# The first of three calls on one warm H200, carrying .labso (the build) and .peersA (the first half of the peers'
# compiler library, kept in /tmp/peers for scan_call.sh). Timed beside cluster's table (cuda.cluster) and a copy
# of the same bytes, in interleaved rounds (results/h200/experiments/cluster_lean/lean_vs_plan.py, EXTRA shapes by
# index of torch.ops.lab_tune.cluster_shapes, one cluster per row), where the lab trailed QuACK off the sweeps:
# - bfloat16 rows of 16385-28671 elements (512 x 64 packed on one CTA in the table): 2 to 4 CTAs of smaller shapes;
# - float32 rows of 16385-32768 (256 x 16 on 8 CTAs): the same shapes on fewer CTAs, and larger shapes on 2 to 4;
# - rows of 524288 with few rows (float32 512 x 64 on 16 CTAs, bfloat16 512 x 64 as floats on 16, both persistent):
#   one cluster per row, and bfloat16's packed shapes;
# - bfloat16 rows of 1048576 (the streaming path, two reads): 512 x 128 packed on 16 CTAs, loaded straight or staged.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
[ -f .peersA/irpart.aa ] && mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
lvp=results/h200/experiments/cluster_lean/lean_vs_plan.py
{
  EXTRA="20:2 21:2 31:2 34:2 18:3 33:3 18:4 33:4 26:1 27:1" python $lvp \
    bfloat16 4096x18432 4096x20480 4096x24576 4096x26624 1024x20480 256x20480
  EXTRA="13:5 13:6 13:7 13:8 12:5 12:6 12:8 14:3 14:4 15:2 16:2 16:3 17:1" python $lvp \
    float32 4096x18432 4096x20480 4096x22528 4096x24576 4096x28672 4096x32768 1024x20480 256x20480
  EXTRA="17:16" python $lvp float32 16x524288 64x524288 256x524288
  EXTRA="11:16 23:16 26:16 27:16 29:8 30:8" python $lvp bfloat16 16x524288 64x524288 256x524288
  EXTRA="29:16 30:16" python $lvp bfloat16 1x1048576 16x1048576 64x1048576
} 2>&1 | grep -v "^\[" | tee $OUT/cluster.txt
echo "== done $(date -u +%T)"
