"""Runs every CUDA variant on a few small shapes (tails, odd N, strided rows, several block sizes)
so that compute-sanitizer can watch them: see scripts/sanitize.sh."""

import sys

import torch

from lab.backends.cuda_variants import AUTO, AUTO_OP, CUDA_VARIANTS, load_extension
from lab.inputs import Shape, make_input

load_extension()  # imports lab._C (after torch, whose libraries it links), registers torch.ops.lab.*
if not torch.cuda.is_available():
    sys.exit("sanitize_driver: lab._C loaded, but there is no CUDA GPU to run the kernels on")

# Tails, odd N, strided and misaligned rows, and every launch shape: sub-warp, warp and block groups
# of register_cached, 32 to 512 threads per block of the others, and cluster's paths: one CTA and
# clusters of 2 to 16 (resident, staged and direct), the streaming path (past 524288, misaligned rows).
SHAPES = [Shape(3, 1), Shape(5, 33), Shape(7, 100, 133), Shape(3, 700), Shape(4, 1025), Shape(3, 3000, 3007),
          Shape(2, 8191), Shape(2, 16384), Shape(2, 65537, 65600), Shape(3, 12001), Shape(2, 40000),
          Shape(2, 100003), Shape(2, 200000), Shape(2, 262147), Shape(1, 600001)]

for name, variant in [*CUDA_VARIANTS.items(), (AUTO_OP, AUTO)]:
    op = getattr(torch.ops.lab, name)
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        # Its limits (row length, per-shape reasons) may depend on the dtype: filter per dtype.
        for shape in (s for s in SHAPES if variant.skip_reason(s, dtype) is None):
            x = make_input(shape, dtype, "cuda")
            y = op(x)
            torch.cuda.synchronize()
            assert torch.allclose(y.float().sum(-1), torch.ones(shape.m, device="cuda"), atol=1e-2), (name, shape)
            ran += 1
    print(f"{name}: ran {ran} shape and dtype cases", flush=True)
