#!/usr/bin/env bash
# Nsight Compute on one variant at one shape: DRAM throughput, achieved occupancy, warp stall
# reasons, executed instructions, for the second of the variant's runs in profile_point.py's profiled range (a
# warm-up call, the inputs' and the reference's kernels come before that range).
#   bash scripts/profile.sh VARIANT MxN DTYPE [kernel-name regex, default [Ss]oftmax|cluster_rows: the lab's kernels
#   (cluster_rows_kernel, which cross-entropy shares, names no softmax), QuACK's (its CuTe DSL name holds "Softmax")
#   and Liger's]
# VARIANT may be cluster:SHAPE:CLUSTER:p|n, one launch configuration of cuda.cluster outside its plan
# (scripts/profile_point.py), e.g. cluster:20:16:n for 256 x 64 packed, 16 CTAs, one cluster per row.
# Clocks are left as they are (--clock-control none), so the numbers are those of a timed run.
# PROFILE_REPORT=PREFIX: the full set instead (every section, source counters and warp-state sampling per
# SASS instruction), saved as PREFIX.ncu-rep, with PREFIX.source.csv (the source page: per instruction,
# executed count and stall samples by reason) and PREFIX.details.txt (every section, unfiltered). On the
# device tool, write them outside $OUT and pack the text files into one archive there (it returns 8 files).
# PROFILE_CACHE=none: the L2 a timed call meets instead of ncu's flushed one. The point runs as the lab's timing
# loop does (profile_point.py --flush-mb 256: the L2 reset, then a 256 MB write before every call), ncu leaves the
# caches alone (--cache-control none) and replays the whole process for each pass (--replay-mode application), so
# that every pass meets that L2 too; it reports the duration and the DRAM and L2 traffic of the flushed calls 2 to 5
# (profile_point.py compiles and resets before the profiled range, cudaProfilerStart, so that ncu counts only them).
# PROFILE_CACHE=all: the same calls and metrics with ncu's own cache control (flushed and invalidated before each),
# to set beside them. PROFILE_METRICS=a,b adds metrics to the list. PROFILE_OP=NAME: a variant of that operator
# (profile_point.py --op), e.g. PROFILE_OP=softmax_backward bash scripts/profile.sh peer.quack 4096x512 bfloat16.
set -uo pipefail
cd "$(dirname "$0")/.."
variant=$1 shape=$2 dtype=$3 kernel=${4:-[Ss]oftmax|cluster_rows}
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
# ncu on the kernel's launches after the first (LAUNCHES of them, default 1), with the given sections, set or
# options, around profile_point.py and its POINT_ARGS.
ncu_point() {
  # shellcheck disable=SC2086  # POINT_ARGS: words for profile_point.py
  PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} "$NCU" --clock-control none --profile-from-start off \
    -k "regex:$kernel" --launch-skip 1 --launch-count "${LAUNCHES:-1}" "$@" \
    "${PYTHON:-python3}" scripts/profile_point.py "$variant" "$shape" "$dtype" --op "${PROFILE_OP:-softmax}" \
    ${POINT_ARGS:-} 2>&1
}
if [ -n "${PROFILE_CACHE:-}" ]; then
  [ "$PROFILE_CACHE" = none ] || [ "$PROFILE_CACHE" = all ] || { echo "PROFILE_CACHE is none or all" >&2; exit 2; }
  LAUNCHES=4 POINT_ARGS="--runs 6 --flush-mb 256" ncu_point --cache-control "$PROFILE_CACHE" \
    --replay-mode application \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sectors_op_read_lookup_hit.sum,lts__t_sectors_op_read_lookup_miss.sum${PROFILE_METRICS:+,$PROFILE_METRICS} |
    grep -vE "^==PROF==|^\s*$|----" | sed -E 's/ {2,}/  /g' | cut -c1-220
  exit "${PIPESTATUS[0]}"
fi
if [ -n "${PROFILE_REPORT:-}" ]; then
  ncu_point --set full --import-source yes -f -o "$PROFILE_REPORT" | grep -v "^==PROF=="
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
  "$NCU" --import "$PROFILE_REPORT.ncu-rep" --page details --print-details all >"$PROFILE_REPORT.details.txt" 2>&1
  "$NCU" --import "$PROFILE_REPORT.ncu-rep" --page source --csv --print-source sass >"$PROFILE_REPORT.source.csv" 2>&1
  grep -E "Duration|DRAM Throughput|Executed Instructions|Achieved Occupancy|Registers Per" "$PROFILE_REPORT.details.txt"
  exit 0
fi
ncu_point --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
  --section MemoryWorkloadAnalysis --section InstructionStats \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" |
  grep -vE "^==PROF==|^\s*$|----" |
  grep -E "\([0-9]+, [0-9]+, [0-9]+\)x\(|DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Waves Per SM|Grid Size|Block Size|Stall|stalled|Executed Instructions|cycles being stalled|L2 Hit|Mem Busy|Max Bandwidth|Warp Cycles Per Issued|Issued Warp|Shared Memory|Cluster" |
  sed -E 's/ {2,}/  /g' | cut -c1-220
