#!/usr/bin/env bash
# The device calls of this folder's README, on a machine of one GPU. Run from the repository root:
#   tune   (the build carried as .labso/cur.so.xz): every launch of cuda.cluster at the decode points of the
#          vocabularies where lab.softmax trailed QuACK, timed in 5 interleaved rounds with the copy
#          (scripts/tune/tune_cluster.py --rounds 5), and tune_cluster's GPU tests.
#   ab     (.labso/cur.so.xz the build after, .labso/old.so.xz before): cuda.cluster before and after in separate
#          processes, alternated, at the decode points and a few of many rows; then the GPU tests that read the tables.
#   sweep  (carrying .peers2, after calls carrying .peersA and .peersB on the same warm machine): the decode sweep with
#          QuACK (the command of results/h200/decode/softmax/results.json), then softmax's randomized testing of the
#          cluster kernel and the entries that route to it.
#   profile (carrying .peers2, as sweep): Nsight Compute (scripts/profile.sh) on lab.auto and QuACK at the decode
#          points where lab.auto still trailed QuACK most.
# LAB_COMMIT (the commit the build is of) is written into the outputs; the device's copy of .git is not current.
set -uo pipefail
source scripts/remote/device_call.sh
rows() { local n m; for n in "$@"; do for m in 1 2 4 8 16 32 64; do echo "--shape ${m}x$n"; done; done; }
case ${1:-} in
  tune)
    begin_call >/dev/null
    echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
    tune() {  # tune NAME SECONDS TUNE_CLUSTER-ARGS...
      timeout -s INT "$2" python scripts/tune/tune_cluster.py --rounds 5 "${@:3}" --json "$OUT/$1.json" \
        >"$OUT/$1.txt" 2>&1
      echo "exit $?" >>"$OUT/$1.txt"
    }
    # shellcheck disable=SC2046
    tune bf16_256000 170 --dtype bfloat16 $(rows 256000)
    # shellcheck disable=SC2046
    tune bf16_128256 120 --dtype bfloat16 $(rows 128256 | grep -E "^--shape (16|32|64)x")
    tune fp16_128256 60 --dtype float16 --shape 32x128256 --shape 64x128256
    # shellcheck disable=SC2046
    tune fp32 150 --dtype float32 $(rows 151936 256000)
    timeout -s INT 60 python -m pytest -q -p no:cacheprovider tests/test_tune_cluster.py >"$OUT/tests.txt" 2>&1
    echo "exit $?" >>"$OUT/tests.txt" ;;
  ab)
    begin_call >/dev/null
    echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
    mkdir -p /tmp/ab/old /tmp/ab/new
    for side in old new; do cp -r lab triton_kernels "/tmp/ab/$side/"; done
    xz -dc .labso/old.so.xz >/tmp/ab/old/lab/_C.abi3.so
    sha256sum /tmp/ab/*/lab/_C.abi3.so >"$OUT/ab_builds.txt"
    for round in 1 2; do
      for side in old new; do
        for dtype in bfloat16 float32 float16; do
          case $dtype in
            bfloat16) shapes="$(rows 256000) $(rows 128256 | grep -E '^--shape (1|8|16|32|64)x')" ;;
            float32) shapes="$(rows 151936 256000)" ;;
            float16) shapes="--shape 32x256000 --shape 64x128256 --shape 256x262144" ;;
          esac
          # shellcheck disable=SC2086
          PYTHONPATH=/tmp/ab/$side timeout 100 python scripts/interleave.py --variants cuda.cluster --dtype $dtype \
            $shapes --rounds 5 2>&1 | grep -v "^W1" | sed "s/^/$side $round /"
        done
      done
    done >"$OUT/ab.txt"
    # the tests that read the tables, and the four sanitizers over the cluster kernels, side by side
    timeout -s INT 400 python -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_cuda_compile.py \
      tests/test_cross_entropy.py tests/test_dispatch.py tests/test_tune_cluster.py \
      "tests/test_gpu.py::test_cluster_plan_for_many_rows" >"$OUT/tests.txt" 2>&1 &
    for tool in memcheck racecheck synccheck initcheck; do
      { echo "== $(date -u) commit=${LAB_COMMIT:-unknown} build sha256 $(sha256sum lab/_C.abi3.so | cut -c1-16)"
        TOOLS=$tool OMP_NUM_THREADS=2 timeout -s INT 400 bash scripts/sanitize.sh "$OUT/san_$tool" --op softmax \
          --op cross_entropy --variant cuda.cluster --no-tuning-shapes 2>&1
        echo "exit $?"; } >"$OUT/san_$tool.txt" &
    done
    wait ;;
  sweep)
    begin_peers_call >/dev/null
    echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
    timeout -s INT 380 python -m lab.test -s decode -d bfloat16 -d float32 -d float16 \
      --only lab.auto,cuda.auto,cuda.cluster,cuda.grid_split,peer.quack,torch.softmax --out "$OUT/res" \
      >"$OUT/decode.txt" 2>&1
    echo "exit $?" >>"$OUT/decode.txt"
    timeout -s INT 120 python -m lab.fuzz --op softmax --only cuda.cluster,cuda.auto,lab.auto --cases 2000 \
      --start 68000 --max-elements 4194304 --json "$OUT/fuzz_softmax.json" 2>&1 | grep -v "^W1" >"$OUT/fuzz_softmax.txt" ;;
  profile)
    begin_peers_call >/dev/null
    echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
    for point in "8x151936 float32" "8x256000 float32" "1x256000 float16"; do
      for variant in lab.auto peer.quack; do
        echo "== $variant $point"
        # shellcheck disable=SC2086
        timeout 150 bash scripts/profile.sh $variant $point
      done
    done >"$OUT/profile.txt" 2>&1 ;;
  *) echo "call.sh: tune, ab, sweep or profile, not ${1:-nothing}"; exit 2 ;;
esac
cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .  # 8 files come back at most
