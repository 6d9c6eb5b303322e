#!/usr/bin/env bash
# The second of the chain's calls (after route_tests.sh, the build unpacked there), carrying .peersB (its part copied
# to /tmp/peers for the lab call): the four sanitizers over cuda.cluster's, cuda.register_cached's and cuda.auto's
# whole variant path (scripts/sanitize_driver.py: the new entries' lengths among its shapes).
set -uo pipefail
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 || [ "${ANY_GPU:-}" = 1 ] ||
  { echo "not an H200: stopping"; exit 3; }
[ -f .peersB/irpart.ab ] && mkdir -p /tmp/peers && cp .peersB/irpart.ab /tmp/peers/
[ -f lab/_C.abi3.so ] || exit 1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
bash scripts/sanitize.sh build/sanitizer --op softmax --variant cuda.cluster --variant cuda.register_cached \
  --variant cuda.auto 2>&1 | tee $OUT/sanitize_route.txt
