#!/usr/bin/env bash
# Re-tune of cuda.cluster's plans on the H200 after every cp.async became .ca (2fb4b99): every
# one-cluster-per-row launch at the sweeps' rows from N = 8192 up, each dtype its own JSON.
# lab/_C.abi3.so built here (csrc as at dc0b5d3, then 8609a26, then 5adc8c2: rebuild it after any csrc change)
# travels xz-compressed in .labso/cur.so.xz (carried), in place of build.sh (a carried build stamp did not match
# there: build.sh rebuilt for 83 s).
# DTYPES picks the dtypes (default: bfloat16 float32); SHAPES="--shape MxN ..." only those shapes.
set -uo pipefail
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee $OUT/gpu.txt
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
# The first half of the peers' compiler library, where carried (.peersA), whatever the card: the next call
# (lab_call.sh on an H200) brings the second.
[ -f .peersA/irpart.aa ] && mkdir -p /tmp/peers && cp .peersA/irpart.aa /tmp/peers/
# The build, whatever the card (lab_call.sh's CARRIED_SO=here finds it on the same warm machine).
{ [ -f .labso/cur.so.xz ] && xz -dc .labso/cur.so.xz > lab/_C.abi3.so; } || bash build.sh | tail -1
if [ "${ANY_GPU:-}" != 1 ] && ! grep -q H200 $OUT/gpu.txt; then
  # Not an H200: stop, after (with MEMCHECK=1) the check of bd54c2a (row blocks) where it ran out of memory on an
  # 80 GB H100 (float32 4096x262144, the float64 check of tune_cluster.py).
  [ "${MEMCHECK:-}" = 1 ] || { echo "not an H200: stopping"; exit 3; }
  python - <<'PY' 2>&1 | tee $OUT/check_memory.txt
import torch
from lab import check, inputs, registry
from lab.operators.softmax import SOFTMAX
x = inputs.make_input(inputs.Shape(4096, 262144), torch.float32, "cuda")
ref = SOFTMAX.reference(x)
for name in ("cuda.cluster", "lab.auto"):
    v = registry.get("softmax", name)
    torch.cuda.reset_peak_memory_stats()
    res = check.check(v.kernel(), x, v.writes_out, ref)
    print(name, res.summary(), f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB of",
          f"{torch.cuda.get_device_properties(0).total_memory / 2**30:.1f}")
PY
  echo "not an H200: stopping"; exit 3
fi
for dt in ${DTYPES:-bfloat16 float32}; do
  echo "== $dt $(date -u +%T)"
  python scripts/tune_cluster.py --dtype $dt --min-n 8192 --grid one-per-row ${SHAPES:-} --json $OUT/tune_$dt.json 2>&1 |
    grep -v "^\[" | tee $OUT/tune_$dt.txt
done
echo "== done $(date -u +%T)"
