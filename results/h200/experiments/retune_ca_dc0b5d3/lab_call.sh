#!/usr/bin/env bash
# The full lab with the peers on the H200, the call after call.sh (which left the first half of the peers'
# compiler library in /tmp/peers): carries .peersB (the second half) and .peers2 (the wheels); the build is the one call.sh unpacked.
# Leaves the run's results in build/last/h200 for remeasure_call.sh, the next call on the same warm machine.
set -uo pipefail
# ANY_GPU=1: on whatever card came (the results then go under results/<that gpu>/).
[ "${ANY_GPU:-}" = 1 ] || nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 ||
  { echo "not an H200: stopping"; exit 3; }
# The second half comes carried here (.peersB) or, where the tree with .peersB and .peers2 passes the carry's
# 64 MiB, from a call between (`mkdir -p /tmp/peers && cp .peersB/irpart.ab /tmp/peers/`, carrying .peersB alone).
[ -f .peersB/irpart.ab ] && cp .peersB/irpart.ab /tmp/peers/
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
CARRIED_SO=${CARRIED_SO:-here} bash scripts/h200.sh lab; rc=$?
rm -rf build/last && mkdir -p build/last && tar xzf "$OUT/h200.tgz" -C build/last
exit $rc
