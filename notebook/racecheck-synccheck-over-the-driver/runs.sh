#!/usr/bin/env bash
# The device calls of this folder's runs (H200; the build carried as .labso/cur.so.xz), as one script: parts 1 to 3
# ran as one call each, the tools side by side on the one GPU, each stopped by SIGINT at its limit; parts 4 and 5
# side by side in one call on a machine of four GPUs (GPUS="2 3" for 4, CUDA_VISIBLE_DEVICES=1 for 5).
# Usage, from the repository root on the GPU machine: bash notebook/racecheck-synccheck-over-the-driver/runs.sh 1|2|3|4|5
# (4: softmax's register_cached tuning shapes, in PARTS parts a tool side by side; 5: racecheck over the whole driver
# but the tuning shapes, alone, to its end, so that cublas_only judges its log). GPUS="1 2" deals the processes over
# those GPUs (CUDA_VISIBLE_DEVICES), in turn; unset, they share the one the call sees.
set -uo pipefail
source scripts/remote/device_call.sh
begin_call >/dev/null
read -ra gpus <<<"${GPUS:-}"
# r TOOL NAME LIMIT DRIVER-ARGS...: scripts/sanitize.sh under TOOL, its output in $OUT/NAME.txt, logs in $OUT/NAME/;
# on GPUS' K-th GPU (mod their number) where RUN_K=K is given, else on the call's
r() {
  local dev=() where="the call's GPU"
  if [ "${#gpus[@]}" -gt 0 ] && [ -n "${RUN_K:-}" ]; then
    where=${gpus[$((RUN_K % ${#gpus[@]}))]}
    dev=(env "CUDA_VISIBLE_DEVICES=$where")
  fi
  echo "$2: $where" >>"$OUT/gpus.txt"
  TOOLS=$1 "${dev[@]}" timeout -s INT "$3" bash scripts/sanitize.sh "$OUT/$2" "${@:4}" >"$OUT/$2.txt" 2>&1
  echo "exit $?" >>"$OUT/$2.txt"
}
case "${1:?1, 2, 3, 4 or 5}" in
  1)  # the whole driver
    r racecheck r 570 & r synccheck s 570 & wait ;;
  2)  # what call 1's racecheck did not reach, but the tuning shapes (rc, then rt: both ended well within the 600 s
      # they could take together); the tuning shapes
    ( r racecheck rc 300 --op softmax --variant cuda.cluster; r racecheck rt 300 --op softmax --variant cuda.tiled_rows ) &
    r racecheck rtune 300 --tuning-shapes-only & r synccheck stune 300 --tuning-shapes-only & wait ;;
  3)  # the tuning shapes in parts: softmax_backward's, and softmax's cluster shapes (every label of cluster_shapes())
    labels=$(python -c "from lab.backends.cuda_variants import cluster_shapes
print(' '.join('--tuning-label ' + c.label() for c in cluster_shapes()))")
    # shellcheck disable=SC2086
    { r racecheck rb 300 --op softmax_backward --tuning-shapes-only & r synccheck sb 300 --op softmax_backward --tuning-shapes-only &
      r racecheck rcl 300 --op softmax --tuning-shapes-only $labels & r synccheck scl 300 --op softmax --tuning-shapes-only $labels &
      wait; } ;;
  4)  # softmax's register_cached tuning shapes, their labels dealt into PARTS parts (default 6), each part under
    # both tools, side by side (2 CPU threads a process: the checks run on the CPU in float64); every part's labels
    # are listed before any starts, so that all start together
    mapfile -t parts < <(python -c "import torch
from lab.backends.cuda_variants import register_cached_shapes
labels = sorted({s.label() for d in (torch.float32, torch.bfloat16, torch.float16) for s in register_cached_shapes(d)})
for g in range(${PARTS:-6}):
    print(' '.join('--tuning-label ' + x for x in labels[g::${PARTS:-6}]))")
    for g in "${!parts[@]}"; do
      # shellcheck disable=SC2086
      RUN_K=$g OMP_NUM_THREADS=2 r racecheck "rrc$g" 540 --op softmax --tuning-shapes-only ${parts[$g]} &
      # shellcheck disable=SC2086
      RUN_K=$((g + 1)) OMP_NUM_THREADS=2 r synccheck "src$g" 540 --op softmax --tuning-shapes-only ${parts[$g]} &
    done
    wait ;;
  5)  # racecheck over every section but the tuning shapes (parts 2 to 4 ran those), to the driver's end
    r racecheck rwhole 560 --no-tuning-shapes ;;
  *) echo "runs.sh: 1, 2, 3, 4 or 5, not $1"; exit 2 ;;
esac
# The device tool brings back 8 files at most: every output in one archive.
cd "$OUT" && tar -cJf sanitizers.tar.xz --remove-files ./*.txt ./*/
