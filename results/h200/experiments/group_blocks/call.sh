#!/usr/bin/env bash
# register_cached's tuning shapes in triton.multirow's faster layouts (a group of 64 threads x 8 elements, two groups
# in a block of 128, each reduced on its own; a warp a row in blocks of 32), checked on the GPU, then timed beside the
# table's shapes, lab.auto and QuACK at the tutorial's small tensors (scripts/tune_register_cached.py). The third of
# three calls on one warm H200 (as results/h200/experiments/multirow_layouts/call.sh's): call 1 built the checkout
# (DTYPES=" " bash results/h200/experiments/retune_ca_dc0b5d3/call.sh, carrying .peersA and no .labso), call 2
# copied .peersB; this one carries .peers2.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
bash build.sh | tail -1  # the build of call 1, found up to date
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_cached_tune_shape" 2>&1 | tail -3 |
  tee $OUT/gpu_tests.txt
{
python scripts/tune_register_cached.py --dtype bfloat16 --shape 4096x512 --shape 4096x1024 --shape 4096x128 \
  --variants lab.auto,peer.quack --rounds 7 --reps 100
python scripts/tune_register_cached.py --dtype float32 --shape 4096x512 --shape 4096x1024 --shape 4096x128 \
  --variants lab.auto,peer.quack --rounds 7 --reps 100
} 2>&1 | grep -v "^\[" | tee $OUT/tune.txt
echo "== done $(date -u +%T)"
