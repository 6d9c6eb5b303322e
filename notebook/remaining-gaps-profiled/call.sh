#!/usr/bin/env bash
# The device calls of this folder's README, on a machine of one GPU, the build carried as .labso/cur.so.xz (and, for
# the A/B, the cross-entropy Triton kernel before its gradient's change as .oldkernel/cross_entropy_before_terms.py:
# `git show` of it at the parent of the commit that took each term's own difference, which
# `git log triton_kernels/cross_entropy.py` names). Run from the repository root:
#   1  alone on the GPU, Nsight Compute at the points where lab.auto trails a target (scripts/profile.sh: occupancy,
#      clusters resident, waves, DRAM throughput) and the CTAs each SM ran (sm__ctas_launched's min, max and sum over
#      the SMs); then side by side: the GPU test and the sanitize driver's section of the backward's persistent
#      entries on many rows, and the head's torch.compile in the randomized testing (gradients, then the loss alone).
#   2  the cross-entropy Triton kernels' A/B: `lab.test --op cross_entropy --only 'triton.*'` on the kernel as it is
#      (new) and as it was before the gradient's terms were taken one by one (old), in the order new, old, old, new.
#   3  carried: .labso/cur.so.xz (the build with register_cached's 16-bit backward at rows of 4096 on 512 threads of
#      8 elements) and .labso/old.so.xz (the build before it), .oldkernel/ (the cross-entropy kernel before the
#      gradient's terms, old, and with every term its own at every element, terms). Alone on the GPU:
#      - the backward's A/B: `lab.test --op softmax_backward` of cuda.register_cached and triton.fused (the same
#        kernel in both builds: a yardstick) at 16-bit rows of 4096 and 3000, on each build, new, old, old, new;
#      - the cross-entropy kernel's A/B: triton.looped in three forms, fold (the checkout's when call 3 ran: the terms
#        folded off the target, each its own at it, at every dtype), terms, old, in the order fold, terms, old, old,
#        terms, fold;
#      then side by side: the GPU tests of the backward and of cross-entropy, the four sanitizers over the backward
#      (its variants and tuning shapes), and cross-entropy's randomized testing of its Triton variants and lab.auto
#      with the gradient.
#   4  alone on the GPU, the cross-entropy kernel's gradient in its forms timed in one process (ce_forms.py: at call 4
#      fold, old, terms and old_fixed, the checkout's form then fold; the checkout's own form since); then
#      the GPU tests of the backward and of cross-entropy (call 3's were stopped by their time limit).
#   5  after the kernel took each dtype's faster form: alone, ce_forms.py (at call 5 the checkout's form beside fold,
#      terms and old);
#      then side by side, the GPU tests of cross-entropy and the linear cross-entropy, and cross-entropy's randomized
#      testing of its Triton variants and lab.auto with the gradient.
# LAB_COMMIT (the commit the build is of) is written into the outputs; the device's copy of .git is not current.
set -uo pipefail
source scripts/remote/device_call.sh
begin_call >/dev/null
echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
prof() {  # prof NAME OP VARIANT MxN DTYPE [KERNEL-REGEX]: profile.sh's sections, then the CTAs per SM
  local name=$1 op=$2
  shift 2
  { echo "== $name: $op $*"
    PROFILE_OP=$op timeout 120 bash scripts/profile.sh "$@"
    echo "-- CTAs launched per SM (min, max, sum over the SMs)"
    PYTHONPATH=$PWD timeout 120 "$NCU" --clock-control none --profile-from-start off -k "regex:${4:-[Ss]oftmax|cluster_rows}" \
      --launch-skip 1 --launch-count 1 --metrics sm__ctas_launched.min,sm__ctas_launched.max,sm__ctas_launched.sum \
      python scripts/profile_point.py "$1" "$2" "$3" --op "$op" 2>&1 | grep -E "sm__ctas|ERR|rror"
  } >"$OUT/prof_$name.txt" 2>&1
}
san() {  # san TOOL: scripts/sanitize.sh over softmax_backward (its variants and tuning shapes), headed by the build
  mkdir -p "$OUT/san"
  echo "== $(date -u) commit=${LAB_COMMIT:-unknown} build sha256 $(sha256sum lab/_C.abi3.so | cut -c1-16): --op" \
    "softmax_backward" >"$OUT/san/$1.txt"
  TOOLS=$1 OMP_NUM_THREADS=2 timeout -s INT 240 bash scripts/sanitize.sh "$OUT/san/$1" --op softmax_backward \
    >>"$OUT/san/$1.txt" 2>&1
  echo "exit $?" >>"$OUT/san/$1.txt"
}
ce_run() {  # ce_run LABEL: the Triton cross-entropy variants at three shapes, two dtypes
  timeout 200 python -m lab.test --op cross_entropy --only 'triton.*' --shape 4096x8192 --shape 4096x32000 \
    --shape 4096x128256 -d bf16 -d fp32 --no-save --csv "$OUT/ce_$1.csv" >"$OUT/ce_$1.txt" 2>&1
  echo "exit $?" >>"$OUT/ce_$1.txt"
}
case ${1:-} in
  1) "$NCU" --query-metrics --chip gh100 2>/dev/null | grep -E "^sm__ctas_launched|cluster" >"$OUT/ncu_metrics.txt"
     prof bwd_f32_256x262144 softmax_backward cuda.cluster 256x262144 float32
     prof fwd_f32_8x151936 softmax lab.auto 8x151936 float32
     prof fwd_f32_9x151936 softmax lab.auto 9x151936 float32
     prof bwd_bf16_4096x4096_register_cached softmax_backward cuda.register_cached 4096x4096 bfloat16
     prof bwd_bf16_4096x4096_triton_fused softmax_backward triton.fused 4096x4096 bfloat16 backward
     { timeout 240 python -m pytest -q -m gpu tests/test_operators.py -k "backward_cluster" >"$OUT/tests.txt" 2>&1
       echo "exit $?" >>"$OUT/tests.txt"; } &
     { timeout 240 python scripts/sanitize_driver.py --op softmax_backward --variant cuda.cluster --no-tuning-shapes \
         >"$OUT/driver.txt" 2>&1
       echo "exit $?" >>"$OUT/driver.txt"; } &
     { for op in linear_cross_entropy linear_cross_entropy_loss; do
         timeout -s INT 170 python -m lab.fuzz --op $op --only torch.compile --max-elements 4194304 --start 70000 \
           --cases 200 --json "$OUT/fuzz_$op.json" >"$OUT/fuzz_$op.txt" 2>&1
         echo "exit $?" >>"$OUT/fuzz_$op.txt"
       done; } & ;;
  2) cp triton_kernels/cross_entropy.py /tmp/ce_new.py
     for label in new_1 old_1 old_2 new_2; do
       case $label in
         old*) cp .oldkernel/cross_entropy_before_terms.py triton_kernels/cross_entropy.py ;;
         *) cp /tmp/ce_new.py triton_kernels/cross_entropy.py ;;
       esac
       ce_run "$label"
     done
     cp /tmp/ce_new.py triton_kernels/cross_entropy.py ;;
  3) for label in new_1 old_1 old_2 new_2; do
       so=.labso/cur.so.xz
       case $label in old*) so=.labso/old.so.xz ;; esac
       xz -dc $so >lab/_C.abi3.so && sha256sum lab/_C.abi3.so >"$OUT/bwd_$label.txt"
       timeout 200 python -m lab.test --op softmax_backward --only cuda.register_cached,triton.fused \
         --shape 4096x4096 --shape 16384x4096 --shape 4096x3000 -d bf16 -d fp16 --no-save \
         --csv "$OUT/bwd_$label.csv" >>"$OUT/bwd_$label.txt" 2>&1
       echo "exit $?" >>"$OUT/bwd_$label.txt"
     done
     xz -dc .labso/cur.so.xz >lab/_C.abi3.so
     cp triton_kernels/cross_entropy.py /tmp/ce_fold.py
     for label in fold_1 terms_1 old_1 old_2 terms_2 fold_2; do
       case $label in
         old*) cp .oldkernel/cross_entropy_before_terms.py triton_kernels/cross_entropy.py ;;
         terms*) cp .oldkernel/cross_entropy_terms.py triton_kernels/cross_entropy.py ;;
         *) cp /tmp/ce_fold.py triton_kernels/cross_entropy.py ;;
       esac
       timeout 200 python -m lab.test --op cross_entropy --only triton.looped --shape 4096x32000 \
         --shape 4096x128256 -d bf16 -d fp32 --no-save --csv "$OUT/ce_$label.csv" >"$OUT/ce_$label.txt" 2>&1
       echo "exit $?" >>"$OUT/ce_$label.txt"
     done
     cp /tmp/ce_fold.py triton_kernels/cross_entropy.py
     timeout 240 python -m pytest -q -m gpu tests/test_gpu.py tests/test_operators.py tests/test_cross_entropy.py \
       tests/test_linear_cross_entropy.py -k "backward or cross_entropy" >"$OUT/tests.txt" 2>&1 &
     for tool in memcheck racecheck synccheck initcheck; do san $tool & done
     timeout -s INT 240 python -m lab.fuzz --op cross_entropy --only 'triton.*,lab.auto' --cases 2000 --start 70000 \
       --json "$OUT/fuzz_cross_entropy.json" >"$OUT/fuzz_cross_entropy.txt" 2>&1 & ;;
  4) timeout 300 python notebook/remaining-gaps-profiled/ce_forms.py --rounds 7 >"$OUT/ce_forms.txt" 2>&1
     echo "exit $?" >>"$OUT/ce_forms.txt"
     timeout 400 python -m pytest -q -m gpu tests/test_gpu.py tests/test_operators.py tests/test_cross_entropy.py \
       tests/test_linear_cross_entropy.py -k "backward or cross_entropy" >"$OUT/tests.txt" 2>&1
     echo "exit $?" >>"$OUT/tests.txt" ;;
  5) timeout 200 python notebook/remaining-gaps-profiled/ce_forms.py --rounds 7 >"$OUT/ce_forms.txt" 2>&1
     echo "exit $?" >>"$OUT/ce_forms.txt"
     { timeout 200 python -m pytest -q -m gpu tests/test_cross_entropy.py tests/test_linear_cross_entropy.py \
         >"$OUT/tests.txt" 2>&1; echo "exit $?" >>"$OUT/tests.txt"; } &
     timeout -s INT 180 python -m lab.fuzz --op cross_entropy --only 'triton.*,lab.auto' --cases 2000 --start 72000 \
       --json "$OUT/fuzz_cross_entropy.json" >"$OUT/fuzz_cross_entropy.txt" 2>&1 & ;;
  *) echo "call.sh: 1, 2, 3, 4 or 5, not ${1:-nothing}"; exit 2 ;;
esac
wait
cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .  # 8 files come back at most
