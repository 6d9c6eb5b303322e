#!/usr/bin/env bash
# The third of three calls on one warm H200 (after cluster_call.sh and a call that copied .peersB/irpart.ab into
# /tmp/peers), carrying .peers2: QuACK installed; register_cached's tuning shapes (1536-element rows held exactly among
# them) timed beside its table, lab.auto and QuACK at rows the sweeps do not have, where the lab trailed QuACK on an
# H100 (scan.txt): 1536 and 160 elements (scripts/tune_register_cached.py, interleaved rounds, the L2 flushed
# before every call); then lab.auto beside QuACK over the off-sweep shapes of scan_call.sh.
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ "${ANY_GPU:-}" = 1 ] ||
  { echo "not an H200: stopping"; exit 3; }
[ -f lab/_C.abi3.so ] || xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
for dtype in bfloat16 float32; do
  python scripts/tune_register_cached.py --dtype $dtype --shape 4096x1536 --shape 32768x1536 --shape 4096x1280 \
    --shape 4096x1792 --shape 4096x160 --shape 151296x160 --variants lab.auto,peer.quack --rounds 7 --reps 100 \
    --json $OUT/tune_$dtype.json
done 2>&1 | grep -v "^\[" | tee $OUT/tune.txt
[ "${SCAN:-1}" = 1 ] && bash results/h200/experiments/offsweep_scan/scan_call.sh
echo "== done $(date -u +%T)"
