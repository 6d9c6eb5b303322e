#!/usr/bin/env bash
# The second of two calls on one warm H200 (after check_call.sh, which left the peers' compiler library in
# /tmp/peers), carrying .peers2: the lean tuning shapes timed on the fixed sweep's rows of 32 to 1024 elements (many
# rows: 64M elements, dozens of waves) beside register_cached's table, lab.auto, QuACK and torch.compile, in
# interleaved rounds (scripts/tune_register_cached.py).
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ "${ANY_GPU:-}" = 1 ] ||
  { echo "not an H200: stopping"; exit 3; }
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
for dtype in ${DTYPES:-bfloat16 float32}; do
  python scripts/tune_register_cached.py --dtype $dtype --sweep fixed --max-n 1024 \
    --variants lab.auto,peer.quack,torch.compile --rounds ${ROUNDS:-7} --reps ${REPS:-50} --json $OUT/tune_$dtype.json
done 2>&1 | grep -v "^\[" | tee $OUT/tune.txt
echo "== done $(date -u +%T)"
