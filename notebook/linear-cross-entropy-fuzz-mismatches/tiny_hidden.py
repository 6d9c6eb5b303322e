"""Kind 4 of this folder's README: do the mismatches of tiny float16 hidden states (cases 70356 and 70521) come from
cuBLAS's reduced-precision reductions, which PyTorch allows by default for float16 matmuls
(torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction: split-K partial sums kept in float16)? Each case
through lab.fuzz twice, with them allowed (the default) and not, for torch.eager, triton.seed and lab.auto.

    python notebook/linear-cross-entropy-fuzz-mismatches/tiny_hidden.py 70356 70521
"""

import sys

import torch

from lab import fuzz

for index in sys.argv[1:]:
    for allowed in (True, False):
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = allowed
        print(f"== case {index}, float16 reduced-precision reductions allowed: {allowed}", flush=True)
        fuzz.main(["--case", index, "--op", "linear_cross_entropy", "--max-elements", "4194304",
                   "--only", "torch.eager,triton.seed,lab.auto"])
