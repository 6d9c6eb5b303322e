#!/usr/bin/env bash
# The executed SASS instructions by opcode (ncu --clock-control none, sass__inst_executed_per_opcode, the second
# launch) of cluster's one-row 256 x 64 launch on 4 CTAs (QuACK's) and of the table's 128 x 64 packed on 8, at
# bfloat16 1024x65536. Carries .labso (or runs after a call that unpacked it); any Hopper GPU with ANY_GPU=1.
set -uo pipefail
source scripts/device_call.sh
begin_call
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
status=0
for v in cluster:39:4:n cluster:18:8:n; do
  echo "== $v 1024x65536 bfloat16" | tee -a "$OUT/opcodes.txt"
  timeout 120 "$NCU" --clock-control none -k regex:cluster_resident --launch-skip 1 --launch-count 1 \
    --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum --print-metric-instances details \
    python3 scripts/profile_point.py $v 1024x65536 bfloat16 2>&1 | grep -vE "^==PROF==" | tee -a "$OUT/opcodes.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
done
exit "$status"
