#!/usr/bin/env bash
# The last of the chain's calls on one warm H200 (profile_call.sh; a call keeping .peersA's part; then
# retune_ca_dc0b5d3/lab_call.sh carrying .peers2, the lab run): the near ties of that run re-measured three times
# (retune_ca_dc0b5d3/remeasure_call.sh), then time_call.sh's timings with the peers that call installed.
# Pass the run's LAB_COMMIT.
set -uo pipefail
bash results/h200/experiments/retune_ca_dc0b5d3/remeasure_call.sh; rc=$?
bash results/h200/experiments/cta256_packed/time_call.sh || rc=1
exit $rc
