#!/usr/bin/env bash
# Does the H100 show the H200's small-tensor gaps of register_cached (auto's route there) to QuACK? If it does,
# the H100 can test changes for them. The call after results/h200/experiments/retune_ca_dc0b5d3/call.sh (which
# left the first half of the peers' library in /tmp/peers) on the same warm machine: carries .peersB, .peers2 and
# .labso. Interleaved rounds (scripts/interleave.py), each variant checked against float64 first.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
cp .peersB/irpart.ab /tmp/peers/ && cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
xz -dc .labso/cur.so.xz >lab/_C.abi3.so || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
V=cuda.register_cached,peer.quack,lab.auto
{ python scripts/interleave.py --variants $V --dtype bfloat16 --rounds 9 \
    --shape 4096x128 --shape 4096x512 --shape 4096x1024 --shape 4096x2048
  python scripts/interleave.py --variants $V --dtype float32 --rounds 9 --shape 4096x1024 --shape 4096x2048
} 2>&1 | grep -v "^\s*$" | tee $OUT/interleave.txt
