#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the tuning shapes that group_blocks added
# (register_cached's block groups sharing a block, and a warp a row in blocks of 32), in every dtype they hold,
# on whatever card comes (the kernels are the same on an H100 and an H200).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu_sanitize.txt
bash build.sh | tail -1
labels=""
for l in 64x8/128P 64x8/128 64x8/128PS 32x16/32P 32x16/32 32x32/32P 32x32/32 64x16/128P 64x16/128; do
  labels="$labels --tuning-label $l"
done
bash scripts/sanitize.sh build/sanitizer_group_blocks --op softmax --tuning-shapes-only $labels 2>&1 |
  tee $OUT/sanitize.txt
