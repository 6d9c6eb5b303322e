#!/usr/bin/env bash
# The last of the chain's calls on one warm H200 (profile_call.sh; a call keeping .peersA's part; then
# retune_ca_dc0b5d3/lab_call.sh carrying .peers2, the lab run): the near ties of that run re-measured three times
# (retune_ca_dc0b5d3/remeasure_call.sh), then time_call.sh's timings with the peers that call installed.
# Pass the run's LAB_COMMIT. The two steps write 12 files, and a call brings back 8: they are packed into
# $OUT/after.tgz (remeasure/: checks.txt, run_{1,2,3}.json and .txt; timings/: gpu.txt, build.txt, cluster.txt,
# auto.txt, untimed_entries.txt).
set -uo pipefail
real_out=$OUT
rm -rf /tmp/after && mkdir -p /tmp/after/remeasure /tmp/after/timings  # nothing left from an earlier call
OUT=/tmp/after/remeasure bash results/h200/experiments/retune_ca_dc0b5d3/remeasure_call.sh; rc=$?
OUT=/tmp/after/timings bash results/h200/experiments/cta256_packed/time_call.sh || rc=1
tar czf "$real_out/after.tgz" -C /tmp/after remeasure timings || rc=1
exit $rc
