#!/usr/bin/env bash
# The call after call.sh on the same machine of four GPUs, once the peers' two parts are kept (calls carrying .peersA,
# then .peersB, after the one that unpacked the build): the decode sweep with QuACK on GPU 0 (the command of
# results/h200/decode/softmax/results.json), and on GPUs 1 to 3 the randomized testing of the changed kernels
# (softmax's cuda.cluster, cuda.auto and lab.auto; cross-entropy's cuda.cluster, with the gradient and the loss alone).
# Run from the repository root, carrying .peers2: bash notebook/cluster-load-prologue/sweep.sh
set -uo pipefail
source scripts/remote/device_call.sh
begin_peers_call >/dev/null
fuzz() {  # fuzz GPU NAME ARGS...
  CUDA_VISIBLE_DEVICES=$1 timeout -s INT 300 python -m lab.fuzz --max-elements 4194304 --json "$OUT/$2.json" "${@:3}" \
    2>&1 | grep -v "^W1" >"$OUT/$2.txt"
}
fuzz 1 fuzz_softmax --op softmax --only cuda.cluster,cuda.auto,lab.auto --cases 4000 --start 60000 &
fuzz 2 fuzz_cross_entropy_loss --op cross_entropy_loss --only cuda.cluster --cases 3000 --start 60000 &
fuzz 3 fuzz_cross_entropy --op cross_entropy --only cuda.cluster --cases 3000 --start 60000 &
CUDA_VISIBLE_DEVICES=0 timeout -s INT 330 python -m lab.test -s decode -d bfloat16 -d float32 -d float16 \
  --only lab.auto,cuda.auto,cuda.cluster,cuda.grid_split,peer.quack,torch.softmax --out "$OUT/res" >"$OUT/decode.txt" 2>&1
echo "exit $?" >>"$OUT/decode.txt"
wait
cd "$OUT" && tar -cJf outputs.tar.xz --remove-files ./res ./*.txt ./*.json
