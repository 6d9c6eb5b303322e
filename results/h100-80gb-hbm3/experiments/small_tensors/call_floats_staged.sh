#!/usr/bin/env bash
# register_cached's tuning shapes at the small bfloat16 tensors, with six new ones that hold 16-bit rows as
# floats and stage them (QuACK's way: a warp a row, one exponential per element), beside QuACK and lab.auto, in
# interleaved rounds. The call after a call that left the first half of the peers' library in /tmp/peers (the
# retune call.sh): carries .peersB, .peers2 and .labso/exp.so.xz (the build with the new shapes).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu_floats_staged.txt
if [ ! -d /tmp/site ]; then
  cp .peersB/irpart.ab /tmp/peers/ && cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
  bash .peers2/install.sh >/dev/null || exit 1
fi
xz -dc .labso/exp.so.xz >lab/_C.abi3.so || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
python scripts/tune_register_cached.py --dtype bfloat16 --shape 4096x512 --shape 4096x1024 --shape 4096x2048 \
  --shape 32768x2048 --variants lab.auto,peer.quack --rounds 7 --json $OUT/floats_staged.json 2>&1 |
  grep -v "^\[" | tee $OUT/floats_staged.txt
