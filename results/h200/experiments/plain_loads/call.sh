#!/usr/bin/env bash
# One device call on an H200: scripts/ab.sh ab (A: the checkout; B: register_cached's direct 16-byte loads as plain
# ld.global, LDG.E.128, where the const __restrict__ input compiles them to the read-only path, LDG.E.128.CONSTANT;
# the candidate kept here as candidate_vec.diff and candidate_register_cached.diff).
# Asked: triton.multirow's kernel (plain LDG.E.128) was 3% shorter than register_cached's in the same layout at
# bfloat16 4096x512 (results/h200/experiments/group_blocks/); is the read-only load path part of that?
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || [ "${ANY_GPU:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
bash scripts/ab.sh ab bash results/h200/experiments/plain_loads/measure.sh 2>&1 | tee $OUT/ab.txt
echo "== done $(date -u +%T)"
