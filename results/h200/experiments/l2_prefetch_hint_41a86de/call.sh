#!/usr/bin/env bash
# install the peers, profile QuACK's and our kernel at bfloat16 4096x128 (SASS flavours), then A/B of the L2 prefetch hints
bash .peers2/install.sh || exit 1
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages
mkdir -p /tmp/pr
for v in peer.quack cuda.register_cached; do
  PROFILE_REPORT=/tmp/pr/${v}_bf16_4096x128 bash scripts/profile.sh $v 4096x128 bfloat16 2>&1 | tail -8
done
for f in /tmp/pr/*.source.csv; do echo "== $f"; grep -o "LDG[A-Z0-9._]*\|LDGSTS[A-Z0-9._]*\|STG[A-Z0-9._]*\|LDS[A-Z0-9._]*" "$f" | sort | uniq -c; done
(cd /tmp/pr && tar cJf $OUT/sass_4096x128.tar.xz *.source.csv *.details.txt)
bash scripts/ab.sh ab_tmp/c256 bash ab_tmp/measure.sh 2>&1 | tee $OUT/ab_l2_256.txt | grep -v "^[AB] \[" | tail -60
bash scripts/ab.sh ab_tmp/c128 bash ab_tmp/measure.sh 2>&1 | tee $OUT/ab_l2_128.txt | grep "^== \|failed" 
