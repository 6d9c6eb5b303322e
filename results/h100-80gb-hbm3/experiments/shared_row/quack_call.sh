#!/usr/bin/env bash
# The shared row beside QuACK on whatever card came, in one process: the call after
# results/h200/experiments/retune_ca_dc0b5d3/call.sh (which unpacked the build of 8609a26's csrc and left the
# first half of the peers' compiler library in /tmp/peers) and a call that copied the second half there (.peersB).
# Carries .peers2 (the wheels). Interleaved rounds of register_cached, lab.auto, QuACK and triton.multirow at the
# tutorial's small tensors, each checked against float64 first.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu_quack.txt
# The second half comes carried here (.peersB) or, where the tree with .peersB and .peers2 passes the carry's
# 64 MiB, from a call between (`mkdir -p /tmp/peers && cp .peersB/irpart.ab /tmp/peers/`, carrying .peersB alone).
[ -f .peersB/irpart.ab ] && cp .peersB/irpart.ab /tmp/peers/
cat /tmp/peers/irpart.aa /tmp/peers/irpart.ab | xz -dc >/tmp/peers/ir.so || exit 1
bash .peers2/install.sh >/dev/null || exit 1
export PYTHONPATH=$PWD:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
V=cuda.register_cached,lab.auto,peer.quack,triton.multirow
{ python scripts/interleave.py --variants $V --dtype bfloat16 --rounds 7 --shape 4096x2048 --shape 4000x2048 \
    --shape 4096x1536 --shape 4096x1024 --shape 4096x512
  python scripts/interleave.py --variants $V --dtype float16 --rounds 7 --shape 4096x2048
} 2>&1 | grep -v "^ *$" | tee $OUT/quack.txt
echo "== done $(date -u +%T)"
