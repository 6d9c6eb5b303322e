"""vector_add: c = a + b, the Triton tutorial's first kernel.

Algorithm: each program adds one BLOCK of elements (masked past N).
HBM sweeps: read a and b once, write c once, 3*N*itemsize bytes.
Launch: cdiv(N, BLOCK) programs of 4 warps.
Limits: 64-bit offsets (N can pass 2^31). Any N >= 1, 1-D tensors whose elements are contiguous
(views that start anywhere); the sum is computed in float32 and rounded once to the dtype.
"""

import torch
import triton
import triton.language as tl

from triton_kernels.common import DTYPES, check_device

BLOCK = 1024  # elements per program, as in the tutorial; 4 warps, 8 elements (two 16-byte loads) per thread


@triton.jit
def vector_add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(a_ptr + offsets, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offsets, mask=mask).to(tl.float32)
    tl.store(c_ptr + offsets, (a + b).to(c_ptr.dtype.element_ty), mask=mask)


def vector_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    name = "triton.tutorial"
    for t, what in ((a, "a"), (b, "b")) + (((out, "out"),) if out is not None else ()):
        check_device(t, name, what)
        if t.dim() != 1:
            raise ValueError(f"{name}: {what} must be 1-D, got {t.dim()} dims")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}: expected float32, float16 or bfloat16, got {t.dtype} for {what}")
        if t.numel() > 1 and t.stride(0) != 1:
            raise ValueError(f"{name}: {what} must be contiguous, got stride {t.stride(0)}")
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"{name}: a and b must match in shape, dtype and device")
    if out is None:
        out = torch.empty_like(a)
    elif out.shape != a.shape or out.dtype != a.dtype or out.device != a.device:
        raise ValueError(f"{name}: out must match a in shape, dtype and device")
    n = a.numel()
    if n:
        vector_add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)
    return out
