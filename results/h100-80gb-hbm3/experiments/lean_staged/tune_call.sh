#!/usr/bin/env bash
# register_cached's lean kernel with its loads staged through shared memory by cp.async (the lean and staged tuning
# shapes, label suffix SL), beside the lean shapes, the table, lab.auto and QuACK, at the short rows of both sweeps,
# in interleaved rounds (scripts/tune_register_cached.py). The call after two that left the peers' compiler library in
# /tmp/peers (carrying .peersA, then .peersB); this one carries .labso (the build of wip/lean-staged) and .peers2 (the
# wheels). Made for the H200; run with ANY_GPU=1 on the H100 that came.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so && bash .peers2/install.sh || exit 1
export PYTHONPATH=$PWD/scripts:$PWD:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
for dtype in bfloat16 float32; do
  python scripts/tune_register_cached.py --dtype $dtype --sweep fixed --sweep tutorial --max-n ${MAX_N:-1024} \
    --variants lab.auto,peer.quack --rounds 7 --reps 50 --json $OUT/tune_$dtype.json
done 2>&1 | grep -v "^\[" | tee $OUT/tune.txt
