#!/usr/bin/env bash
# A/B/A/B timing of the builds carried in .labso (a.so.xz: no cluster barrier at exit; cur.so.xz: the candidate
# with one), each unpacked in turn into lab/, on the launches of one cluster per row where a barrier at exit
# could cost (every CTA does one row): softmax's forward and backward cluster kernels and the cross-entropy's.
# Run from the repository root on a GPU machine; writes $OUT/time_<build>_<round>.txt, and leaves cur in lab/.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
for round in 1 2; do
  for build in a cur; do
    xz -dc ".labso/$build.so.xz" >lab/_C.abi3.so.part && mv lab/_C.abi3.so.part lab/_C.abi3.so || exit 1
    log="$OUT/time_${build}_$round.txt"
    sha256sum lab/_C.abi3.so | cut -c1-16 >"$log"
    for dtype in bfloat16 float32; do
      python -m lab.test --op softmax --only cuda.cluster -d $dtype --shape 256x262144 --shape 1024x65536 \
        --shape 8x128256 --shape 64x151936 --rounds 5 --no-save --metrics pct_copy,latency 2>&1 | grep -E "^\[[0-9]+/[0-9]+\]|FAIL" >>"$log"
      python -m lab.test --op softmax_backward --only cuda.cluster -d $dtype --shape 1024x262144 --shape 256x131072 \
        --rounds 5 --no-save --metrics pct_copy,latency 2>&1 | grep -E "^\[[0-9]+/[0-9]+\]|FAIL" >>"$log"
    done
    python -m lab.test --op cross_entropy --only lab.auto -d bfloat16 --shape 64x128256 --shape 4096x128256 \
      --rounds 5 --no-save --metrics pct_copy,latency 2>&1 | grep -E "^\[[0-9]+/[0-9]+\]|FAIL" >>"$log"
    echo "$build $round done"
  done
done
