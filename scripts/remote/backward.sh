#!/usr/bin/env bash
# The softmax backward's and the decode rows' device calls, one step a call (run from the repository root on the
# GPU machine, the build carried as in device_call.sh; $OUT the device tool's folder):
#   bash scripts/remote/backward.sh tune   the GPU tests of the softmax backward (operator suite, autograd), every
#                                          launch of cuda.cluster's backward timed in float32 and bfloat16 (float16
#                                          takes bfloat16's table; tune.json, tune.txt), and the
#                                          four sanitizers on the softmax_backward operator's CUDA variants
#   bash scripts/remote/backward.sh check  the GPU tests of every cluster kernel and of the softmax backward (test_gpu,
#                                          cross-entropy, operator suite, autograd: -k "cluster or backward"), the four
#                                          sanitizers on the softmax_backward operator's CUDA variants, and a first
#                                          timing of its short-row CUDA and Triton variants in 16 bits (check.txt)
#   bash scripts/remote/backward.sh shapes register_cached's row shapes: the backward's GPU tests (its tuning shapes
#                                          among them), the four sanitizers on the operator's CUDA variants and tuning
#                                          shapes, notebook/backward-register-cached-shapes/measure.py (shapes.txt,
#                                          shapes.json)
#   bash scripts/remote/backward.sh verify the committed table's backward entries: the dispatch and autograd GPU tests,
#                                          lab.fuzz of softmax's lab.auto and the backward's CUDA kernels behind it
#                                          (gradients included), and trust's compiled backward cell of lab.auto
#                                          (fuzz.compiled_backward_mismatches; verify.txt)
#   bash scripts/remote/backward.sh profile  with the peers installed: Nsight Compute on lab.auto and QuACK at the
#                                          decode rows where the lab trails (bfloat16 1 x 128256, 1 and 8 x 256000;
#                                          profile.txt)
#   bash scripts/remote/backward.sh lab    with the peers installed: the lab run of softmax_backward (both sweeps,
#                                          float32 and bfloat16), then softmax's decode sweep in three dtypes (the
#                                          lab's entries, cuda.cluster, cuda.grid_split, QuACK, PyTorch): results.tgz,
#                                          to unpack into results/<gpu>/ (softmax_backward/, decode/softmax/)
# Each writes its log to $OUT/<step>.txt; LAB_COMMIT names the commit (lab/env.py): set it, or a run records the
# device copy's .git. A lab run stopped by its timeout (SIGINT) saves what it has.
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?check, shapes, verify, tune, profile or lab}
# shellcheck source=scripts/remote/device_call.sh
source scripts/remote/device_call.sh

case "$STEP" in
  tune)
    begin_call
    { timeout 120 python -m pytest -q -m gpu tests/test_operators.py tests/test_autograd.py -k "backward" 2>&1 | tail -4
      timeout 200 python scripts/tune/tune_backward_cluster.py --dtype float32 --dtype bfloat16 --json "$OUT/tune.json"
      timeout 200 bash scripts/sanitize.sh "$OUT/sanitizer" \
        --op softmax_backward 2>&1 | tail -12
    } 2>&1 | tee "$OUT/tune.txt"
    ;;
  check)
    begin_call
    { timeout 300 python -m pytest -q -m gpu tests/test_gpu.py tests/test_cross_entropy.py tests/test_operators.py \
        tests/test_autograd.py -k "cluster or backward" 2>&1 | tail -4
      timeout 200 bash scripts/sanitize.sh "$OUT/sanitizer" --op softmax_backward 2>&1 | tail -12
      timeout -s INT 150 python -m lab.test --op softmax_backward -d bfloat16 -d float16 --no-save \
        --only 'cuda.register_cached,cuda.two_pass,triton.fused,lab.auto' 2>&1 | grep -vE "^\[[0-9]+/" | tail -40
    } 2>&1 | tee "$OUT/check.txt"
    ;;
  shapes)
    begin_call
    { timeout 200 python -m pytest -q -m gpu tests/test_operators.py -k "backward" 2>&1 | tail -3
      timeout 200 bash scripts/sanitize.sh "$OUT/sanitizer" --op softmax_backward 2>&1 | grep -E "compute-sanitizer|ran"
      timeout 250 python notebook/backward-register-cached-shapes/measure.py --json "$OUT/shapes.json"
    } 2>&1 | tee "$OUT/shapes.txt"
    ;;
  verify)
    begin_call
    { timeout 150 python -m pytest -q -m gpu tests/test_dispatch.py tests/test_autograd.py 2>&1 | tail -3
      timeout 200 python -m lab.fuzz --op softmax --only lab.auto,cuda.auto,cuda.register_cached,cuda.cluster \
        --cases 400 2>&1 | tail -12
      timeout 150 python -c "
from lab import fuzz
from lab.registry import get
v = get('softmax', 'lab.auto')
cases = fuzz.backward_cases(v)
failures = fuzz.compiled_backward_mismatches(v, cases)
print(f'compiled backward of lab.auto: {len(cases)} cases (N = {sorted({n for _, n in cases})}),',
      f'{len(failures)} mismatches', *failures, sep='\n  ')"
    } 2>&1 | tee "$OUT/verify.txt"
    ;;
  profile)
    begin_peers_call
    for point in 1x128256 1x256000 8x256000; do
      for variant in lab.auto peer.quack; do
        echo "== $variant $point bfloat16"
        timeout 90 bash scripts/profile.sh "$variant" "$point" bfloat16
      done
    done 2>&1 | tee "$OUT/profile.txt"
    ;;
  lab)
    begin_peers_call
    { timeout -s INT 250 python -m lab.test --op softmax_backward --out "$OUT/res" 2>&1 | grep -vE "^\[[0-9]+/" | tail -60
      timeout -s INT 280 python -m lab.test -s decode -d float32 -d bfloat16 -d float16 \
        --only 'lab.auto,cuda.auto,cuda.cluster,cuda.grid_split,peer.quack,torch.softmax' --out "$OUT/res/decode" 2>&1 \
        | grep -vE "^\[[0-9]+/" | tail -40
    } 2>&1 | tee "$OUT/lab.txt"
    tar -czf "$OUT/results.tgz" -C "$OUT/res" .
    ;;
  *) echo "unknown step $STEP (check, shapes, verify, tune, profile or lab)"; exit 2 ;;
esac
