#!/usr/bin/env bash
# The device calls of this folder's README, on a machine of one GPU, the build carried as .labso/cur.so.xz; results
# for scripts/trust.py --refuzz (results/h200/trust/). Run from the repository root:
#   1  the lab's own command once, on its quick sweep (python -m lab.test --quick, results kept aside: a check that it
#      runs, not a measurement); then side by side: scripts/trust.py's sections but the randomized testing and the
#      sanitizers, and the randomized testing of every softmax variant and of the linear cross-entropy (with its
#      gradients, and the loss alone).
#   2  the four sanitizers over every CUDA variant but the tuning shapes, a process a tool over softmax's variants and
#      one over the other operators', and cross-entropy's randomized testing (with the gradient, and the loss alone).
#   3  after the checker's and torch.chunked's changes (notebook/linear-cross-entropy-fuzz-mismatches/), side by side:
#      the linear cross-entropy's randomized testing again, cross-entropy's with the gradient (call 2's stopped
#      before its first 500 cases, so it kept nothing), and that folder's diagnose.py on the float32 cases.
# LAB_COMMIT (the commit the build is of) is written into the outputs; the device's copy of .git is not current.
set -uo pipefail
source scripts/remote/device_call.sh
begin_call >/dev/null
echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
fuzz() {  # fuzz OP CASES SECONDS: a part for trust.py --refuzz, from case 70000, stopped by SIGINT at SECONDS
  timeout -s INT "$3" python -m lab.fuzz --op "$1" --cases "$2" --start 70000 --max-elements 4194304 \
    --json "$OUT/fuzz_$1.json" 2>&1 | grep -v "^W1" >"$OUT/fuzz_$1.txt"
}
san() {  # san NAME TOOL DRIVER-ARGS...: scripts/sanitize.sh, its output headed by the commit (trust.py reads it)
  mkdir -p "$OUT/san"
  echo "== $(date -u) commit=${LAB_COMMIT:-unknown} build sha256 $(sha256sum lab/_C.abi3.so | cut -c1-16): ${*:3}" \
    >"$OUT/san/$1.txt"
  TOOLS=$2 OMP_NUM_THREADS=2 timeout -s INT 480 bash scripts/sanitize.sh "$OUT/san/$1" "${@:3}" >>"$OUT/san/$1.txt" 2>&1
  echo "exit $?" >>"$OUT/san/$1.txt"
}
case ${1:-} in
  1) timeout -s INT 150 python -m lab.test --quick --out /tmp/quick >"$OUT/lab_quick.txt" 2>&1
     echo "exit $?" >>"$OUT/lab_quick.txt"
     timeout -s INT 400 python scripts/trust.py --out "$OUT/trust" \
       --sections citizenship,bad_inputs,cross_entropy_entry,linear_cross_entropy_entry,large >"$OUT/trust.txt" 2>&1 &
     fuzz softmax 4000 400 &
     fuzz linear_cross_entropy 2000 400 &
     fuzz linear_cross_entropy_loss 2000 400 & ;;
  2) for tool in memcheck racecheck synccheck initcheck; do
       san "${tool}_every_softmax" $tool --op softmax --no-tuning-shapes &
       san "${tool}_every_other" $tool --op vector_add --op softmax_backward --op cross_entropy \
         --op linear_cross_entropy --no-tuning-shapes &
     done
     fuzz cross_entropy 3000 480 &
     fuzz cross_entropy_loss 3000 480 & ;;
  3) fuzz linear_cross_entropy 2000 260 &
     fuzz linear_cross_entropy_loss 2000 260 &
     fuzz cross_entropy 3000 260 &
     timeout 200 python notebook/linear-cross-entropy-fuzz-mismatches/diagnose.py 71082 71255 71484 71589 \
       >"$OUT/diagnose.txt" 2>&1 & ;;
  *) echo "call.sh: 1, 2 or 3, not ${1:-nothing}"; exit 2 ;;
esac
wait
cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .  # 8 files come back at most
