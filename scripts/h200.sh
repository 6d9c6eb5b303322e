#!/usr/bin/env bash
# Everything the GPU machine does in one call: build, then
#   bash scripts/h200.sh quick   GPU tests + sanitizer + the quick sweep
#   bash scripts/h200.sh full    the full lab (both sweeps, float32 and bfloat16) first, then the
#                                GPU tests and the sanitizer
# Outputs go to $OUT (the device tool's folder) or build/h200: the lab's results folder in
# $OUT/h200 (to copy to results/h200), and logs (lab.txt, checks.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-quick}
OUT=${OUT:-build/h200}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHON=${PYTHON:-python3}
log="$OUT/checks.txt"
{
  echo "== $(date -u) mode=$MODE commit=$(git rev-parse --short HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu --format=csv
  bash build.sh || exit 1
} 2>&1 | tee "$log"
checks() {
  { $PYTHON -m lab.test --resources | tail -1
    $PYTHON -m pytest -q -rfEs --durations=5 "$@"
    bash scripts/sanitize.sh build/sanitizer; } 2>&1 | tee -a "$log" | grep -vE "^\.*( *\[ *[0-9]+%\])?$"
}
case "$MODE" in
  quick)
    checks
    $PYTHON -m lab.test --quick --out "$OUT/h200" 2>&1 | tee "$OUT/lab.txt" | tail -40
    ;;
  full)
    $PYTHON -m lab.test --out "$OUT/h200" 2>&1 | tee "$OUT/lab.txt" | grep -vE "^\[[0-9]+/" | tail -70
    checks -m gpu
    ;;
  *) echo "usage: bash scripts/h200.sh quick|full"; exit 2 ;;
esac
echo "== done $(date -u)" | tee -a "$log"
