#!/usr/bin/env bash
# One device call on an H200: ncu at three of the weakest points of the 4c37e70 run, auto's kernel beside the
# variant that beat it there (or, for QuACK's points, the lab's own triton.multirow), each twice: in the L2 state a
# timed call meets (PROFILE_CACHE=none: the lab's reset and a 256 MB write before every call, ncu's cache control
# off) and with ncu's own cache control (PROFILE_CACHE=all), the same four calls and metrics.
# Asked: is the kernel that trails in the timed run slower in the loop's state than under ncu's, and by how much
# more than the kernel that beat it?
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ [ -f .labso/cur.so.xz ] && xz -dc .labso/cur.so.xz > lab/_C.abi3.so; } || bash build.sh | tail -1
export PROFILE_METRICS=sm__cycles_active.avg,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum
for pt in "cuda.register_cached 4096x1024 float32" "torch.compile 4096x1024 float32" \
          "cuda.register_cached 4096x512 bfloat16" "triton.multirow 4096x512 bfloat16" \
          "cuda.register_cached 4096x128 bfloat16" "triton.multirow 4096x128 bfloat16"; do
  for cache in none all; do
    echo "== ncu $cache $pt $(date -u +%T)"; PROFILE_CACHE=$cache bash scripts/profile.sh $pt
  done
done 2>&1 | tee $OUT/loop_state.txt
echo "== done $(date -u +%T)"
