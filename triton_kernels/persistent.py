"""persistent: the fused row kernel with a grid sized to fill the GPU exactly once.

Algorithm: as fused (a whole row in one program's registers), but each program loops over rows with
`tl.range`, software-pipelined over num_stages.
HBM sweeps: read x once, write y once.
Launch: the kernel is compiled first; its register and shared-memory use give how many programs fit on an
SM (occupancy), and the grid is SMs x occupancy programs. Under TRITON_INTERPRET=1 there is no compiled
kernel to measure, so the grid is 4 programs (enough to exercise the row loop).
Limits: as fused, the row must fit in registers.
Why: fewer, longer-lived programs than one per row: no block scheduling cost per row, and the next row's
load overlaps the current row's math.
"""

import functools

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from triton_kernels.autograd import differentiable
from triton_kernels.common import INTERPRETED, fast_exp, next_power_of_2, num_warps_for, prepare
from triton_kernels.fused import MAX_N

INTERPRETER_PROGRAMS = 4


@triton.jit
def softmax_persistent_kernel(
    x_ptr, y_ptr, x_row_stride, y_row_stride, n_rows, n_cols, BLOCK: tl.constexpr, NUM_STAGES: tl.constexpr
):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    first = tl.program_id(0).to(tl.int64)  # a 64-bit loop bound makes `row` 64-bit: row * stride > 2^31
    for row in tl.range(first, n_rows, tl.num_programs(0), num_stages=NUM_STAGES):
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        z = x - tl.max(x, axis=0)
        num = fast_exp(z)
        y = num / tl.sum(num, axis=0)
        tl.store(y_ptr + row * y_row_stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@functools.cache
def _device_properties(index: int) -> dict:
    return triton.runtime.driver.active.utils.get_device_properties(index)


def stage_choices(props: dict) -> tuple[int, ...]:
    """Row-pipelining depths to try, deepest first: 4 where shared memory is large (> 200 KB per SM,
    Hopper-class), then shallower ones for long rows whose staged copies do not fit."""
    return (4, 2, 1) if props["max_shared_mem"] > 200_000 else (2, 1)


@torch.compiler.assume_constant_result
def launch_config(x_dtype: torch.dtype, block: int, num_warps: int, device_index: int) -> tuple[int, int]:
    """(num_stages, programs): the deepest pipelining that compiles within shared memory, and SMs x
    the programs per SM that the compiled kernel's registers and shared memory allow. Under
    torch.compile the answer is a constant of the graph: Dynamo calls this once at trace time instead
    of tracing the compilation inside (which it cannot)."""
    return _launch_config(x_dtype, block, num_warps, device_index)


@functools.cache
def _launch_config(x_dtype: torch.dtype, block: int, num_warps: int, device_index: int) -> tuple[int, int]:
    props = _device_properties(device_index)
    x = torch.empty((1, block), dtype=x_dtype, device=f"cuda:{device_index}")
    for num_stages in stage_choices(props):
        compiled = softmax_persistent_kernel.warmup(
            x, x, block, block, 1, block, BLOCK=block, NUM_STAGES=num_stages, num_warps=num_warps, grid=(1,)
        )
        try:
            compiled._init_handles()  # raises OutOfResources when the stages exceed shared memory
        except OutOfResources:
            continue
        threads = props["warpSize"] * num_warps
        by_regs = props["max_num_regs"] // max(1, compiled.n_regs * threads)
        smem = compiled.metadata.shared
        by_smem = props["max_shared_mem"] // smem if smem else by_regs
        return num_stages, props["multiprocessor_count"] * max(1, min(by_regs, by_smem))
    raise OutOfResources(0, 0, f"shared memory for a row of {block} elements")


@differentiable
def softmax_persistent(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    out = prepare(x, out, "triton.persistent")
    rows, cols = x.shape
    if cols > MAX_N:
        raise ValueError(f"triton.persistent: rows of {cols} elements exceed the {MAX_N} that fit in one program")
    if x.numel() == 0:
        return out
    block = next_power_of_2(cols)
    num_warps = num_warps_for(block)
    if INTERPRETED:
        num_stages, programs = 1, INTERPRETER_PROGRAMS
    else:
        num_stages, programs = launch_config(x.dtype, block, num_warps, x.device.index)
    softmax_persistent_kernel[(min(rows, programs),)](
        x, out, x.stride(0), out.stride(0), rows, cols, BLOCK=block, NUM_STAGES=num_stages, num_warps=num_warps
    )
    return out
