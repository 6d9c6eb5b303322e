"""multirow: several short rows per program, so that no lane sits idle on a short row.

One program per row (fused) gives a row of N = 32 a whole program of 128 threads: most lanes are
masked off and each program moves 256 bytes, too little to cover the memory latency.

Algorithm: a program loads a 2-D block of ROWS x BLOCK_N elements (BLOCK_N = next power of two of N,
lanes past N masked to -inf, rows past M masked off), reduces max and sum along axis 1 in float32, and
writes the block once. ROWS is chosen so that a program moves about TARGET_BYTES of x (16 KB: 4096 float32 or
8192 16-bit elements), and num_warps so that each thread holds about 16 elements (four 16-byte
loads in float32, two in 16-bit). The output is scaled by one reciprocal per row rather than a
division per element, which leaves exp as the only special-function op per element.

HBM sweeps: read x once, write y once.

Launch: a grid of cdiv(M, ROWS) programs, not persistent. Each program already moves 16 KB, so the
per-program launch cost is amortized without a grid-stride loop, the block scheduler balances the
tail by itself, and no occupancy has to be measured off a compiled kernel (triton.persistent does
that). Where M is small, ROWS is halved until the grid has MIN_PROGRAMS_PER_SM programs per SM (or
ROWS reaches 1), so short inputs still spread over every SM. The loads and stores are 16-byte
vectors when N and the row strides are multiples of 16 (Triton specializes integer arguments
divisible by 16), scalar otherwise, as in fused. A row that one warp covers with one 16-byte access
per lane (N <= 128 in float32, 256 in 16-bit) is reduced by warp shuffles alone, with no shared
memory and no barrier; longer rows span warps and go through shared memory, as in fused. ptxas for
sm_90: 32 to 63 registers per thread up to N = 16384.

Limits: any M (including 0), N >= 1 up to MAX_N = 32768. The whole block is held in registers; once
BLOCK_N reaches the per-program target ROWS is 1 and a program holds one row, as in fused. At
N = 32768 that is 103 (float32) to 116 (16-bit) registers per thread; at N = 65536 ptxas for sm_90
spills (320 and 136 bytes of stack per thread), so the wrapper refuses rows past 32768 and
triton.looped takes them. Rows are addressed with 64-bit offsets (row * stride can pass 2^31).
float32, float16 and bfloat16 in, float32 math.
"""

import functools

import torch
import triton
import triton.language as tl

from triton_kernels.autograd import differentiable
from triton_kernels.common import cdiv, fast_exp, next_power_of_2, prepare, sm_count

MAX_N = 32768  # the last power of two that compiles without spills (see above)
TARGET_BYTES = 16384  # of x per program
ELEMENTS_PER_THREAD = 16
MIN_PROGRAMS_PER_SM = 4


@triton.jit
def softmax_multirow_kernel(
    x_ptr, y_ptr, x_row_stride, y_row_stride, n_rows, n_cols, ROWS: tl.constexpr, BLOCK_N: tl.constexpr
):
    # 64-bit row indices: row * stride passes 2^31 on large inputs.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    x = tl.load(x_ptr + rows[:, None] * x_row_stride + cols[None, :], mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    # Rows past M are all -inf and turn to NaN here; their stores are masked off.
    num = fast_exp(x - tl.max(x, axis=1)[:, None])
    y = num * (1.0 / tl.sum(num, axis=1))[:, None]
    tl.store(y_ptr + rows[:, None] * y_row_stride + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


def compute_launch_config(n_rows: int | None, n_cols: int, itemsize: int, sms: int | None) -> tuple[int, int, int]:
    """(BLOCK_N, ROWS, num_warps) for an (n_rows, n_cols) input. `sms` is the GPU's SM count, or None
    (the interpreter) to skip spreading a small M over the SMs. n_rows None: M is not known (symbolic
    under torch.compile), and the config depends on N alone. launch_config is it, cached."""
    block_n = next_power_of_2(n_cols)
    rows = max(1, TARGET_BYTES // (block_n * itemsize))
    if n_rows is not None:
        rows = min(rows, next_power_of_2(max(n_rows, 1)))  # no program of mostly masked rows
        if sms is not None:
            while rows > 1 and cdiv(n_rows, rows) < MIN_PROGRAMS_PER_SM * sms:
                rows //= 2
    num_warps = min(16, max(4, rows * block_n // (32 * ELEMENTS_PER_THREAD)))
    return block_n, rows, num_warps


# Cached: it is on every launch's path (a few microseconds of host time each).
launch_config = functools.lru_cache(maxsize=4096)(compute_launch_config)


@differentiable
def softmax_multirow(
    x: torch.Tensor, out: torch.Tensor | None = None, *, rows_per_program: int | None = None
) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor. `rows_per_program` (a power of two) overrides the heuristic."""
    out = prepare(x, out, "triton.multirow")
    n_rows, n_cols = x.shape
    if n_cols > MAX_N:
        raise ValueError(f"triton.multirow: rows of {n_cols} elements exceed the {MAX_N} that fit in one program")
    if x.numel() == 0:
        return out
    sms = sm_count(x.device.index) if x.is_cuda else None
    if torch.compiler.is_compiling():
        # The uncached function (Dynamo refuses to trace into a functools cache), and M left out: it
        # is symbolic once a second M has been seen, and Triton takes ROWS and num_warps as constants.
        block_n, rows, num_warps = compute_launch_config(None, n_cols, x.element_size(), sms)
    else:
        block_n, rows, num_warps = launch_config(n_rows, n_cols, x.element_size(), sms)
    if rows_per_program is not None:
        if rows_per_program < 1 or rows_per_program & (rows_per_program - 1):
            raise ValueError(f"triton.multirow: rows_per_program must be a power of two, got {rows_per_program}")
        rows = rows_per_program
    softmax_multirow_kernel[(cdiv(n_rows, rows),)](
        x, out, x.stride(0), out.stride(0), n_rows, n_cols, ROWS=rows, BLOCK_N=block_n, num_warps=num_warps
    )
    return out
