#!/usr/bin/env bash
# The last of the chain's calls (after retune_ca_dc0b5d3/lab_call.sh on the same warm H200): the near ties of the
# lab run re-measured three times (retune_ca_dc0b5d3/remeasure_call.sh), then lab.auto beside QuACK at the shapes
# off the sweeps again (scan_call.sh), the peers as the lab call installed them.
set -uo pipefail
bash results/h200/experiments/retune_ca_dc0b5d3/remeasure_call.sh; rc=$?
SHAPES="4096x160 4096x1536 4096x3072 4096x6144 4096x12288 4096x20480 4096x24576 4096x40960 2048x98304 1024x151936
  512x196608 64x524288 1x1048576" bash results/h200/experiments/offsweep_scan/scan_call.sh
exit $rc
