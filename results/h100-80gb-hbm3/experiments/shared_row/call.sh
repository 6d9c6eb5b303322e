#!/usr/bin/env bash
# register_cached with a few-rows shape for 16-bit rows of 1025 to 2048 elements that keeps each row in shared
# memory (SHARED_ROW: the staged packs read again for each pass, not held in registers), so that it fits 32
# registers and 32 blocks of 64 threads per SM: the tutorial's 4096 rows of 2048 in one wave of 4224 blocks on
# 132 SMs, where the table's shape (48 registers, 21 blocks per SM) takes 1.48 waves. Against the committed kernel.
# Carries .labso: cur.so.xz (A: csrc as at dc0b5d3, comments aside the same as HEAD's parent) and b.so.xz (B: the
# candidate). Both builds timed in separate processes, A B A B, each in interleaved rounds beside cuda.online and
# triton.multirow (no change between the sides: the drift between processes).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
V=cuda.register_cached,cuda.online,triton.multirow
for side in A B A B; do
  so=.labso/cur.so.xz; [ $side = B ] && so=.labso/b.so.xz
  xz -dc $so >lab/_C.abi3.so || { echo "unpack failed"; break; }
  echo "== $side $(date -u +%T)"
  python scripts/interleave.py --variants $V --dtype bfloat16 --rounds 5 --shape 4096x2048 --shape 4000x2048 \
    --shape 2048x2048 --shape 4096x1536 --shape 4096x2047 --shape 32768x2048 | sed "s/^/$side /"
  python scripts/interleave.py --variants $V --dtype float16 --rounds 5 --shape 4096x2048 | sed "s/^/$side /"
done 2>&1 | grep -v "^. *$" | tee $OUT/ab.txt
echo "== done $(date -u +%T)"
