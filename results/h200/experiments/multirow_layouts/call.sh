#!/usr/bin/env bash
# scripts/tune_multirow.py on the H200 with QuACK beside it. The third of three calls on one warm machine:
#   1. DTYPES=" " bash results/h200/experiments/retune_ca_dc0b5d3/call.sh, carrying .labso and .peersA (the build,
#      and the first half of the peers' compiler library into /tmp/peers);
#   2. mkdir -p /tmp/peers && cp .peersB/irpart.ab /tmp/peers/, carrying .peersB;
#   3. this, carrying .peers2 (the wheels).
# Asked: which of triton.multirow's layouts (rows per program, warps) makes its kernel the shorter one at the
# small tensors where register_cached trails, and where do they stand against QuACK's?
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
{
for dt in bfloat16 float32; do
  python scripts/tune_multirow.py --dtype $dt --shape 4096x512 --shape 4096x1024 --shape 4096x128 \
    --variants cuda.auto,peer.quack --rounds 7 --reps 200
done
} 2>&1 | grep -v "^\[" | tee $OUT/tune_multirow.txt
echo "== done $(date -u +%T)"
