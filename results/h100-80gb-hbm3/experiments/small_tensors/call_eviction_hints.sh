#!/usr/bin/env bash
# In the H100 lab run (results/h100-80gb-hbm3), triton.looped (two reads, L2 eviction hints) beat every 1R+1W kernel
# at float32 4096x512 (9.2 us against register_cached's 10.5), where its twin without the hints did not (11.0).
# Is that real? Interleaved rounds at the small tensors, the hints on and off, beside register_cached (auto's
# route) and triton.multirow. Carries .labso/cur.so.xz (the build); no peers needed.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu_hints.txt
xz -dc .labso/cur.so.xz >lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
V=triton.looped,triton.looped_no_hints,cuda.register_cached,triton.multirow
{ python scripts/interleave.py --variants $V --dtype float32 --rounds 9 \
    --shape 4096x256 --shape 4096x512 --shape 4096x1024 --shape 16384x512
  python scripts/interleave.py --variants $V --dtype bfloat16 --rounds 9 --shape 4096x512 --shape 4096x1024
} 2>&1 | grep -v "^\s*$" | tee $OUT/eviction_hints.txt
