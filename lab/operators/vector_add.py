"""vector_add: c = a + b on 1-D tensors, the first bandwidth benchmark (read a and b, write c).

Shapes are (1, N): N from 2^12 to 2^28 in the `powers` sweep. The special cases add infinities of
both signs (inf + -inf is NaN), NaN, values that overflow the dtype when added, and views whose
first element is not 16-byte aligned (a[1:], and a and b misaligned differently).
GB/s = 3*N*itemsize / time.
"""

from __future__ import annotations

import math

import torch

from lab.inputs import Shape
from lab.operators import Operator, register_operator
from lab.registry import Traffic
from lab.tolerance import Tolerance


def irregular(n: int, generator: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """float32 values of mixed scale and sign, never zero, never only powers of two."""
    x = torch.randn(n, generator=generator, device=device) * 3.0 + 0.5
    return x + torch.rand(n, generator=generator, device=device).sign() * 1e-3


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device | str, seed: int):
    if shape.m != 1:
        raise ValueError(f"vector_add: shapes are 1 x N, got {shape.label}")
    g = torch.Generator(device=device).manual_seed(seed)
    return irregular(shape.n, g, device).to(dtype), irregular(shape.n, g, device).to(dtype)


def special_cases(dtype: torch.dtype, device: torch.device | str, seed: int):
    g = torch.Generator(device=device).manual_seed(seed)
    big = torch.finfo(dtype).max
    n = 1003
    a, b = irregular(n, g, device), irregular(n, g, device)
    a[::7], b[::7] = math.inf, -math.inf  # inf + -inf = NaN
    a[3::11], b[5::13] = math.nan, math.nan
    a[1::17], b[1::17] = big, big  # overflows to inf in the dtype
    yield "inf, -inf, NaN, overflow", (a.to(dtype), b.to(dtype)), None
    a, b = make_inputs(Shape(1, 4099), dtype, device, seed + 1)
    yield "a and b misaligned by one element", (a[1:], b[1:]), None
    yield "a and b misaligned differently", (a[1:4000], b[3:4002]), None


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The exact sum (float64 holds the sum of two values of any of the dtypes), rounded once to the
    dtype: a sum past the dtype's largest value is inf, as a kernel's must be."""
    return (a.double() + b.double()).to(a.dtype).double()


# The sum of two values of the dtype, computed in float32 and rounded once: half an ulp of the
# result (2^-24 float32, 2^-11 float16, 2^-9 bfloat16); rtol allows twice that.
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=1.2e-7, atol_rel=1e-12, norm_tol=1e-7),
    torch.float16: Tolerance(rtol=1e-3, atol_rel=1e-12, norm_tol=1e-3),
    torch.bfloat16: Tolerance(rtol=4e-3, atol_rel=1e-12, norm_tol=4e-3),
}

POWERS = tuple(Shape(1, 2**k) for k in range(12, 29))

VECTOR_ADD = register_operator(Operator(
    name="vector_add",
    description="c = a + b (1-D, N elements)",
    make_inputs=make_inputs,
    special_cases=special_cases,
    reference=reference,
    tolerances=TOLERANCES,
    min_traffic=Traffic(2, 1),
    bytes_formula="3*N*itemsize",
    baseline="torch.add",
    sweeps={
        "powers": POWERS,
        "quick": (Shape(1, 2**16), Shape(1, 2**20), Shape(1, 2**24), Shape(1, 2**28)),
        "cpu": (Shape(1, 4096), Shape(1, 65536), Shape(1, 100003)),
    },
    gpu_sweeps=("powers",),
    edge_shapes=(Shape(1, 1), Shape(1, 7), Shape(1, 1000), Shape(1, 4097), Shape(1, 65537), Shape(1, 2**20 + 3)),
    cpu_edge_max_n=65537,
    shape_label=lambda s: f"N={s.n}",
    x_label="N (elements)",
))
