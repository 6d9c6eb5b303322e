#!/usr/bin/env bash
# Everything the GPU machine does, in modes that each fit one device call (10 minutes):
#   bash scripts/remote/gpu.sh quick    build, the quick sweep, then the checks below
#   bash scripts/remote/gpu.sh lab [ARGS]  build, then the full lab: both sweeps, float32 and bfloat16 (ARGS go to
#                                 python -m lab.test, e.g. --op vector_add: results in $OUT/results/vector_add)
#   bash scripts/remote/gpu.sh tests    build, the resource report and the test modules that run kernels on the
#                                 GPU (the CPU-only ones, the CLI runs and the CUDA compile checks are CI's)
#   bash scripts/remote/gpu.sh sanitize build, compute-sanitizer memcheck, racecheck, synccheck, initcheck
#   bash scripts/remote/gpu.sh checks   tests, then sanitize
#   bash scripts/remote/gpu.sh full     lab, then checks
#   bash scripts/remote/gpu.sh fuzz [ARGS]  build, then the randomized testing alone (python -m lab.fuzz --cases
#                                 10000 --max-elements 4194304 ARGS): $OUT/fuzz.json, fuzz.txt (6 to 9 min
#                                 on the H200 for every variant; the JSON is rewritten every 500 cases)
#   bash scripts/remote/gpu.sh trust [ARGS]  build, then scripts/trust.py: randomized testing, large tensors, the
#                                 four sanitizers, citizenship, bad input: $OUT/results/trust.md, trust.json.
#                                 It does not fit one 10-minute call: run `fuzz` (split with --cases 5000
#                                 and --start 5000 if it must be), commit the JSONs, then `trust --fuzz-json
#                                 <committed JSONs> --skip-sanitizers`, then `sanitize`; merge its checks.txt
#                                 header and tool lines here with `python scripts/trust.py --refuzz --fuzz-json
#                                 <JSONs> --sanitizer-summary <file>` (notebook/trust-on-h200/README.md).
#   PROFILE="peer.quack 256x262144 bfloat16;cuda.cluster 256x262144 bfloat16" bash scripts/remote/gpu.sh profile
#                                 build, then Nsight Compute on each point (profile.txt; the default PROFILE
#                                 is below; a peer needs the peers installed)
#   bash scripts/remote/gpu.sh remeasure [RESULTS]  build, then the near ties of a lab run (RESULTS, default
#                                 results/h200/softmax/results.json: commit a run's results first) timed three times,
#                                 the command scripts/targets.py --near-ties prints: $OUT/run_{1,2,3}.json
#                                 and .txt (about 30 s a run; with the peers installed, as the run had them)
#   bash scripts/remote/gpu.sh tune     build, the GPU tests of cuda.cluster, every launch shape of
#                                 cuda.cluster timed (tune.json, tune.txt), and Nsight Compute
#                                 profiles of the points named in PROFILE (profile.txt); TUNE_ARGS are
#                                 passed to scripts/tune/tune_cluster.py (e.g. "--dtype bfloat16 --shapes
#                                 packed": only the packed 16-bit shapes, beside the plan's choice; "--min-n 8192
#                                 --grid one-per-row": the launches the plans use from N = 8192 up, in half the time)
# LAB_COMMIT=<hash> records the commit where the checkout's .git is not the code's (see lab/env.py).
# CARRIED_SO=<file.xz> skips build.sh (about 90 s on a fresh machine): lab/_C.abi3.so built here from the same
# csrc, `xz -c lab/_C.abi3.so >.labso/cur.so.xz`, carried (the device tool's carry) and unpacked in its place;
# CARRIED_SO=here: the one an earlier call on the same warm machine unpacked (ignored files stay between calls).
# Outputs go to $OUT (the device tool's folder) or build/remote: the lab's results folder $OUT/results,
# the lab's log lab.txt, checks.txt (build, tests, sanitizer summary) and sanitizer.log (the full
# output of the tools run, TOOLS); $OUT/results is packed as results.tgz (the device tool returns 8 files at most).
# Unpack them and copy each folder to results/<gpu>/ (results/<gpu>/<operator>/, results/<gpu>/trust/).
set -uo pipefail
cd "$(dirname "$0")/../.."
MODE=${1:-quick}
shift || true
OUT=${OUT:-build/remote}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHON=${PYTHON:-python3} PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # scripts/ import lab
log="$OUT/checks.txt"
status=0

build() {
  { echo "== $(date -u) mode=$MODE commit=${LAB_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}"
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu --format=csv
    if [ "${CARRIED_SO:-}" = here ] && ls lab/_C*.so >/dev/null 2>&1; then  # unpacked by an earlier call
      echo "build.sh skipped: lab/_C.abi3.so is here already (CARRIED_SO=here)"
    elif [ -n "${CARRIED_SO:-}" ]; then  # a lab/_C.abi3.so built elsewhere from the same csrc, xz-compressed
      xz -dc "$CARRIED_SO" >lab/_C.abi3.so.tmp && mv lab/_C.abi3.so.tmp lab/_C.abi3.so &&
        echo "build.sh skipped: lab/_C.abi3.so unpacked from $CARRIED_SO"
    else
      bash build.sh
    fi; } 2>&1 | tee -a "$log"  # pipefail: a failed build fails build()
}

# The lab itself; its per-point progress lines stay in lab.txt, the tables are printed.
lab() {
  $PYTHON -m lab.test "$@" --out "$OUT/results" 2>&1 | tee "$OUT/lab.txt" | grep -vE "^\[[0-9]+/" | tail -80
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

GPU_TESTS="tests/test_gpu.py tests/test_autograd.py tests/test_operators.py tests/test_properties.py tests/test_api.py
  tests/test_peers.py tests/test_fuzz.py tests/test_dispatch.py tests/test_triton_interpreter.py tests/test_interleave.py tests/test_bench.py tests/test_profile_point.py
  tests/test_stagger.py tests/test_time_point.py tests/test_tune_cluster.py tests/test_readme.py tests/test_cross_entropy.py
  tests/test_tune_cross_entropy_cluster.py tests/test_linear_cross_entropy.py"

tests() {
  { rc=0
    echo "== resources"; $PYTHON -m lab.test --resources | tail -1
    echo "== pytest (GPU)"
    # shellcheck disable=SC2086
    $PYTHON -m pytest -q -p no:cacheprovider -rfE --tb=short --durations=5 -k "not test_cli_runs" $GPU_TESTS || rc=1
    exit $rc
  } 2>&1 | tee -a "$log" | grep -vE "^[.sFE]*( *\[ *[0-9]+%\])?$"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

sanitize() {
  { rc=0
    rm -rf build/sanitizer  # an earlier call's logs (a warm machine keeps them) are not this run's
    echo "== compute-sanitizer"; bash scripts/sanitize.sh build/sanitizer || rc=1
    # shellcheck disable=SC2012,SC2046  # the logs sanitize.sh wrote (the tools TOOLS named), in the order they ran
    cat $(ls -tr build/sanitizer/*.log) >"$OUT/sanitizer.log"
    exit $rc
  } 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
}

# "variant MxN dtype" triples separated by ';'
PROFILE=${PROFILE-"cuda.register_cached 131072x512 bfloat16;cuda.register_cached 16384x4096 bfloat16;cuda.register_cached 4096x16384 bfloat16;cuda.register_cached 2097152x32 bfloat16;cuda.register_cached 131072x512 float32"}

tune() {
  { rc=0
    echo "== pytest (cuda.cluster)"; $PYTHON -m pytest -q -p no:cacheprovider -x tests/test_gpu.py -k "${TESTS:-cluster or register_cached}" || rc=1
    # shellcheck disable=SC2086
    echo "== tune_cluster"; $PYTHON scripts/tune/tune_cluster.py ${TUNE_ARGS:-} --json "$OUT/tune.json" || rc=1
    exit $rc
  } 2>&1 | tee "$OUT/tune.txt" | grep -vE "^[.sFE]*( *\[ *[0-9]+%\])?$"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  profile
}

# Nsight Compute on each point of PROFILE (a peer's too, with the peers installed): profile.txt.
profile() {
  IFS=';' read -ra points <<<"$PROFILE"  # PROFILE="" profiles nothing
  for pt in "${points[@]}"; do
    echo "== ncu $pt"; bash scripts/profile.sh $pt
  done 2>&1 | tee "$OUT/profile.txt"
}

# The near ties of a committed lab run, timed again three times (scripts/targets.py --remeasure decides them).
remeasure() {
  local results=${1:-results/h200/softmax/results.json} cmd
  cmd=$($PYTHON scripts/targets.py "$results" --near-ties) || { status=1; return; }
  if [ -z "$cmd" ]; then echo "no near ties in $results"; return; fi
  for i in 1 2 3; do
    # shellcheck disable=SC2086
    ${cmd/run_<i>.json/$OUT/run_$i.json} >"$OUT/run_$i.txt" 2>&1 || status=1
    echo "== remeasure run $i: $(tail -1 "$OUT/run_$i.txt")"
  done
}

build || exit 1
case "$MODE" in
  quick) lab --quick; tests; sanitize ;;
  lab) lab "$@" ;;
  tests) tests ;;
  sanitize) sanitize ;;
  checks) tests; sanitize ;;
  full) lab; tests; sanitize ;;
  tune) tune ;;
  remeasure) remeasure "$@" ;;
  profile) profile ;;
  fuzz) $PYTHON -m lab.fuzz --cases 10000 --max-elements 4194304 --json "$OUT/fuzz.json" "$@" 2>&1 |
          grep --line-buffered -v "^W1" | tee "$OUT/fuzz.txt" | tail -40
        [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
  trust) $PYTHON scripts/trust.py --out "$OUT/results" "$@" 2>&1 | tee "$OUT/trust.txt" | tail -60
         [ "${PIPESTATUS[0]}" -eq 0 ] || status=1 ;;
  *) echo "usage: bash scripts/remote/gpu.sh quick|lab|tests|sanitize|checks|full|tune|remeasure|profile|fuzz|trust"; exit 2 ;;
esac
# The device tool returns 8 files at most: the results folder travels as one archive.
[ -d "$OUT/results" ] && tar czf "$OUT/results.tgz" -C "$OUT" results && rm -rf "$OUT/results"
echo "== done $(date -u), status $status" | tee -a "$log"
exit $status
