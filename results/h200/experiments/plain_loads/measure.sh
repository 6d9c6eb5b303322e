#!/usr/bin/env bash
# The A/B's measurement (AB=A or B): cuda.auto beside triton.multirow (unchanged: the drift between the builds) in
# interleaved rounds, at the sweeps' points where auto runs register_cached.
set -uo pipefail
python scripts/interleave.py --variants cuda.auto,triton.multirow --dtype bfloat16 --rounds 5 --reps 100 \
  --shape 4096x128 --shape 4096x512 --shape 4096x1024 --shape 4096x4096 --shape 524288x128 --shape 65536x1024 \
  --shape 16384x4096 2>&1 | grep -v "^\["
python scripts/interleave.py --variants cuda.auto,triton.multirow --dtype float32 --rounds 5 --reps 100 \
  --shape 4096x128 --shape 4096x512 --shape 4096x1024 --shape 2097152x32 --shape 262144x256 --shape 65536x1024 \
  --shape 4096x8192 2>&1 | grep -v "^\["
