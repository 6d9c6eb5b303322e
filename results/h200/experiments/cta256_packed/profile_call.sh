#!/usr/bin/env bash
# On an H200, the first of a chain of calls (then `source scripts/device_call.sh; keep_peer_parts` carrying .peersA,
# then time_call.sh carrying .peers2, or the lab run's calls: after_call.sh), carrying .labso and .peersB: Nsight Compute (--clock-control none)
# on one 256 x 40 packed configuration at bfloat16 4096x20480 with its slices full (2 CTAs a row) and half full
# (4 CTAs), and on the table's entry there (128 x 64 packed on 3, 83% full): DRAM throughput, occupancy, stalls.
set -uo pipefail
source scripts/device_call.sh
begin_call
for v in cluster:35:2:n cluster:35:4:n cuda.cluster; do
  echo "== ncu $v 4096x20480 bfloat16"; timeout 120 bash scripts/profile.sh $v 4096x20480 bfloat16
done 2>&1 | tee "$OUT/profile.txt"
