#!/usr/bin/env bash
# The probes of this folder under one compute-sanitizer tool (TOOL, default synccheck), one process each, on the
# built lab._C: softmax's cluster kernel (the table's plan, and through the tuning op one cluster per row), the
# backward's and the cross-entropy's, on 16 rows (softmax's plan and the cross-entropy also on 2). Run from the
# repository root on a GPU machine.
set -uo pipefail
cd "$(dirname "$0")/../.."
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
sha256sum lab/_C*.so | cut -c1-16
while read -r args; do
  out=$(PYTHONPATH=$PWD "$SAN" --tool "${TOOL:-synccheck}" --error-exitcode 9 python \
    notebook/synccheck-on-16-cta-clusters/probe.py $args 2>&1)
  rc=$?
  echo "$args: exit $rc | $(grep -E 'largest error|^plan' <<<"$out" | tr '\n' ' ')| $(grep -m1 'ERROR SUMMARY' <<<"$out")" \
    "$(grep -m1 -oE 'illegal memory access[^=]*|Error: [^=]*' <<<"$out")"
done <<'CASES'
softmax float32 16 50260
softmax float32 2 50260
softmax_tuned float32 16 65536
softmax_tuned bfloat16 16 262144
backward float32 16 65536
backward bfloat16 16 262144
ce 16
ce 2
CASES
