#!/usr/bin/env bash
# A/B of a suspend-time hint on cluster's exchange wait (mbarrier.try_wait.parity with suspendTimeHint, branch
# wip/try-wait-hint), one call, carrying .labab (A.so.xz: the build without it, main's; B.so.xz: with it):
# the GPU tests of cluster and the four sanitizers over cuda.cluster on B; cuda.cluster timed A B A B (separate
# processes, interleaved rounds each); the executed instructions by opcode of one launch on each side.
# Any Hopper GPU (ANY_GPU=1); the records go under results/<that gpu>/experiments/try_wait_hint/.
set -uo pipefail
source scripts/device_call.sh
require_h200
lab_env
side() { xz -dc .labab/$1.so.xz >lab/_C.abi3.so || exit 1; }
side B
timeout 200 python -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_gpu.py -k "cluster" 2>&1 | tail -3 |
  tee $OUT/gpu_tests_B.txt
timeout 200 bash scripts/sanitize.sh build/sanitizer --op softmax --variant cuda.cluster 2>&1 | tee $OUT/sanitize_B.txt
for s in A B A B; do
  side $s
  for dtype in bfloat16 float32; do
    python scripts/interleave.py --variants cuda.cluster --dtype $dtype --rounds 5 --reps 50 --shape 1024x65536 \
      --shape 4096x32768 --shape 256x262144 --shape 4096x20480 2>&1 | grep -v "^\[" | sed -u "s/^/$s /"
  done
done 2>&1 | tee $OUT/ab.txt
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
for s in A B; do
  side $s
  echo "== $s cluster:18:8:n 1024x65536 bfloat16"
  "$NCU" --clock-control none -k regex:cluster_resident --launch-skip 1 --launch-count 1 \
    --metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum,gpu__time_duration.sum \
    --print-metric-instances details python3 scripts/profile_point.py cluster:18:8:n 1024x65536 bfloat16 2>&1 |
    grep -vE "^==PROF=="
done 2>&1 | tee $OUT/opcodes.txt
