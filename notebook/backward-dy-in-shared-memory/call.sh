#!/usr/bin/env bash
# The device calls of this folder's README, on a machine of one GPU, the build carried as .labso/cur.so.xz. Run from
# the repository root:
#   1  side by side, the GPU tests of softmax_backward's kernels (tests/test_gpu.py, and the tuner's own test) and the
#      sanitize driver's backward cases without a tool (every CTA shape, the two of dy in shared memory among them,
#      in every dtype, 2 and 16 CTAs, shifted rows, checked against float64); then, alone on the GPU, the tuner at
#      float32 rows from 131072 (scripts/tune/tune_backward_cluster.py); then the four sanitizers over the backward's
#      variants and its tuning shapes, side by side.
#   2  after the table's change, side by side: the GPU tests of the backward, the dispatch and autograd, the sanitize
#      driver's backward cases without a tool, the four sanitizers over the backward's cuda.cluster (its table's
#      launches), softmax's randomized testing of lab.auto and cuda.cluster (gradients on every tenth float32 case)
#      and trust's compiled backward cell of lab.auto.
#   4  after the tests and the sanitize driver's section of persistent entries on many rows: those tests, the driver
#      without a tool, and the four sanitizers over the backward's cuda.cluster, side by side; beside them, the linear
#      cross-entropy's tiny float16 hidden states (notebook/linear-cross-entropy-fuzz-mismatches/tiny_hidden.py).
#   A, B  keep the peers' two parts (.peersA, .peersB carried), for 3.
#   3  with the peers installed (.peers2 carried): the lab run of softmax_backward, both sweeps (results.tgz, to
#      unpack into results/<gpu>/softmax_backward/).
# LAB_COMMIT (the commit the build is of) is written into the outputs; the device's copy of .git is not current.
set -uo pipefail
source scripts/remote/device_call.sh
begin_call >/dev/null
echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
san() {  # san TOOL: scripts/sanitize.sh over softmax_backward, its output headed by the commit (trust.py reads it)
  mkdir -p "$OUT/san"
  echo "== $(date -u) commit=${LAB_COMMIT:-unknown} build sha256 $(sha256sum lab/_C.abi3.so | cut -c1-16): --op" \
    "softmax_backward" >"$OUT/san/$1.txt"
  TOOLS=$1 OMP_NUM_THREADS=2 timeout -s INT "${SAN_LIMIT:-240}" bash scripts/sanitize.sh "$OUT/san/$1" \
    --op softmax_backward >>"$OUT/san/$1.txt" 2>&1
  echo "exit $?" >>"$OUT/san/$1.txt"
}
cluster_checks() {  # cluster_checks SECONDS: side by side, each stopped at SECONDS, the sanitize driver's backward
  # cases without a tool, and the four sanitizers over the backward's cuda.cluster (its table's launches)
  timeout "$1" python scripts/sanitize_driver.py --op softmax_backward >"$OUT/driver.txt" 2>&1 &
  mkdir -p "$OUT/san"
  for tool in memcheck racecheck synccheck initcheck; do
    TOOLS=$tool timeout -s INT "$1" bash scripts/sanitize.sh "$OUT/san/$tool" --op softmax_backward \
      --variant cuda.cluster --no-tuning-shapes >"$OUT/san/$tool.txt" 2>&1 &
  done
}
case ${1:-} in
  1) timeout 300 python -m pytest -q -m gpu tests/test_gpu.py tests/test_tune_backward_cluster.py \
       -k "backward or tune" >"$OUT/tests.txt" 2>&1; echo "exit $?" >>"$OUT/tests.txt" &
     timeout 300 python scripts/sanitize_driver.py --op softmax_backward >"$OUT/driver.txt" 2>&1
     echo "exit $?" >>"$OUT/driver.txt"
     wait
     timeout 240 python scripts/tune/tune_backward_cluster.py --dtype float32 --min-n 131072 \
       --json "$OUT/tune_float32.json" >"$OUT/tune_float32.txt" 2>&1
     echo "exit $?" >>"$OUT/tune_float32.txt"
     for tool in memcheck racecheck synccheck initcheck; do san $tool & done ;;
  2) timeout 300 python -m pytest -q -m gpu tests/test_gpu.py tests/test_operators.py tests/test_autograd.py \
       tests/test_dispatch.py -k "backward or dispatch or autograd or auto" >"$OUT/tests.txt" 2>&1 &
     cluster_checks 240
     timeout -s INT 240 python -m lab.fuzz --op softmax --only lab.auto,cuda.cluster --cases 400 --start 80000 \
       >"$OUT/fuzz.txt" 2>&1 &
     timeout 240 python -c "
from lab import fuzz
from lab.registry import get
v = get('softmax', 'lab.auto')
cases = fuzz.backward_cases(v)
failures = fuzz.compiled_backward_mismatches(v, cases)
print(f'compiled backward of lab.auto: {len(cases)} cases (N = {sorted({n for _, n in cases})}),',
      f'{len(failures)} mismatches', *failures, sep='\n  ')" >"$OUT/compiled_backward.txt" 2>&1 & ;;
  4) timeout 200 python -m pytest -q -m gpu tests/test_operators.py -k "backward_cluster" >"$OUT/tests.txt" 2>&1 &
     cluster_checks 200
     timeout 200 python notebook/linear-cross-entropy-fuzz-mismatches/tiny_hidden.py 70356 70521 \
       >"$OUT/tiny_hidden.txt" 2>&1 & ;;
  A|B) ;;  # begin_call kept the part
  3) install_peers
     timeout -s INT 300 python -m lab.test --op softmax_backward --out "$OUT/res" 2>&1 | grep -vE "^\[[0-9]+/" \
       | tail -60 >"$OUT/lab.txt"
     tar -czf "$OUT/results.tgz" -C "$OUT/res" . && rm -rf "$OUT/res" ;;
  *) echo "call.sh: 1, 2, 3, 4, A or B, not ${1:-nothing}"; exit 2 ;;
esac
wait
cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .  # 8 files come back at most
