#!/usr/bin/env bash
# Kind 5's mend on a GPU, and the randomized testing after it (call 4 of this folder's README), on a machine of one
# GPU with the build carried as .labso/cur.so.xz and the Triton kernel before the mend carried as
# .oldkernel/cross_entropy.py (the control: the same test on the kernel that re-read the target's logit must fail).
# Run from the repository root; side by side:
#   - tests/test_cross_entropy.py's GPU test of the gradient written over the logits, on the mended kernel, then on
#     the old one in a copy of the tree;
#   - diagnose.py on 71255 and 71589 (the training path three times);
#   - the linear cross-entropy's randomized testing, with the gradients and the loss alone, cases 70000 to 71999;
#   - cross-entropy's, with the gradient and the loss alone, cases 70000 to 71999 in two parts of 1000 each without
#     torch.compile, whose Inductor compile per case is most of such a run's time, and torch.compile's own first 200
#     cases apart (the parts for scripts/trust.py --refuzz).
# LAB_COMMIT (the commit the build and the tree are of) is written into the outputs; the device's .git is not current.
set -uo pipefail
source scripts/remote/device_call.sh
begin_call >/dev/null
echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
LIMIT=${LIMIT:-400}
fuzz() {  # fuzz NAME OP START CASES ARGS...: one part, stopped by SIGINT at LIMIT seconds (its finished cases kept)
  timeout -s INT "$LIMIT" python -m lab.fuzz --op "$2" --start "$3" --cases "$4" --max-elements 4194304 "${@:5}" \
    --json "$OUT/fuzz/$1.json" 2>&1 | grep -v "^W1" >"$OUT/fuzz/$1.txt"
}
mkdir -p "$OUT/fuzz"
race() {
  python -m pytest -q -m gpu tests/test_cross_entropy.py -k gradient_written_over >"$OUT/race_mended.txt" 2>&1
  echo "exit $?" >>"$OUT/race_mended.txt"
  rm -rf /tmp/old && mkdir /tmp/old && cp -r lab triton_kernels tests scripts pyproject.toml /tmp/old/ &&
    cp .oldkernel/cross_entropy.py /tmp/old/triton_kernels/cross_entropy.py &&
    (cd /tmp/old && PYTHONPATH=/tmp/old python -m pytest -q -p no:cacheprovider -m gpu tests/test_cross_entropy.py \
      -k gradient_written_over) >"$OUT/race_old_kernel.txt" 2>&1
  echo "exit $?" >>"$OUT/race_old_kernel.txt"
}
MODE=${1:-4}  # 4: as above; linear: the linear cross-entropy's parts alone (call 5); 6: after kind 4's mends, the
# GPU tests of both cross-entropies in place of the race's test and diagnose.py, then every part as in 4 (call 6)
case $MODE in 4|linear|6) ;; *) echo "call.sh: 4, linear or 6, not $MODE"; exit 2 ;; esac
if [ "$MODE" = 4 ]; then
  race &
  timeout 300 python notebook/linear-cross-entropy-fuzz-mismatches/diagnose.py 71255 71589 >"$OUT/diagnose.txt" 2>&1 &
elif [ "$MODE" = 6 ]; then
  { timeout "$LIMIT" python -m pytest -q -m gpu tests/test_cross_entropy.py tests/test_linear_cross_entropy.py \
      >"$OUT/tests.txt" 2>&1; echo "exit $?" >>"$OUT/tests.txt"; } &
fi
if [ "$MODE" != linear ]; then
  for start in 70000 71000; do
    fuzz ce_$start cross_entropy $start 1000 --skip torch.compile &
    fuzz ce_loss_$start cross_entropy_loss $start 1000 --skip torch.compile &
  done
  fuzz ce_compile cross_entropy 70000 200 --only torch.compile &
  fuzz ce_loss_compile cross_entropy_loss 70000 200 --only torch.compile &
fi
fuzz linear linear_cross_entropy 70000 2000 &
fuzz linear_loss linear_cross_entropy_loss 70000 2000 &
wait
cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .  # 8 files come back at most
