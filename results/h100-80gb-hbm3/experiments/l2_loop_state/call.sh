#!/usr/bin/env bash
# One device call: (1) ncu in the L2 state a timed call meets (scripts/profile.sh with PROFILE_CACHE=none: the
# lab's L2 reset, a 256 MB write before every call, ncu's cache control off) at the weakest points of the 4c37e70
# run, auto's kernel beside the variant that beat it there; (2) an A/B (scripts/ab.sh ab): every cp.async of
# register_cached, cluster and tiled_rows with an L2::evict_first cache policy (ab/csrc/include/lab/async_copy.cuh,
# kept here as candidate_async_copy.diff).
# Asked: does a timed call write back more of the flush's dirty lines in the lab's kernel than in the one that beat
# it, and does marking the staged reads evict-first (their lines the first to go, not the flush's) shorten it?
set -uo pipefail
here=$(dirname "$0")
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ [ -f .labso/cur.so.xz ] && xz -dc .labso/cur.so.xz > lab/_C.abi3.so; } || bash build.sh | tail -1
for pt in "cuda.register_cached 4096x1024 float32" "torch.compile 4096x1024 float32" \
          "cuda.register_cached 4096x128 bfloat16" "triton.multirow 4096x128 bfloat16" \
          "cuda.register_cached 16384x4096 bfloat16" "triton.multirow 16384x4096 bfloat16"; do
  echo "== loop-state ncu $pt $(date -u +%T)"; PROFILE_CACHE=none bash scripts/profile.sh $pt
done 2>&1 | tee $OUT/loop_state.txt
bash scripts/ab.sh ab bash "$here/measure.sh" 2>&1 | tee $OUT/ab.txt
echo "== done $(date -u +%T)"
