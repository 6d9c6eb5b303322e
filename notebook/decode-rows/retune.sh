#!/usr/bin/env bash
# Every launch shape of cuda.cluster at the decode sweep's rows of the vocabularies where lab.softmax trailed QuACK
# (bfloat16 32000, 128256, 256000 at M = 1 to 64; float32 151936 and 256000 at M = 1 to 32), one cluster per row,
# then Nsight Compute on lab.auto where it trailed most. Run from the repository root on the GPU machine, the build
# carried as .labso/cur.so.xz: bash notebook/decode-rows/retune.sh (outputs in $OUT: tune16/tune32 .json and .txt,
# profile.txt).
set -uo pipefail
source scripts/remote/device_call.sh
begin_call >/dev/null
shapes() { local n m; for n in "$@"; do for m in 1 2 4 8 16 32 64; do echo "--shape ${m}x$n"; done; done; }
# shellcheck disable=SC2046
python scripts/tune/tune_cluster.py --dtype bfloat16 --grid one-per-row $(shapes 32000 128256 256000) \
  --json "$OUT/tune16.json" >"$OUT/tune16.txt" 2>&1
# shellcheck disable=SC2046
python scripts/tune/tune_cluster.py --dtype float32 --grid one-per-row $(shapes 151936 256000 | grep -v "64x") \
  --json "$OUT/tune32.json" >"$OUT/tune32.txt" 2>&1
for point in "1x128256 bfloat16" "1x256000 bfloat16" "2x256000 bfloat16" "8x151936 float32"; do
  echo "== lab.auto $point"
  # shellcheck disable=SC2086
  bash scripts/profile.sh lab.auto $point
done >"$OUT/profile.txt" 2>&1
