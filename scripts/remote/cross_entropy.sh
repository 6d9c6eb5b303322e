#!/usr/bin/env bash
# lab.cross_entropy's device calls, one step a call (run from the repository root on the GPU machine, the build
# carried as in device_call.sh; $OUT the device tool's folder):
#   bash scripts/remote/cross_entropy.sh check   the GPU tests of the cross-entropy modules (the operator's kernels,
#                                                lab.cross_entropy, its compiled forms and its CUDA graphs, the
#                                                tuner of the CUDA kernel's launch), the
#                                                randomized testing of lab.auto and cuda.cluster (300 cases) and
#                                                the four sanitizers on the operator's CUDA variant (check.txt)
#   bash scripts/remote/cross_entropy.sh points  with the peers installed: the lab run of cross_entropy at 1024 and
#                                                4096 tokens of 32000 and 1024 of 50257, 128256, 151936 and 256000,
#                                                three dtypes, where lab.auto's call is host-bound: results.tgz, to
#                                                unpack beside the run it is compared with (points.txt)
#   bash scripts/remote/cross_entropy.sh run OP  with the peers installed: the lab run of OP (cross_entropy or
#                                                cross_entropy_loss), three dtypes, the vocab sweep: results.tgz, for
#                                                results/<gpu>/OP/ (the H200 took 316 and 169 s) (run.txt)
#   bash scripts/remote/cross_entropy.sh trust OP START CASES
#                                                a part of trust's randomized testing of OP (cross_entropy or
#                                                cross_entropy_loss), cases START .. START + CASES - 1, as JSON for
#                                                `python scripts/trust.py --refuzz --fuzz-json ...` (no GPU) to
#                                                merge; with START 0 also trust's lab.cross_entropy section (the
#                                                H200 took over 230 s for 600 cases of both with that section)
# LAB_COMMIT names the commit (lab/env.py): set it, or a run records the device copy's .git. A lab run stopped by
# its timeout (SIGINT) saves what it has.
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?check, points, run or trust}
# shellcheck source=scripts/remote/device_call.sh
source scripts/remote/device_call.sh

case "$STEP" in
  check)
    begin_call
    { timeout 300 python -m pytest -q -m gpu tests/test_cross_entropy.py tests/test_linear_cross_entropy.py \
        tests/test_tune_cross_entropy_cluster.py 2>&1 | tail -4
      timeout 150 python -m lab.fuzz --op cross_entropy --only lab.auto,cuda.cluster --cases 300 2>&1 | tail -4
      timeout 200 bash scripts/sanitize.sh "$OUT/sanitizer" --op cross_entropy 2>&1 | tail -8
    } 2>&1 | tee "$OUT/check.txt"
    ;;
  points)
    begin_peers_call
    shapes=()
    for s in 1024x32000 4096x32000 1024x50257 1024x128256 1024x151936 1024x256000; do shapes+=(--shape "$s"); done
    timeout -s INT 500 python -m lab.test --op cross_entropy -d bf16 -d fp16 -d fp32 --rounds 3 "${shapes[@]}" \
      --out "$OUT/results" 2>&1 | grep -vE "^\[[0-9]+/" | tee "$OUT/points.txt" | tail -40
    (cd "$OUT" && tar czf results.tgz results && rm -rf results)
    ;;
  run)
    op=${2:?run OP}
    begin_peers_call
    timeout -s INT 540 python -m lab.test --op "$op" -d bf16 -d fp16 -d fp32 --rounds 3 --out "$OUT/results" 2>&1 |
      grep -vE "^\[[0-9]+/" | tee "$OUT/run.txt" | tail -6
    (cd "$OUT" && tar czf results.tgz results && rm -rf results)
    ;;
  trust)
    begin_call
    op=${2:?trust OP START CASES}; start=${3:?trust OP START CASES}; cases=${4:?trust OP START CASES}
    if [ "$start" = 0 ]; then
      timeout 120 python scripts/trust.py --sections cross_entropy_entry --out "$OUT/trust" 2>&1 | tail -4
    fi
    timeout -s INT 400 python -m lab.fuzz --op "$op" --start "$start" --cases "$cases" \
      --json "$OUT/fuzz_${op}_${start}.json" 2>&1 | tail -12 | tee "$OUT/fuzz_${op}_${start}.txt"
    ;;
  *)
    echo "unknown step $STEP: check, points, run or trust"; exit 2
    ;;
esac
