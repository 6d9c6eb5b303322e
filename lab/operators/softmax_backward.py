"""softmax_backward: dx = y * (dy - sum(dy * y)) per row, the gradient of softmax at its output y.

Inputs (y, dy), both M x N: y is the softmax (in the dtype) of lab/inputs.py's irregular rows, so it
holds real probabilities (a few large, many tiny); dy is irregular. Strided views are padded with
NaN past N. Special rows: y as the softmax of the forward's special rows (exact zeros where x is -inf,
NaN rows from a NaN or +inf entry or a fully -inf row), with large dy on the 1e4 row. GB/s =
3*M*N*itemsize / time: read y and dy, write dx.
"""

from __future__ import annotations

import math

import torch

from lab import inputs
from lab.inputs import Shape
from lab.operators import Operator, register_operator
from lab.registry import Traffic
from lab.tolerance import Tolerance


def grad_input(shape: Shape, dtype: torch.dtype, device: torch.device | str, seed: int) -> torch.Tensor:
    g = torch.Generator(device=device).manual_seed(seed + 7919)
    buf = torch.full((shape.m, shape.stride), math.nan, dtype=dtype, device=device)
    buf[:, : shape.n] = inputs.irregular(shape.m, shape.n, g, device).to(dtype)
    return buf[:, : shape.n]


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device | str, seed: int):
    x = inputs.make_input(shape, torch.float32, device, seed)
    y = torch.full((shape.m, shape.stride), math.nan, dtype=dtype, device=device)
    y[:, : shape.n] = torch.softmax(x.double(), dim=-1).to(dtype)
    return y[:, : shape.n], grad_input(shape, dtype, device, seed)


def special_cases(dtype: torch.dtype, device: torch.device | str, seed: int):
    for n in (1, 7, 33, 1000, 4099):
        x, labels = inputs.special_input(n, torch.float32, device, seed)
        y = torch.softmax(x.double(), dim=-1).to(dtype)
        dy = grad_input(Shape(x.shape[0], n), dtype, device, seed)
        big = labels.index("1e4 magnitudes")
        dy[big] = dy[big] * 1e3  # large gradients: the row sum is large, dx small
        yield f"special rows, N={n}", (y, dy), labels


def reference(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    y64, dy64 = y.double(), dy.double()
    return y64 * (dy64 - (dy64 * y64).sum(dim=-1, keepdim=True))


def error_scale(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx_i = y_i * (dy_i - s) cancels where dy_i is close to s = sum(dy * y): its rounding error grows
    with y_i * (|dy_i| + sum|dy * y|), the size of the terms, not with |dx_i|."""
    y64, dy64 = y.double(), dy.double()
    return y64.abs() * (dy64.abs() + (dy64 * y64).abs().sum(dim=-1, keepdim=True))


# Relative to error_scale. 16-bit: the rounding of dx (half an ulp: 2^-11, 2^-9) with a margin;
# float32: the float32 row sum (about sqrt(N) * 2^-24 relative for random terms, N up to 262144).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=5e-5, atol_rel=1e-7, norm_tol=1e-5, sums_rows=True),
    torch.float16: Tolerance(rtol=2e-3, atol_rel=1e-5, norm_tol=1e-3, sums_rows=True),
    torch.bfloat16: Tolerance(rtol=8e-3, atol_rel=1e-5, norm_tol=4e-3, sums_rows=True),
}

SOFTMAX_BACKWARD = register_operator(Operator(
    name="softmax_backward",
    description="dx = y * (dy - sum(dy * y)) per row (y = softmax output, dy = its gradient; M x N)",
    make_inputs=make_inputs,
    special_cases=special_cases,
    reference=reference,
    error_scale=error_scale,
    tolerances=TOLERANCES,
    min_traffic=Traffic(2, 1),
    bytes_formula="3*M*N*itemsize",
    baseline="torch.softmax_backward",
    sweeps=inputs.SWEEPS,
    gpu_sweeps=("fixed", "tutorial"),
    edge_shapes=inputs.EDGE_SHAPES,
    cpu_edge_max_n=inputs.CPU_EDGE_MAX_N,
))
