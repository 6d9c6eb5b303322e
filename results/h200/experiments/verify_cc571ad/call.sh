#!/usr/bin/env bash
# The check the post-run mends of the thirty-third session (b3a9508 to cc571ad: host code and tests only, SASS
# unchanged) had not had on a GPU: the GPU tests of register_cached and auto, then the four sanitizers over the whole
# variant path of cuda.register_cached and cuda.auto (the table's lean routes among them), on cc571ad's build
# (carried as .labso).
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
xz -dc .labso/cur.so.xz > lab/_C.abi3.so || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
start=$(date +%s)
python -m pytest -q -p no:cacheprovider tests/test_gpu.py -k "register_cached or auto" 2>&1 | tail -4 |
  tee $OUT/gpu_tests.txt
echo "tests: $(( $(date +%s) - start )) s" | tee -a $OUT/gpu_tests.txt
start=$(date +%s)
bash scripts/sanitize.sh build/sanitizer --op softmax --variant cuda.register_cached --variant cuda.auto 2>&1 |
  tee $OUT/sanitize.txt
echo "sanitizers: $(( $(date +%s) - start )) s" | tee -a $OUT/sanitize.txt
