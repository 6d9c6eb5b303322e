#!/usr/bin/env bash
# A/B of cp.async's cache mode for the staged copies of cuda.cluster and cuda.tiled_rows (A: .cg, as at a348f52;
# B: .ca with the same zero-fill operand, as QuACK's copies), both lab/_C.abi3.so built here and carried in .labso/
# (xz); the third of three calls (the first two put .peers1's library in /tmp/peers). Asked: with the doubled L2
# sectors of the .cg copies gone (ncu on an H100), do cluster's staged shapes, QuACK's layout among them, beat the
# plan's direct loads at the long rows where QuACK leads?
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
[ "${ANY_GPU:-}" = 1 ] || grep -q H200 $OUT/gpu.txt || { echo "not an H200: stopping"; exit 3; }
bash .peers2/install.sh || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
S="--shape 4096x32768 --shape 4096x65536 --shape 1024x65536 --shape 256x262144"
for ab in A B; do
  xz -dc .labso/$ab.so.xz > lab/_C.abi3.so || exit 1
  echo "== $ab $(date -u +%T)"
  [ $ab = B ] && PROFILE_REPORT=/tmp/B_6 bash scripts/profile.sh cluster:6:4:n 4096x65536 bfloat16 | tail -3 &&
    grep -o '"[^"]*LDGSTS[^"]*"' /tmp/B_6.source.csv | head -3 && cp /tmp/B_6.source.csv $OUT/B_staged_source.csv
  python scripts/tune_cluster.py --dtype bfloat16 $S --json $OUT/tune_bf16_$ab.json 2>&1 | sed "s/^/$ab /" | grep -v "^$ab \["
  python scripts/tune_cluster.py --dtype float32 --shape 4096x65536 --shape 256x262144 \
    --json $OUT/tune_f32_$ab.json 2>&1 | sed "s/^/$ab /" | grep -v "^$ab \["
  python scripts/interleave.py --variants cuda.cluster,peer.quack --dtype bfloat16 --rounds 5 --reps 100 \
    --shape 4096x65536 --shape 4096x32768 2>&1 | sed "s/^/$ab /" | grep -v "^\s*$"
done 2>&1 | tee $OUT/ab.txt
