#!/usr/bin/env bash
# A/B/A/B timing of the builds carried in .labso (a.so.xz: no cluster barrier at exit; cur.so.xz: the candidate
# with one), each unpacked in turn into lab/, on the launches of one cluster per row where a barrier at exit
# could cost (every CTA does one row): softmax's forward and backward cluster kernels and the cross-entropy's.
# Run from the repository root on a GPU machine; writes $OUT/time_<build>_<round>.txt, and leaves cur in lab/.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT to the folder for the timings}"
timed() {  # lab.test ARGS, 5 rounds: its points' lines into $log (and a line saying so if it failed)
  python -m lab.test "$@" --rounds 5 --no-save --metrics pct_copy,latency 2>&1 | grep -E "^\[[0-9]+/[0-9]+\]|FAIL" \
    >>"$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || echo "python -m lab.test $* failed" >>"$log"
}
for round in 1 2; do
  for build in a cur; do
    xz -dc ".labso/$build.so.xz" >lab/_C.abi3.so.part && mv lab/_C.abi3.so.part lab/_C.abi3.so || exit 1
    log="$OUT/time_${build}_$round.txt"
    sha256sum lab/_C.abi3.so | cut -c1-16 >"$log"
    for dtype in bfloat16 float32; do
      timed --op softmax --only cuda.cluster -d $dtype --shape 256x262144 --shape 1024x65536 --shape 8x128256 \
        --shape 64x151936
      timed --op softmax_backward --only cuda.cluster -d $dtype --shape 1024x262144 --shape 256x131072
    done
    timed --op cross_entropy --only lab.auto -d bfloat16 --shape 64x128256 --shape 4096x128256
    echo "$build $round done"
  done
done
