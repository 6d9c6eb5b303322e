#!/usr/bin/env bash
# The softmax backward's and the decode rows' device calls, one step a call (run from the repository root on the
# GPU machine, the build carried as in device_call.sh; $OUT the device tool's folder):
#   bash scripts/remote/backward.sh tune   the GPU tests of the softmax backward (operator suite, autograd), every
#                                          launch of cuda.cluster's backward timed in float32 and bfloat16 (float16
#                                          takes bfloat16's table; tune.json, tune.txt), and the
#                                          four sanitizers on the softmax_backward operator's CUDA variants
#   bash scripts/remote/backward.sh lab    with the peers installed: the lab run of softmax_backward (both sweeps,
#                                          float32 and bfloat16), then softmax's decode sweep in three dtypes (the
#                                          lab's entries, cuda.cluster, cuda.grid_split, QuACK, PyTorch): results.tgz,
#                                          to unpack into results/<gpu>/ (softmax_backward/, decode/softmax/)
# Each writes its log to $OUT/<step>.txt; LAB_COMMIT names the commit (lab/env.py): set it, or a run records the
# device copy's .git. A lab run stopped by its timeout (SIGINT) saves what it has.
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?tune or lab}
# shellcheck source=scripts/remote/device_call.sh
source scripts/remote/device_call.sh
export OUT=${OUT:-build/remote}
mkdir -p "$OUT"

case "$STEP" in
  tune)
    begin_call
    { timeout 120 python -m pytest -q -m gpu tests/test_operators.py tests/test_autograd.py -k "backward" 2>&1 | tail -4
      timeout 200 python scripts/tune/tune_backward_cluster.py --dtype float32 --dtype bfloat16 --json "$OUT/tune.json"
      timeout 200 bash scripts/sanitize.sh "$OUT/sanitizer" \
        --op softmax_backward 2>&1 | tail -12
    } 2>&1 | tee "$OUT/tune.txt"
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
  *) echo "unknown step $STEP (tune or lab)"; exit 2 ;;
esac
