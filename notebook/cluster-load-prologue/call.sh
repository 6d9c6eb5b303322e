#!/usr/bin/env bash
# The calls on a machine of four GPUs (modes 5 to 8 on one GPU too) for the change to the cluster kernel's start and
# exchange (this folder's README), two builds carried (.labso/old.so.xz before the change, .labso/cur.so.xz after).
# Run from the repository root: bash notebook/cluster-load-prologue/call.sh 1|2|3|4|5|6|7|8
# Call 1 ran an earlier form of mode 1: its sanitizers and tests stopped at 540 and 500 s, its A/B without 2 x 16384
# and 2 x 10240.
# 1: an A/B of cuda.cluster, before and after alternated twice in separate processes, on GPU 0; on GPUs 1 to 3 the
#    four sanitizers over the cluster kernels of the build after (every operator's cuda.cluster sections, softmax's
#    cluster tuning shapes, the backward's tuning shapes) and the GPU tests (scripts/remote/gpu.sh's list).
# 2: the same with the GPU tests in three processes, one A/B round, then the decode rows' shapes timed
#    (scripts/tune/tune_cluster.py) on GPU 0. It ran past the call's limit, and only its first 8 files came back.
# 3: the sanitizers alone, their 16 processes over the four GPUs, each stopped at SAN_LIMIT seconds (default 480).
# 4: the four sanitizers over softmax's cuda.cluster sections alone, one GPU each (after mode 3 found the driver's
#    section of the entries for many rows asking a plan for aligned rows of rows off 16-byte boundaries).
# 5: mode 4's sanitizers (the driver's many-rows section mended, clusters of more than 8 CTAs held to 2 rows under
#    synccheck), beside them the GPU tests that call 2 did not finish (test_operators, test_properties,
#    test_linear_cross_entropy) and those that read the 16-byte pack (test_gpu, test_cross_entropy, test_dispatch,
#    the tuners'), the synccheck repro of notebook/synccheck-on-16-cta-clusters on
#    clusters of 9, 10 and 12 CTAs, and the decode rows of bfloat16 256000 at 16 to 64 rows timed on GPU 0 (not on a
#    machine of one GPU, where the rest runs on it beside them).
# 6 and 7, for trust.md at one build on a machine of one GPU: 6 runs test_operators (mode 5 stopped it at 480 s),
#    scripts/trust.py's sections but the randomized testing and the sanitizers, and softmax's randomized testing of
#    every variant from case 64000 (a part for trust.py --refuzz); 7 the four sanitizers over every CUDA variant but the
#    tuning shapes (softmax's in one process a tool, the other operators' in another), and cross-entropy's randomized
#    testing, with the gradient and the loss alone, from case 64000.
# 8: the decode points that trail QuACK, every launch of cuda.cluster timed there (scripts/tune/tune_cluster.py, one
#    GPU, nothing beside it): float32 8 x 151936, 8 x 256000 and 32 x 151936 and float16 64 x 128256 on both grids,
#    bfloat16 1 to 64 rows of 256000 one cluster per row (the 32-row start of the entry for many rows, re-measured;
#    float16 takes bfloat16's table).
set -uo pipefail
source scripts/remote/device_call.sh
begin_call >/dev/null
mkdir -p /tmp/ab/old /tmp/ab/new
for side in old new; do cp -r lab triton_kernels "/tmp/ab/$side/"; done
xz -dc .labso/old.so.xz >/tmp/ab/old/lab/_C.abi3.so
sha256sum /tmp/ab/*/lab/_C.abi3.so >"$OUT/ab_builds.txt"
mv .labso /tmp/labso_aside  # the scripts below must not unpack it again while others load lab/

ab() {  # ab ROUNDS: cuda.cluster at the decode points and a few of many rows, before and after, alternated
  local dtype shapes
  for round in $(seq "$1"); do
    for side in old new; do
      for dtype in bfloat16 float32 float16; do
        case $dtype in
          bfloat16) shapes="1x256000 2x256000 4x256000 8x256000 16x256000 32x256000 64x256000 1x128256 8x128256
                      64x128256 1x32000 64x32000 1x151936 4096x32768 1024x131072 256x262144 4096x4096 8x50257
                      2x16384 2x10240" ;;
          float32) shapes="1x256000 8x256000 32x256000 8x151936 1x131072 1024x262144 4096x65536 4096x16384 4096x2048" ;;
          float16) shapes="64x32000 8x128256 16x256000" ;;
        esac
        # shellcheck disable=SC2046
        CUDA_VISIBLE_DEVICES=0 PYTHONPATH=/tmp/ab/$side python scripts/interleave.py --variants cuda.cluster \
          --dtype $dtype $(printf -- "--shape %s " $shapes) --rounds 5 2>&1 | grep -v "^W1" | sed "s/^/$side $round /"
      done
    done
  done >"$OUT/ab.txt"
}
san() {  # san GPU NAME TOOLS DRIVER-ARGS...: scripts/sanitize.sh on that GPU, stopped by SIGINT at SAN_LIMIT, its
  # output headed by the commit (trust.py --sanitizer-summary reads it) and the build
  echo "== $(date -u) commit=${LAB_COMMIT:-unknown} build sha256 $(sha256sum lab/_C.abi3.so | cut -c1-16): ${*:4}" \
    >"$OUT/san/$2.txt"
  CUDA_VISIBLE_DEVICES=$(($1 % NGPU)) TOOLS=$3 OMP_NUM_THREADS=2 timeout -s INT "${SAN_LIMIT:-480}" \
    bash scripts/sanitize.sh "$OUT/san/$2" "${@:4}" >>"$OUT/san/$2.txt" 2>&1
  echo "exit $?" >>"$OUT/san/$2.txt"
}
gpu_tests() {  # gpu_tests GPU NAME MODULES...: stopped by SIGINT at TEST_LIMIT seconds (default 480)
  CUDA_VISIBLE_DEVICES=$(($1 % NGPU)) timeout -s INT "${TEST_LIMIT:-480}" python -m pytest -q -p no:cacheprovider \
    -rfE --tb=short --durations=5 -k "not test_cli_runs" "${@:3}" >"$OUT/$2.txt" 2>&1
  echo "exit $?" >>"$OUT/$2.txt"
}
mkdir -p "$OUT/san"
NGPU=$(nvidia-smi -L | grep -c "^GPU")  # GPU k of the plans below runs on GPU k mod NGPU
labels=$(python -c "from lab.backends.cuda_variants import cluster_shapes
print(' '.join('--tuning-label ' + c.label() for c in cluster_shapes()))")
parts=("variant_softmax --op softmax --variant cuda.cluster --no-tuning-shapes"
       "variant_others --op softmax_backward --op cross_entropy --op linear_cross_entropy --variant cuda.cluster --no-tuning-shapes"
       "shapes_softmax --op softmax --tuning-shapes-only $labels"
       "shapes_backward --op softmax_backward --tuning-shapes-only")
k=0
gpus=3 first=1  # GPUs 1 to 3; all four from mode 3 on
case "${1:-}" in 3|4|5|6|7) gpus=4 first=0 ;; esac
case "${1:-}" in 4|5) parts=("${parts[0]}") ;; esac
[ "${1:-}" = 6 ] || [ "${1:-}" = 8 ] && parts=()
[ "${1:-}" = 7 ] && parts=("every_softmax --op softmax --no-tuning-shapes"
  "every_other --op vector_add --op softmax_backward --op cross_entropy --op linear_cross_entropy --no-tuning-shapes")
for tool in memcheck racecheck synccheck initcheck; do
  for part in "${parts[@]}"; do
    read -ra a <<<"$part"
    san $((first + k % gpus)) "${tool}_${a[0]}" $tool "${a[@]:1}" &
    k=$((k + 1))
  done
done
eval "$(sed -n '/^GPU_TESTS=/,/"$/p' scripts/remote/gpu.sh)"  # the driver's list of test modules that use the GPU
read -ra modules <<<"$(echo $GPU_TESTS)"
case "${1:?1 to 8}" in
  1) ab 2 &
     gpu_tests 3 gpu_tests "${modules[@]}" ;;
  2) { ab 1; shapes() { local n m; for n in "$@"; do for m in 1 2 4 8 16 32 64; do echo "--shape ${m}x$n"; done; done; }
       # shellcheck disable=SC2046
       CUDA_VISIBLE_DEVICES=0 timeout -s INT 200 python scripts/tune/tune_cluster.py --dtype bfloat16 \
         --grid one-per-row $(shapes 256000) --json "$OUT/tune16.json" >"$OUT/tune16.txt" 2>&1; } &
     gpu_tests 1 gpu_tests_gpu tests/test_gpu.py &
     gpu_tests 2 gpu_tests_operators tests/test_operators.py tests/test_properties.py &
     gpu_tests 3 gpu_tests_rest $(printf '%s\n' "${modules[@]}" | grep -vE "test_(gpu|operators|properties)\.py") ;;
  3|4) ;;
  5) gpu_tests 0 gpu_tests_operators tests/test_operators.py &
     gpu_tests 1 gpu_tests_properties tests/test_properties.py &
     gpu_tests 2 gpu_tests_lce tests/test_linear_cross_entropy.py &
     { TEST_LIMIT=240 gpu_tests 3 gpu_tests_gpu tests/test_gpu.py
       TEST_LIMIT=240 gpu_tests 3 gpu_tests_pack tests/test_cross_entropy.py tests/test_dispatch.py \
         tests/test_tune_cluster.py tests/test_tune_backward_cluster.py tests/test_tune_cross_entropy_cluster.py; } &
     CUDA_VISIBLE_DEVICES=$((3 % NGPU)) OUT=/tmp CLUSTERS="9 10 12" timeout 300 \
       bash notebook/synccheck-on-16-cta-clusters/repro.sh >"$OUT/repro_9_10_12.txt" 2>&1 &
     # shellcheck disable=SC2046
     [ "$NGPU" -gt 1 ] && CUDA_VISIBLE_DEVICES=0 timeout -s INT 240 python scripts/tune/tune_cluster.py \
       --dtype bfloat16 --grid one-per-row $(printf -- "--shape %sx256000 " 16 32 64) --json "$OUT/tune16.json" \
       >"$OUT/tune16.txt" 2>&1 ;;
  6) TEST_LIMIT=500 gpu_tests 0 gpu_tests_operators tests/test_operators.py &
     timeout -s INT 510 python scripts/trust.py --out "$OUT/trust" \
       --sections citizenship,bad_inputs,cross_entropy_entry,linear_cross_entropy_entry,large >"$OUT/trust.txt" 2>&1 &
     timeout -s INT 500 python -m lab.fuzz --cases 4000 --start 64000 --max-elements 4194304 \
       --json "$OUT/fuzz_softmax.json" >"$OUT/fuzz_softmax.txt" 2>&1 ;;
  7) for op in cross_entropy cross_entropy_loss; do
       timeout -s INT 500 python -m lab.fuzz --op $op --cases 3000 --start 64000 --max-elements 4194304 \
         --json "$OUT/fuzz_$op.json" >"$OUT/fuzz_$op.txt" 2>&1 &
     done ;;
  8) tune() {  # tune DTYPE SECONDS TUNE_CLUSTER-ARGS...
       CUDA_VISIBLE_DEVICES=0 timeout -s INT "$2" python scripts/tune/tune_cluster.py --dtype "$1" "${@:3}" \
         --json "$OUT/tune_$1.json" >"$OUT/tune_$1.txt" 2>&1
     }
     tune float32 180 --shape 8x151936 --shape 8x256000 --shape 32x151936
     tune float16 90 --shape 64x128256
     # shellcheck disable=SC2046
     tune bfloat16 240 --grid one-per-row $(printf -- "--shape %sx256000 " 1 2 4 8 16 32 64) ;;
  *) echo "call.sh: 1 to 8, not $1"; exit 2 ;;
esac
wait
cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .  # 8 files come back at most
