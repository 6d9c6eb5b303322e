#!/usr/bin/env bash
# Nsight Compute on the backward at bfloat16 4096 x 128 (lab.auto, which runs cuda.register_cached there, and QuACK),
# with the L2 a timed call meets (PROFILE_CACHE=none: calls 2 to 5) and the default sections, on a machine where the
# peers are installed and the build unpacked (the peers sequence of scripts/remote/device_call.sh).
# Run from the repository root: bash notebook/backward-register-cached-shapes/profile_4096x128.sh
set -uo pipefail
source scripts/remote/device_call.sh
begin_peers_call >/dev/null
echo "commit=${LAB_COMMIT:-unknown}" >"$OUT/commit.txt"
for variant in lab.auto peer.quack; do
  echo "== $variant 4096x128 bfloat16 (the timed loop's L2)"
  PROFILE_CACHE=none PROFILE_OP=softmax_backward timeout 120 bash scripts/profile.sh $variant 4096x128 bfloat16
  echo "== $variant 4096x128 bfloat16 (sections)"
  PROFILE_OP=softmax_backward timeout 120 bash scripts/profile.sh $variant 4096x128 bfloat16
done >"$OUT/profile.txt" 2>&1
