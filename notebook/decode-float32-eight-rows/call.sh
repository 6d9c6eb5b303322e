#!/usr/bin/env bash
# The device calls of this folder's README, on a machine of one GPU. Run from the repository root:
#   tune   (the build carried as .labso/cur.so.xz): every launch of cuda.cluster at float32 rows of 151936 and 256000,
#          at 1, 2, 4, 8, 12, 16 and 32 rows (ROWS="9 10 11": those instead), the new 256 x 80 shape among them, timed
#          in 5 interleaved rounds with the copy (scripts/tune/tune_cluster.py --rounds 5); then the new shape's GPU
#          tests and the four sanitizers over it (ROWS set: the timing alone).
#   ab     (.labso/cur.so.xz the build after, .labso/old.so.xz before): cuda.cluster before and after in separate
#          processes, alternated, at the float32 decode points; then the GPU tests that read the tables, the four
#          sanitizers over softmax's and cross-entropy's cluster kernels, and cross-entropy's randomized testing.
#   sweep  (carrying .peers2, after calls carrying .peersA and .peersB on the same warm machine): the decode sweep with
#          QuACK (the command of results/h200/decode/softmax/results.json), then softmax's randomized testing of the
#          cluster kernel and the entries that route to it.
# LAB_COMMIT (the commit the build is of) is written into the outputs; the device's copy of .git is not current.
set -uo pipefail
source scripts/remote/device_call.sh
shapes() { local n m; for n in 151936 256000; do for m in "$@"; do echo "--shape ${m}x$n"; done; done; }
sanitize() {  # sanitize SECONDS SANITIZE_DRIVER-ARGS...: the four tools side by side, one process each
  local tool
  for tool in memcheck racecheck synccheck initcheck; do
    { echo "== $(date -u) commit=${LAB_COMMIT:-unknown} build sha256 $(sha256sum lab/_C.abi3.so | cut -c1-16)"
      TOOLS=$tool OMP_NUM_THREADS=2 timeout -s INT "$1" bash scripts/sanitize.sh "$OUT/san_$tool" "${@:2}" 2>&1
      echo "exit $?"; } >"$OUT/san_$tool.txt" &
  done
}
case ${1:-} in
  tune)
    begin_call >/dev/null
    echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
    # shellcheck disable=SC2046
    timeout -s INT 200 python scripts/tune/tune_cluster.py --rounds 5 --dtype float32 \
      $(shapes ${ROWS:-1 2 4 8 12 16 32}) --json "$OUT/tune.json" >"$OUT/tune.txt" 2>&1
    echo "exit $?" >>"$OUT/tune.txt"
    [ -n "${ROWS:-}" ] && { cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .; exit; }
    timeout -s INT 300 python -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_gpu.py -k 256x80 \
      >"$OUT/tests.txt" 2>&1 &
    sanitize 300 --op softmax --tuning-shapes-only --tuning-label 256x80s0 ;;
  ab)
    begin_call >/dev/null
    echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
    mkdir -p /tmp/ab/old /tmp/ab/new
    for side in old new; do cp -r lab triton_kernels "/tmp/ab/$side/"; done
    xz -dc .labso/old.so.xz >/tmp/ab/old/lab/_C.abi3.so
    sha256sum /tmp/ab/*/lab/_C.abi3.so >"$OUT/ab_builds.txt"
    for round in 1 2; do
      for side in old new; do
        # shellcheck disable=SC2046
        PYTHONPATH=/tmp/ab/$side timeout 100 python scripts/interleave.py --variants cuda.cluster --dtype float32 \
          $(shapes 1 2 4 8 12 16 32 64) --rounds 5 2>&1 | grep -v "^W1" | sed "s/^/$side $round /"
      done
    done >"$OUT/ab.txt"
    timeout -s INT 400 python -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_cuda_compile.py \
      tests/test_cross_entropy.py tests/test_dispatch.py tests/test_tune_cluster.py \
      "tests/test_gpu.py::test_cluster_plan_for_more_rows" >"$OUT/tests.txt" 2>&1 &
    sanitize 400 --op softmax --op cross_entropy --variant cuda.cluster --no-tuning-shapes
    for op in cross_entropy cross_entropy_loss; do
      timeout -s INT 400 python -m lab.fuzz --op $op --cases 3000 --start 70000 --max-elements 4194304 \
        --json "$OUT/fuzz_$op.json" >"$OUT/fuzz_$op.txt" 2>&1 &
    done ;;
  sweep)
    begin_peers_call >/dev/null
    echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
    timeout -s INT 380 python -m lab.test -s decode -d bfloat16 -d float32 -d float16 \
      --only lab.auto,cuda.auto,cuda.cluster,cuda.grid_split,peer.quack,torch.softmax --out "$OUT/res" \
      >"$OUT/decode.txt" 2>&1
    echo "exit $?" >>"$OUT/decode.txt"
    timeout -s INT 150 python -m lab.fuzz --op softmax --only cuda.cluster,cuda.auto,lab.auto --cases 2000 \
      --start 70000 --max-elements 4194304 --json "$OUT/fuzz_softmax.json" 2>&1 | grep -v "^W1" \
      >"$OUT/fuzz_softmax.txt" ;;
  *) echo "call.sh: tune, ab or sweep, not ${1:-nothing}"; exit 2 ;;
esac
wait
cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .  # 8 files come back at most
