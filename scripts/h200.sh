#!/usr/bin/env bash
# Everything the GPU machine does in one call: build, GPU tests, sanitizer, the lab itself.
#   bash scripts/h200.sh quick   build + pytest + sanitizer + the quick sweep
#   bash scripts/h200.sh full    build + the full lab (both sweeps, float32 and bfloat16)
# Outputs go to $OUT (the device tool's folder) or build/h200: logs, and lab.tgz holding the
# results folder, to be unpacked under results/.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-quick}
OUT=${OUT:-build/h200}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHON=${PYTHON:-python3}
stage=$(mktemp -d)
{
  echo "== $(date -u) mode=$MODE commit=$(git rev-parse --short HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu --format=csv
  bash build.sh || exit 1
} 2>&1 | tee "$OUT/build.txt"
case "$MODE" in
  quick)
    $PYTHON -m lab.test --resources 2>&1 | tail -3
    $PYTHON -m pytest -q -rfEs --durations=8 2>&1 | tee "$OUT/pytest.txt" | tail -40
    bash scripts/sanitize.sh "$stage/sanitizer" 2>&1 | tee "$OUT/sanitizer.txt"
    $PYTHON -m lab.test --quick --out "$stage/h200" 2>&1 | tee "$OUT/lab.txt" | tail -40
    ;;
  full)
    $PYTHON -m lab.test --out "$stage/h200" 2>&1 | tee "$OUT/lab.txt" | tail -60
    ;;
  *) echo "usage: bash scripts/h200.sh quick|full"; exit 2 ;;
esac
tar czf "$OUT/lab.tgz" -C "$stage" .
echo "== done $(date -u)"
