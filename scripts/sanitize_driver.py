"""Runs every CUDA variant on a few small shapes (tails, odd N, strided rows, several block sizes)
so that compute-sanitizer can watch them: see scripts/sanitize.sh."""

import lab._C  # noqa: F401  registers torch.ops.lab.*
import torch

from lab.backends.cuda_variants import CUDA_VARIANTS
from lab.inputs import Shape, make_input

SHAPES = [Shape(3, 1), Shape(5, 33), Shape(4, 1025), Shape(3, 3000, 3007), Shape(2, 8191), Shape(2, 65537, 65600)]

for name in CUDA_VARIANTS:
    op = getattr(torch.ops.lab, name)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for shape in SHAPES:
            x = make_input(shape, dtype, "cuda")
            y = op(x)
            torch.cuda.synchronize()
            assert torch.allclose(y.float().sum(-1), torch.ones(shape.m, device="cuda"), atol=1e-2), (name, shape)
    print(f"{name}: ran {len(SHAPES)} shapes x 3 dtypes", flush=True)
