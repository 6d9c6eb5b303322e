#!/usr/bin/env bash
# The linear cross-entropy's device calls, one step a call (run from the repository root on the GPU machine, the
# build carried as in device_call.sh; $OUT the device tool's folder):
#   bash scripts/remote/heads.sh tests   the GPU tests of lab.linear_cross_entropy and lab.cross_entropy, the
#                                        README's example, both head operators' suites in three dtypes, then the
#                                        randomized testing of both without the peers (fuzz_*.json)
#   bash scripts/remote/heads.sh fuzz    the head operators' suites in three dtypes and the randomized testing alone
#   bash scripts/remote/heads.sh lab     the lab run of linear_cross_entropy in bfloat16 with the peers installed
#                                        (interrupted at 550 s, it saves what it has): results.tgz
#   bash scripts/remote/heads.sh loss    the same of linear_cross_entropy_loss, then the peers' randomized testing
#   bash scripts/remote/heads.sh trust   trust's lab.linear_cross_entropy section and the four sanitizers over its
#                                        chunks (trust/; the logs in build/san), then the fuzz cases named in
#                                        HEAD_CASES again
# Each writes its log to $OUT/<step>.txt; LAB_COMMIT names the commit (lab/env.py).
# QuACK's chunked head imports with quack-kernels 0.6.4 and nvidia-cutlass-dsl 4.6.2 (0.6.5's does not with the
# DSL 4.7 or 4.8): stage those versions for the lab and loss steps.
set -uo pipefail
cd "$(dirname "$0")/../.."
STEP=${1:?tests, fuzz, lab, loss or trust}
# shellcheck source=scripts/remote/device_call.sh
source scripts/remote/device_call.sh

fuzz() {  # OP CASES ONLY SECONDS NAME: randomized cases of small heads; $OUT/fuzz_OP_NAME.json if done in SECONDS
  timeout -s INT "$4" python -m lab.fuzz --op "$1" --cases "$2" --only "$3" --max-elements 2000000 \
    --json "$OUT/fuzz_$1_$5.json" 2>&1 | tail -6
}

lab_run() {  # OP SECONDS LOG: the lab run of OP in bfloat16, interrupted at SECONDS (it saves what it has), packed
  timeout -s INT "$2" python -m lab.test --op "$1" -d bfloat16 --out "$OUT/res" 2>&1 | grep -vE "^\[[0-9]+/" \
    > "$OUT/$3.txt"
  tail -40 "$OUT/$3.txt"
  tar -czf "$OUT/results.tgz" -C "$OUT/res" .
}

case "$STEP" in
  tests|fuzz)
    begin_call
    { if [ "$STEP" = tests ]; then
        timeout 240 python -m pytest -q -m gpu tests/test_linear_cross_entropy.py tests/test_cross_entropy.py \
          tests/test_readme.py 2>&1 | tail -4
      fi
      timeout 120 python -m pytest -q -m gpu tests/test_operators.py -k linear_cross_entropy 2>&1 | tail -3
      fuzz linear_cross_entropy 250 'lab.*,torch.*,triton.*' 90 lab
      fuzz linear_cross_entropy_loss 200 'lab.*,torch.*' 60 lab
    } 2>&1 | tee "$OUT/$STEP.txt"
    ;;
  lab)
    begin_peers_call
    lab_run linear_cross_entropy 550 lab
    ;;
  loss)
    begin_peers_call
    lab_run linear_cross_entropy_loss 330 loss
    { fuzz linear_cross_entropy 30 'peer.*' 120 peers
      fuzz linear_cross_entropy_loss 80 'peer.*' 70 peers
    } 2>&1 | tee "$OUT/fuzz_peers.txt"
    ;;
  trust)
    begin_call
    { timeout 200 python scripts/trust.py --out "$OUT/trust" --sections linear_cross_entropy_entry 2>&1 | tail -4
      timeout 240 bash scripts/sanitize.sh build/san --op linear_cross_entropy 2>&1
      for c in ${HEAD_CASES:-}; do
        timeout 90 python -m lab.fuzz --op linear_cross_entropy --case "$c" --only 'lab.auto,torch.eager' \
          --max-elements 2000000 2>&1 | grep -E "MISMATCH|lab.auto |torch.eager "
      done
    } 2>&1 | tee "$OUT/trust.txt"
    ;;
  *) echo "unknown step $STEP (tests, fuzz, lab, loss or trust)"; exit 2 ;;
esac
