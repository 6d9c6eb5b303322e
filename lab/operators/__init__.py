"""Operators: the unit of the harness. Each declares its inputs, special cases, float64 reference,
tolerances, the bytes it must move, its baseline variant and its sweeps; variants register under an
operator's name (lab.registry is keyed by (operator, variant)).

Adding an operator is adding a module here that calls `register_operator`; `operators()` imports
every module of this package.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from lab.inputs import Shape
from lab.registry import Traffic
from lab.tolerance import Tolerance

Inputs = tuple[torch.Tensor, ...]
SpecialCase = tuple[str, Inputs, "list[str] | None"]
"""(label, inputs, a label per output row or None)."""


@dataclass(frozen=True)
class Operator:
    name: str
    description: str
    make_inputs: Callable[[Shape, torch.dtype, torch.device | str, int], Inputs]
    """The inputs of one point: irregular values, never zeros; strided views padded with NaN."""
    special_cases: Callable[[torch.dtype, torch.device | str, int], Iterable[SpecialCase]]
    """Inputs built to hit special values (inf, NaN, extremes) and layouts (misaligned views)."""
    reference: Callable[..., torch.Tensor]
    """reference(*inputs): the exact result, computed in float64."""
    tolerances: dict[torch.dtype, Tolerance]
    min_traffic: Traffic
    """The fewest reads and writes through HBM a kernel must make, in units of one input's bytes
    (M * N elements): bytes_moved, and the reference of a variant's ceiling."""
    bytes_formula: str
    """bytes_moved in words, printed with every table, e.g. "2*M*N*itemsize"."""
    baseline: str
    sweeps: dict[str, tuple[Shape, ...]]
    gpu_sweeps: tuple[str, ...]
    """The sweeps run by default on a GPU; `quick` and `cpu` are the others' defaults."""
    edge_shapes: tuple[Shape, ...]
    cpu_edge_max_n: int
    """Edge shapes longer than this are left to the GPU (the Triton interpreter is slow)."""
    cpu_tolerances: dict[torch.dtype, Tolerance] | None = None
    """Tolerances for inputs on the CPU, where they differ (CPU kernels sum in another order)."""
    error_scale: Callable[..., torch.Tensor] | None = None
    """error_scale(*inputs): per element, the magnitude its rounding error grows with (float64), where
    that is not |reference| (lab/check.py)."""
    output_dtypes: Callable[[torch.dtype], tuple[torch.dtype, ...]] | None = None
    """The dtype of each output for inputs of a dtype, for an operator of several outputs (then the reference,
    the variants and error_scale return tuples in this order); None: one output of the input's dtype."""
    checked_as: Callable[[torch.dtype], tuple[torch.dtype, ...]] | None = None
    """The dtype whose tolerance each output is held to, for inputs of a dtype, where that is not the output's own
    (cross_entropy's loss of 16-bit logits: PyTorch returns it in the logits' dtype); None: the output's dtype."""
    output_names: tuple[str, ...] = ("y",)
    """The outputs' names, in a failed check's message."""
    framework_result: Callable[..., object] | None = None
    """framework_result(*inputs): PyTorch's own result in the inputs' dtype (or a list of its results by several
    recipes: the largest of their errors counts); in float16 and bfloat16 a variant must also be within
    FRAMEWORK_ERROR_FACTOR times its error (lab/check.py): for losses and gradients in low precision, the bar the Cut
    Cross-Entropy and QuACK test suites use."""
    framework_floor_from_scale: bool | tuple[bool, ...] = True
    """What the floor of the framework bar (lab/check.py, framework_bound) is a share of, for every output or one flag
    per output: the largest error_scale (True), or the largest |reference| where that is not 0 (False: an output
    whose error_scale grows far past its size, as sums of many terms that cancel do)."""
    shape_label: Callable[[Shape], str] = field(default=lambda s: s.label)
    x_label: str = "N (row length)"
    flops: Callable[[Shape], int] | None = None
    """flops(shape): the floating-point operations of the operator's matmuls, for an operator built on matmuls
    (linear_cross_entropy). Such an operator is compute-bound: its figures are TFLOP/s = flops / time, the time of
    `ceiling` (its matmuls alone, timed in the same rounds) as a share of the variant's, and the peak memory a call
    allocates; not GB/s against a copy. None: a memory-bound operator (bytes_moved, the copy)."""
    ceiling: Callable[..., Callable[[], object]] | None = None
    """ceiling(*inputs) -> the call an operator with flops is measured against in the same rounds: its matmuls alone
    on the point's inputs, what no variant that makes the whole product can beat."""
    ceiling_label: str = "copy"
    """The ceiling's name in tables and plots: the copy, or what `ceiling` times."""
    case_shape: Callable[..., Shape] | None = None
    """case_shape(*inputs) -> the point's Shape, where it is not its first input's (M x N): linear_cross_entropy's
    (tokens, vocabulary, hidden size)."""
    default_metrics: tuple[str, ...] = ("gbps", "pct_copy")
    """What the tables show unless --metrics says otherwise (lab/report.py, METRICS)."""

    @property
    def compute_bound(self) -> bool:
        return self.flops is not None

    def work(self, shape: Shape, dtype: torch.dtype) -> int:
        """What a point's figure counts: its matmuls' FLOP (compute-bound), else the bytes it must move; 0 for an
        empty point (nothing to time)."""
        return self.flops(shape) if self.flops is not None else self.bytes_moved(shape, dtype)

    def tolerances_for(self, device: torch.device | str) -> dict[torch.dtype, Tolerance]:
        cpu = torch.device(device).type == "cpu"
        return {**self.tolerances, **(self.cpu_tolerances or {})} if cpu else self.tolerances

    def bytes_moved(self, shape: Shape, dtype: torch.dtype) -> int:
        """The fewest bytes a kernel must move through HBM at this shape: the numerator of GB/s."""
        itemsize = torch.empty((), dtype=dtype).element_size()
        return round((self.min_traffic.reads + self.min_traffic.writes) * shape.m * shape.n * itemsize)

    def ceiling_fraction(self, traffic: Traffic) -> float:
        """Fraction of a copy's bandwidth that a variant moving `traffic` can reach at best."""
        return traffic.ceiling_fraction(self.min_traffic)


_OPERATORS: dict[str, Operator] = {}


def register_operator(op: Operator) -> Operator:
    if op.name in _OPERATORS:
        raise ValueError(f"operator {op.name} is registered twice")
    _OPERATORS[op.name] = op
    return op


def operators() -> dict[str, Operator]:
    """Every operator, by name (importing this package's modules registers them)."""
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    return dict(_OPERATORS)


def get(name: str) -> Operator:
    ops = operators()
    if name not in ops:
        raise KeyError(f"no operator named {name!r}; the operators are {', '.join(ops)}")
    return ops[name]
