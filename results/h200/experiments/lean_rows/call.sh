#!/usr/bin/env bash
# register_cached's lean tuning shapes (lean_softmax_kernel: the straight-line kernel of triton.multirow's code, for
# aligned rows) on the H200: checked (GPU tests, four sanitizers), then timed beside the table, lab.auto, QuACK and
# triton.multirow's kernel in the layout that led (scripts/tune_register_cached.py, scripts/tune_multirow.py).
# The third of three calls on one warm H200: 1. DTYPES=" " bash results/h200/experiments/retune_ca_dc0b5d3/call.sh
# carrying .labso (this checkout's build) and .peersA; 2. mkdir -p /tmp/peers && cp .peersB/irpart.ab /tmp/peers/
# carrying .peersB; 3. this, carrying .peers2.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_cached_tune_shape" 2>&1 | tail -2 |
  tee $OUT/gpu_tests.txt
labels=""
for l in 64x8/128L 32x16/32L 64x16/64L 32x32/128L 16x8/128L 32x16/128L 32x32/32L; do labels="$labels --tuning-label $l"; done
bash scripts/sanitize.sh build/sanitizer_lean --op softmax --tuning-shapes-only $labels 2>&1 | tee $OUT/sanitize.txt
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD
{
python scripts/tune_register_cached.py --dtype bfloat16 --shape 4096x512 --shape 4096x1024 --shape 4096x128 \
  --variants lab.auto,peer.quack --rounds 7 --reps 100
python scripts/tune_register_cached.py --dtype float32 --shape 4096x512 --shape 4096x1024 --shape 4096x128 \
  --variants lab.auto,peer.quack --rounds 7 --reps 100
python scripts/tune_multirow.py --dtype bfloat16 --shape 4096x512 --configs 2x4,4x4 --variants cuda.auto,peer.quack
} 2>&1 | grep -v "^\[" | tee $OUT/tune.txt
echo "== done $(date -u +%T)"
