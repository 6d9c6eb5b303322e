#!/usr/bin/env bash
# The third of three device calls (the first two carried the halves of .peers1's library to /tmp/peers), with
# .peers2 and lab/_C.abi3.so (built here at the commit, carried xz-compressed; the lab is used from the checkout). Asked: why does QuACK lead cuda.cluster by 1.3% at
# bfloat16 4096x65536 (the widest gap on a large tensor), and why are the float-held bfloat16 shapes of cluster,
# QuACK's own layout (256 threads x 64 elements staged, 4 CTAs a row), 8-15 points of a copy behind the packed plan?
# And, at float32 4096x32768, does the output's address move cluster and triton.fused on the H200?
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
[ "${ANY_GPU:-}" = 1 ] || grep -q H200 $OUT/gpu.txt || { echo "not an H200: stopping"; exit 3; }
bash .peers2/install.sh || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD PYTHONUNBUFFERED=1
xz -dc .labso/_C.abi3.so.xz > lab/_C.abi3.so || exit 1
# cuda.cluster is the plan (128 x 64 packed, direct, 8 CTAs a row); cluster:SHAPE:C:n one launch of one cluster per row:
# 6 = 256 x 64 float-held, staged once (QuACK's layout), 15 = 256 x 64 float-held direct, 20 = 256 x 64 packed direct.
for p in peer.quack cuda.cluster cluster:6:4:n cluster:15:4:n cluster:20:4:n; do
  echo "== ncu $p 4096x65536 bfloat16"; bash scripts/profile.sh $p 4096x65536 bfloat16
done 2>&1 | tee $OUT/profile_4096x65536.txt | grep -E "^==|Duration|DRAM Throughput|Registers|Achieved Occ|Executed Inst"
mkdir -p /tmp/pr
for p in peer.quack cuda.cluster cluster:6:4:n; do
  PROFILE_REPORT=/tmp/pr/${p//:/_}_4096x65536 bash scripts/profile.sh $p 4096x65536 bfloat16 2>&1 | tail -6
done
(cd /tmp/pr && tar cJf $OUT/full_4096x65536.tar.xz *.source.csv *.details.txt)
python scripts/output_address.py --variants cuda.cluster,triton.fused,peer.quack --shape 4096x32768 \
  --shape 4096x16384 --dtype float32 --offsets-kb 4,64,1024 --rounds 10 2>&1 | tee $OUT/output_address.txt | tail -40
