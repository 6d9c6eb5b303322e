#!/usr/bin/env bash
# The device calls of this folder's README, on a machine of one GPU, at commit f89b852 (which has the 256 x 80 shape;
# it was removed after). Run from the repository root, with the build of that commit carried as .labso/cur.so.xz:
#   tune   every launch of cuda.cluster at float32 rows of 151936 and 256000, at 1, 2, 4, 8, 12, 16 and 32 rows
#          (ROWS="8 9 10": those instead), the 256 x 80 shape among them, timed in 5 interleaved rounds with the copy
#          (scripts/tune/tune_cluster.py --rounds 5); then the new shape's GPU tests and the four sanitizers over it
#          (ROWS set: the timing alone).
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
  *) echo "call.sh: tune, not ${1:-nothing}"; exit 2 ;;
esac
wait
cd "$OUT" && tar -cJf /tmp/outputs.tar.xz . && rm -rf ./* && mv /tmp/outputs.tar.xz .  # 8 files come back at most
