"""fused: one row per program, the Triton tutorial's softmax.

Algorithm: each program loads one whole row into registers (block = next power of two of N, lanes past N
masked to -inf), reduces max and sum in float32, and writes the row once.
HBM sweeps: read x once, write y once.
Launch: a grid of M programs; num_warps by the block (num_warps_for: more warps for wider rows).
Limits: the row must fit in one program's registers; past N = 65536 the compiled kernel spills or fails to
compile, so the wrapper refuses it.
"""

import torch
import triton
import triton.language as tl

from triton_kernels.autograd import differentiable
from triton_kernels.common import fast_exp, next_power_of_2, num_warps_for, prepare

MAX_N = 65536


@triton.jit
def softmax_fused_kernel(x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64-bit: row * stride passes 2^31 on large inputs
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    z = x - tl.max(x, axis=0)
    num = fast_exp(z)
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@differentiable
def softmax_fused(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = prepare(x, out, "triton.fused")
    rows, cols = x.shape
    if cols > MAX_N:
        raise ValueError(f"triton.fused: rows of {cols} elements exceed the {MAX_N} that fit in one program")
    if x.numel() == 0:
        return out
    block = next_power_of_2(cols)
    softmax_fused_kernel[(rows,)](
        x, out, x.stride(0), out.stride(0), cols, BLOCK=block, num_warps=num_warps_for(block)
    )
    return out
