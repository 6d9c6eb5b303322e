"""softmax: y = softmax(x) along the last dimension of an (M, N) tensor, the lab's first operator.

Inputs, sweeps and edge shapes are lab/inputs.py's (row-wise, irregular values, NaN padding past N).
Special rows: -inf entries, a row of only -inf, +inf, NaN, values of 1e4 (torch's semantics decide:
a row with NaN or +inf, or of only -inf, is NaN). GB/s = 2*M*N*itemsize / time: read x, write y.
"""

from __future__ import annotations

import torch

from lab import inputs
from lab.operators import Operator, register_operator
from lab.registry import Traffic
from lab.tolerance import Tolerance


def reference(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x.double(), dim=-1)


# Rounding the output to a 16-bit dtype alone costs up to half an ulp (2^-11 for float16, 2^-9 for
# bfloat16, relative): rtol allows four times that. float32 outputs carry the error of exp (fast
# exp2-based fast_exp or __expf: about 1e-6 relative over the arguments that matter) and of the float32 sum.
# atol is only for elements far below the row's maximum (flushed or subnormal results).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=2e-5, atol_rel=1e-7, norm_tol=1e-5, sums_rows=True),
    torch.float16: Tolerance(rtol=2e-3, atol_rel=1e-5, norm_tol=1e-3, sums_rows=True),
    torch.bfloat16: Tolerance(rtol=8e-3, atol_rel=1e-5, norm_tol=4e-3, sums_rows=True),
}


# PyTorch's CPU kernel sums a row in float32 in order, an error that grows with N (bounded by about
# N * 2^-24): 1.1e-4 relative measured at N = 262144, where the GPU kernels' tree sums stay under 2e-5.
CPU_TOLERANCES = {torch.float32: Tolerance(rtol=5e-4, atol_rel=1e-7, norm_tol=2e-4, sums_rows=True)}


def special_cases(dtype: torch.dtype, device: torch.device | str, seed: int):
    for n in inputs.SPECIAL_NS:
        x, labels = inputs.special_input(n, dtype, device, seed)
        yield f"special rows, N={n}", (x,), labels


SOFTMAX = register_operator(Operator(
    name="softmax",
    description="y = softmax(x) over the last dimension (x: M x N)",
    make_inputs=lambda shape, dtype, device, seed: (inputs.make_input(shape, dtype, device, seed),),
    special_cases=special_cases,
    reference=reference,
    tolerances=TOLERANCES,
    cpu_tolerances=CPU_TOLERANCES,
    min_traffic=Traffic(1, 1),
    bytes_formula="2*M*N*itemsize",
    baseline="torch.softmax",
    sweeps=inputs.SWEEPS,
    gpu_sweeps=("fixed", "tutorial"),
    edge_shapes=inputs.EDGE_SHAPES,
    cpu_edge_max_n=inputs.CPU_EDGE_MAX_N,
))
