#!/usr/bin/env bash
# exchange_repro.cu built and run on a GPU machine: each mode, cluster size and count of clusters, bare and under
# synccheck (TOOLS to change the tools), one process each; MODES, CLUSTERS (CTAs a cluster) and ROWS (clusters) pick
# others than all three modes on 2, 8 and 16 CTAs, 2, 16 and 64 clusters. Run from anywhere; builds into $OUT (or /tmp).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${OUT:-/tmp}/exchange_repro
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$NVCC" -O3 -arch=sm_90 -o "$bin" "$here/exchange_repro.cu" || exit 1
for mode in ${MODES:-0 1 2}; do
  for c in ${CLUSTERS:-2 8 16}; do
    for rows in ${ROWS:-2 16 64}; do
      echo "bare: $("$bin" $mode $c $rows 2>&1)"
      for tool in ${TOOLS:-synccheck}; do
        out=$("$SAN" --tool "$tool" --error-exitcode 9 "$bin" $mode $c $rows 2>&1)
        echo "  $tool (exit $?): $(grep -m1 '^mode' <<<"$out") | $(grep -m1 -E 'ERROR SUMMARY|RACECHECK SUMMARY' <<<"$out")"
      done
    done
  done
done
rm -f "$bin"
