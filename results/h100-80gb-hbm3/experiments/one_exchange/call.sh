#!/usr/bin/env bash
# register_cached with one exchange per row (each thread's (max, sum) state merged once: a block group pays one
# barrier per row, not two) against the committed kernel, on whatever card comes (the H100 shows the small
# tensors' gap to QuACK too). Carries .labso: cur.so.xz (A: csrc as at dc0b5d3, comments aside the same as
# a638ccd) and b.so.xz (B: the candidate, built here). Both builds are timed in separate processes, A B A B,
# each in interleaved rounds beside triton.multirow (no change between the sides: the drift between processes).
# Then B's GPU tests of register_cached and auto, and compute-sanitizer on cuda.register_cached.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
V=cuda.register_cached,triton.multirow
for side in A B A B; do
  so=.labso/cur.so.xz; [ $side = B ] && so=.labso/b.so.xz
  xz -dc $so >lab/_C.abi3.so || exit 1
  echo "== $side $(date -u +%T)"
  python scripts/interleave.py --variants $V --dtype bfloat16 --rounds 5 --shape 4096x512 --shape 4096x1024 \
    --shape 4096x2048 --shape 4096x4096 --shape 4096x8192 --shape 65536x1024 --shape 32768x2048 | sed "s/^/$side /"
  python scripts/interleave.py --variants $V --dtype float32 --rounds 5 --shape 4096x1024 --shape 4096x2048 \
    --shape 4096x4096 | sed "s/^/$side /"
done 2>&1 | grep -v "^. *$" | tee $OUT/ab.txt
echo "== B's tests $(date -u +%T)"
xz -dc .labso/b.so.xz >lab/_C.abi3.so || exit 1
timeout 240 python -m pytest -q -p no:cacheprovider -x --tb=short tests/test_gpu.py tests/test_fuzz.py \
  tests/test_properties.py tests/test_dispatch.py -k "register_cached or auto" 2>&1 | tail -5 | tee $OUT/tests.txt
echo "== compute-sanitizer $(date -u +%T)"
for tool in memcheck racecheck synccheck; do
  timeout 120 compute-sanitizer --tool $tool --error-exitcode 9 python scripts/sanitize_driver.py --op softmax \
    --variant cuda.register_cached >$OUT/$tool.log 2>&1
  echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/$tool.log | tail -1)"
done | tee $OUT/sanitizer.txt
echo "== done $(date -u +%T)"
