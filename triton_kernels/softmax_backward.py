"""softmax_backward: dx = y * (dy - sum(dy * y)) per row, in Triton.

Algorithm: fused: one program per row, the whole row of y and dy in registers (block = next power of two
of N). looped: one program per row, a first loop over CHUNK-sized chunks accumulates s = sum(dy * y), a
second re-reads y and dy and writes dx.
HBM sweeps: fused reads y and dy once and writes dx once (3*M*N*itemsize bytes); looped reads each twice
and writes dx once.
Launch: a grid of M programs; fused's num_warps by the block (num_warps_for), looped's 8.
Limits: fused N <= MAX_N (two rows must fit the registers); looped any N. 64-bit row offsets; float32
arithmetic whatever the dtype; row strides may differ from N.
"""

import torch
import triton
import triton.language as tl

from triton_kernels.common import next_power_of_2, num_warps_for, prepare

MAX_N = 16384  # two rows of up to 16384 elements in one program's registers (as fused's 32768 for one)
CHUNK = 4096


@triton.jit
def backward_fused_kernel(y_ptr, dy_ptr, dx_ptr, y_stride, dy_stride, dx_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)  # 64-bit: row * stride passes 2^31 on large inputs
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_stride + cols, mask=mask, other=0.0).to(tl.float32)
    dy = tl.load(dy_ptr + row * dy_stride + cols, mask=mask, other=0.0).to(tl.float32)
    s = tl.sum(dy * y, axis=0)
    tl.store(dx_ptr + row * dx_stride + cols, (y * (dy - s)).to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def backward_looped_kernel(y_ptr, dy_ptr, dx_ptr, y_stride, dy_stride, dx_stride, n_cols, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y_row, dy_row, dx_row = y_ptr + row * y_stride, dy_ptr + row * dy_stride, dx_ptr + row * dx_stride
    cols = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)  # per-lane partial sums, reduced once after the loop
    for start in range(0, n_cols, CHUNK):
        mask = start + cols < n_cols
        y = tl.load(y_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * y
    s = tl.sum(acc, axis=0)
    for start in range(0, n_cols, CHUNK):
        mask = start + cols < n_cols
        y = tl.load(y_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(dy_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_row + start + cols, (y * (dy - s)).to(dx_ptr.dtype.element_ty), mask=mask)


def _prepare(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None, name: str) -> torch.Tensor:
    out = prepare(y, out, name)
    prepare(dy, None, name)  # the same checks on dy (2-D, dtype, contiguous rows)
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise ValueError(f"{name}: dy must match y in shape, dtype and device")
    return out


def launch(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor, kernel_of=lambda k: k,
           chunk: int = CHUNK) -> torch.Tensor:
    """dx of the validated 2-D y and dy into out: rows of up to MAX_N elements by the fused kernel, longer
    ones by the looped kernel. kernel_of(k) is what is launched for the @triton.jit k: k itself, or
    torch.library.wrap_triton(k) inside a torch.library.triton_op (what torch.compile can trace)."""
    rows, cols = y.shape
    if y.numel() == 0:
        return out
    if cols <= MAX_N:
        block = next_power_of_2(cols)
        kernel_of(backward_fused_kernel)[(rows,)](y, dy, out, y.stride(0), dy.stride(0), out.stride(0), cols,
                                                  BLOCK=block, num_warps=num_warps_for(block))
    else:
        kernel_of(backward_looped_kernel)[(rows,)](y, dy, out, y.stride(0), dy.stride(0), out.stride(0), cols,
                                                   CHUNK=chunk, num_warps=8)
    return out


def softmax_backward_fused(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = _prepare(y, dy, out, "triton.fused")
    if y.shape[1] > MAX_N:
        raise ValueError(f"triton.fused: rows of {y.shape[1]} elements exceed the {MAX_N} that fit in one program")
    return launch(y, dy, out)


def softmax_backward_looped(y: torch.Tensor, dy: torch.Tensor, out: torch.Tensor | None = None,
                            chunk: int = CHUNK) -> torch.Tensor:
    """chunk: elements per loop step (a power of two; smaller ones let tests cross chunk borders cheaply)."""
    out = _prepare(y, dy, out, "triton.looped")
    if chunk < 1 or chunk & (chunk - 1):
        raise ValueError(f"triton.looped: chunk must be a power of two, got {chunk}")
    if y.numel() == 0:
        return out
    rows, cols = y.shape
    backward_looped_kernel[(rows,)](y, dy, out, y.stride(0), dy.stride(0), out.stride(0), cols, CHUNK=chunk,
                                    num_warps=8)
    return out
