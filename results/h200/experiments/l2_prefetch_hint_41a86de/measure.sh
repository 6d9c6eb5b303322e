#!/usr/bin/env bash
# both dtypes, the points where auto trails QuACK; cuda.auto beside peer.quack (unchanged: the drift between builds)
python scripts/interleave.py --variants cuda.auto,peer.quack --dtype bfloat16 --rounds 5 --reps 100 \
  --shape 4096x128 --shape 4096x2048 --shape 524288x128 --shape 1048576x64 --shape 262144x256 \
  --shape 1024x65536 --shape 4096x65536 --shape 4096x32768 2>&1 | grep -v "^\s*$"
python scripts/interleave.py --variants cuda.auto,peer.quack --dtype float32 --rounds 5 --reps 100 \
  --shape 4096x128 --shape 4096x1024 --shape 2097152x32 --shape 524288x128 --shape 262144x256 \
  --shape 131072x512 --shape 4096x32768 2>&1 | grep -v "^\s*$"
