#!/usr/bin/env bash
# The third of three calls on one warm H200 (after check_call.sh and the call that copies .peersB), carrying
# .peers2: every register_cached tuning shape (the lean ones among them) timed at the tutorial sweep's rows of 128
# to 4096 elements (4096 rows) beside the table, lab.auto, QuACK and torch.compile, in interleaved rounds
# (scripts/tune_register_cached.py).
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ "${ANY_GPU:-}" = 1 ] ||
  { echo "not an H200: stopping"; exit 3; }
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
for dtype in ${DTYPES:-bfloat16 float32}; do
  python scripts/tune_register_cached.py --dtype $dtype --sweep tutorial --max-n 4096 \
    --variants lab.auto,peer.quack,torch.compile --rounds ${ROUNDS:-9} --reps ${REPS:-100} --json $OUT/tune_$dtype.json
done 2>&1 | grep -v "^\[" | tee $OUT/tune.txt
echo "== done $(date -u +%T)"
