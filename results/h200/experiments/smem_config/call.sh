#!/usr/bin/env bash
# One device call on an H200: scripts/primer.py at the tutorial sweep's small tensors, where the kernels' own
# durations in the loop's L2 state are level (results/h100-80gb-hbm3/experiments/loop_state/, and the H200's in
# this folder's README) but the timed calls are not. Asked: does the shared-memory configuration the SM is in when
# a timed call starts (the flush's, or a primer's) count in the call's time?
# FLUSH_MB: the flush before each primer and call (default 1024; the first run, primer_flush256.txt, used the lab's
# 256 and was host-bound where a primer ran: see scripts/primer.py).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ [ -f .labso/cur.so.xz ] && xz -dc .labso/cur.so.xz > lab/_C.abi3.so; } || bash build.sh | tail -1
{
python scripts/primer.py --variants cuda.register_cached,torch.compile,triton.multirow \
  --primers cuda.register_cached,triton.multirow --shape 4096x1024 --shape 4096x512 --shape 4096x128 \
  --dtype float32 --rounds 7 --reps 200 --flush-mb ${FLUSH_MB:-1024}
python scripts/primer.py --variants cuda.register_cached,triton.multirow \
  --primers cuda.register_cached,triton.multirow --shape 4096x512 --shape 4096x128 --shape 4096x1024 \
  --dtype bfloat16 --rounds 7 --reps 200 --flush-mb ${FLUSH_MB:-1024}
} 2>&1 | grep -v "^\[" | tee $OUT/primer_flush${FLUSH_MB:-1024}.txt
echo "== done $(date -u +%T)"
