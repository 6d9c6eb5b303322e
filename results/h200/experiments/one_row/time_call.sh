#!/usr/bin/env bash
# The third call of the chain (check_call.sh, then a call keeping .peersA's part), carrying .peers2: QuACK
# installed, then
# - cluster.txt: the one-row shapes (39: 256x64s1R, 40: 128x64s1R; 16-bit slices held as floats after a cp.async
#   copy, one exponential per element, no row loop, 3 CTAs of 256 an SM as QuACK's kernel runs) one cluster per
#   row on the cluster sizes their slices fill, beside cuda.cluster (the table), QuACK and a copy of the same
#   bytes, in 7 interleaved rounds with the L2 flushed before every call, each checked against float64 first
#   (cluster_lean/lean_vs_plan.py), at the bfloat16 lengths of the sweeps that cluster takes;
# - profile.txt: ncu (--clock-control none) at bfloat16 1024x65536, the one-row 256 x 64 on 4 CTAs (QuACK's
#   launch), the table's launch and QuACK: executed instructions, DRAM throughput, occupancy, stalls.
set -uo pipefail
source scripts/device_call.sh
begin_peers_call
lvp=results/h200/experiments/cluster_lean/lean_vs_plan.py
EXTRA="39:1 39:2 39:4 39:8 39:16 40:2 40:4 40:8 40:16" python $lvp bfloat16 \
  4096x16384 4096x32768 1024x65536 4096x65536 4096x131072 256x262144 2>&1 | grep -v "^\[" | tee "$OUT/cluster.txt"
status=${PIPESTATUS[0]}
grep -q " WRONG " "$OUT/cluster.txt" && status=1  # a launch that failed its float64 check (lean_vs_plan.py goes on)
for v in cluster:39:4:n cuda.cluster peer.quack; do
  echo "== ncu $v 1024x65536 bfloat16"; timeout 100 bash scripts/profile.sh $v 1024x65536 bfloat16 ||
    echo "== profile.sh failed ($v)"
done 2>&1 | tee "$OUT/profile.txt"
grep -q "profile.sh failed" "$OUT/profile.txt" && status=1
echo "== done $(date -u +%T), status $status"
exit "$status"
