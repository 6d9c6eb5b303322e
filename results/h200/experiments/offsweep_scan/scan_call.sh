#!/usr/bin/env bash
# The third of three calls on one warm H200 (after first_call.sh and a call that copied .peersB/irpart.ab into
# /tmp/peers), carrying .peers2: QuACK installed, lab.auto timed beside peer.quack at shapes off the lab's two sweeps
# (rows of lengths that are no power of two, vocabulary sizes, few long rows), both dtypes, in interleaved rounds
# (scripts/interleave.py: each variant checked against float64 first, the L2 flushed before every call).
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ "${ANY_GPU:-}" = 1 ] ||
  { echo "not an H200: stopping"; exit 3; }
[ -f lab/_C.abi3.so ] || xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
# The peers once per machine: a call before this one on the same warm machine (rc_call.sh, the lab call) may have
# installed them already, and then .peers2 need not be carried again.
ir=/tmp/site/nvidia_cutlass_dsl/dsl_packages/cutlass/_mlir/_mlir_libs/_cutlass_ir.cu13.cpython-312-x86_64-linux-gnu.so
if ! { [ -d /tmp/site/quack ] && [ -f "$ir" ]; }; then
  cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
  bash .peers2/install.sh >/dev/null || exit 1
fi
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
SHAPES=${SHAPES:-"4096x96 4096x160 4096x384 4096x768 4096x1536 4096x3072 4096x6144 4096x12288 4096x20480 4096x24576
  4096x32000 4096x40960 4096x50304 2048x98304 1024x128256 1024x151936 512x196608 64x524288 16x1048576 1x1048576"}
args=(); for s in $SHAPES; do args+=(--shape "$s"); done
for dtype in ${DTYPES:-bfloat16 float32}; do
  python scripts/interleave.py --variants lab.auto,peer.quack --dtype $dtype --rounds ${ROUNDS:-5} \
    --reps ${REPS:-100} "${args[@]}"
done 2>&1 | grep -v "^\[" | tee $OUT/scan.txt
echo "== done $(date -u +%T)"
