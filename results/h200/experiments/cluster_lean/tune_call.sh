#!/usr/bin/env bash
# The lean cluster kernel (cluster_lean_softmax_kernel) against cuda.cluster's table and QuACK, in interleaved rounds
# (lean_vs_plan.py), at the long rows of both sweeps. The call after two that left the peers' compiler library in
# /tmp/peers (carrying .peersA, then .peersB); this one carries .labso (the build) and .peers2 (the wheels).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so && bash .peers2/install.sh || exit 1
export PYTHONPATH=$PWD:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
py=results/h200/experiments/cluster_lean/lean_vs_plan.py
EXTRA=${EXTRA:-} python $py bfloat16 ${BF16_SHAPES:-4096x32768 1024x65536 4096x65536 256x262144 4096x131072 4096x262144 4096x16384} 2>&1 |
  grep -v "^\[" | tee $OUT/tune_bfloat16.txt
[ "${SKIP_F32:-}" = 1 ] || python $py float32 ${F32_SHAPES:-4096x32768 1024x65536 256x262144} 2>&1 | grep -v "^\[" | tee $OUT/tune_float32.txt
