#!/usr/bin/env bash
# bfloat16 rows of 65536 elements: cluster's own 256 x 64 packed shapes on 4 CTAs a row (QuACK's CTA shape and
# cluster size there: 256 threads, 64 elements each, staged through shared memory) beside QuACK, the table's entry
# (128 x 64 packed on 8) and a copy, in interleaved rounds (lean_vs_plan.py); then Nsight Compute (--clock-control
# none) on the staged shape on 4 CTAs and on QuACK, the same CTA shape and cluster size in two implementations.
# The third call of a chain (the build and .peersB's part kept by a call carrying .labso and .peersB, .peersA's by
# the next), carrying .peers2. Any Hopper GPU (ANY_GPU=1).
set -uo pipefail
source scripts/device_call.sh
begin_peers_call
EXTRA="20:4 21:4 22:4 31:4 33:8" python results/h200/experiments/cluster_lean/lean_vs_plan.py bfloat16 1024x65536 \
  4096x65536 2>&1 | grep -v "^\[" | tee $OUT/cluster.txt
for v in cluster:21:4:n peer.quack cluster:18:8:n; do
  echo "== ncu $v 1024x65536 bfloat16"; timeout 120 bash scripts/profile.sh $v 1024x65536 bfloat16
done 2>&1 | tee $OUT/profile.txt
