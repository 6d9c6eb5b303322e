#!/usr/bin/env bash
# One call on an H200, carrying .labso (the build with register_cached's tuning shapes of 1536, 3072 and 6144
# elements): the lengths off the sweeps where rc_call.sh's scan had lab.auto behind QuACK, each beside the table and a
# copy of the same bytes in interleaved rounds: cluster's resident shapes on cluster sizes that fill them
# (results/h200/experiments/cluster_lean/lean_vs_plan.py, EXTRA by index of torch.ops.lab_tune.cluster_shapes) and
# register_cached's tuning shapes (scripts/tune_register_cached.py).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
[ -f .peersA/irpart.aa ] && mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
lvp=results/h200/experiments/cluster_lean/lean_vs_plan.py
{
  EXTRA="13:3 12:3 14:2 15:1 16:1" python $lvp float32 4096x12288 4096x10240
  EXTRA="12:10 12:12 13:10 14:5 14:6 16:3 17:2 15:3 32:3" python $lvp float32 4096x40960 4096x49152
  EXTRA="16:6 15:6 17:3 14:12 32:6 16:5 17:4" python $lvp float32 2048x98304 2048x81920
  EXTRA="32:10 16:10 17:5 15:10 32:12 17:6" python $lvp float32 1024x151936 1024x163840
  EXTRA="18:5 18:6 33:5 20:3 31:3 26:2 21:3 20:4" python $lvp bfloat16 4096x40960 4096x49152
  EXTRA="26:3 20:6 31:6 23:3 18:12 29:2 27:3 21:6" python $lvp bfloat16 2048x98304 2048x81920
  EXTRA="31:10 20:10 23:5 26:5 29:3 31:12" python $lvp bfloat16 1024x151936 1024x163840
} 2>&1 | grep -v "^\[" | tee $OUT/cluster.txt
python scripts/tune_register_cached.py --dtype bfloat16 --shape 4096x3072 --shape 16384x3072 --shape 4096x6144 \
  --shape 8192x6144 --shape 4096x192 --shape 151296x192 --shape 151296x200 --shape 151296x208 --variants lab.auto \
  --rounds 7 --reps 100 --json $OUT/tune_bfloat16.json 2>&1 | grep -v "^\[" | tee $OUT/tune.txt
python scripts/tune_register_cached.py --dtype float32 --shape 4096x192 --shape 151296x192 --shape 151296x208 \
  --variants lab.auto --rounds 7 --reps 100 --json $OUT/tune_float32.json 2>&1 | grep -v "^\[" | tee -a $OUT/tune.txt
echo "== done $(date -u +%T)"
