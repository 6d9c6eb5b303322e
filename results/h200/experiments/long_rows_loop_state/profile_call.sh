#!/usr/bin/env bash
# The bfloat16 long rows where QuACK has led auto in every run (4096x32768, 1024x65536; auto's route there is
# cuda.cluster's plan) under ncu on the H200: first in the L2 state a timed call meets (PROFILE_CACHE=none: the lab's
# loop, a 256 MB flush before each call, calls 2 to 5), then with ncu's own cache control and the stall sections.
# The third of three calls on one warm H200: 1. `mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/ &&
# xz -dc .labso/cur.so.xz > lab/_C.abi3.so` carrying .labso and .peersA; 2. `cp .peersB/irpart.ab /tmp/peers/`
# carrying .peersB; 3. this, carrying .peers2.
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ "${ANY_GPU:-}" = 1 ] ||
  { echo "not an H200: stopping"; exit 3; }
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
for shape in ${SHAPES:-4096x32768 1024x65536}; do
  for variant in cuda.auto peer.quack; do
    echo "=== $variant $shape bfloat16, the loop's L2 state (PROFILE_CACHE=none)"
    PROFILE_CACHE=none bash scripts/profile.sh $variant $shape bfloat16
    echo "=== $variant $shape bfloat16, ncu's cache control, stall sections"
    bash scripts/profile.sh $variant $shape bfloat16
  done
done 2>&1 | tee $OUT/profile.txt
echo "== done $(date -u +%T)"
