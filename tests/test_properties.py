"""Properties of every variant that can run here, beside the float64 comparison.

Without a GPU: the torch variants on the CPU and the Triton ones under TRITON_INTERPRET=1 (float32
and float16 only there, see their skip_reason). With a GPU: every available variant, on the GPU.
Rows sum to 1, 0 <= y <= 1, shift invariance, large magnitudes, an empty batch, N = 1, row strides
larger than N, and shapes on both sides of the dispatch thresholds. torch.compile compiles once per
shape (seconds on a CPU), so it is run on two shapes of the first test only.
"""

import math
import warnings

import pytest
import torch

from lab import check, inputs
from lab.inputs import Shape
from lab.operators.softmax import SOFTMAX
from lab.registry import Variant, dtype_name, variants

pytestmark = [
    # The Triton interpreter: numpy deprecations, and -inf - -inf in all -inf rows (NaN, as intended).
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning"),
]

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def runnable() -> list[Variant]:
    with warnings.catch_warnings():  # building torch.jit_naive warns that TorchScript is deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        return [v for v in variants() if v.unavailable_on(DEVICE) is None]


RUNNABLE = runnable()
EAGER = [v for v in RUNNABLE if not v.per_shape]  # built once; per-shape ones compile for every call

# N = 1, odd N, N below and above a warp (32), a row that is not a multiple of the vector width,
# both sides of 1024 (the Triton block doubles; the CUDA threads-per-block step).
SHAPES = [Shape(3, 1), Shape(4, 7), Shape(5, 31), Shape(7, 33), Shape(2, 1000), Shape(4, 1025)]
COMPILE_SHAPES = [Shape(3, 33), Shape(4, 1025)]
STRIDED = [Shape(4, 1, 3), Shape(3, 31, 32), Shape(6, 100, 133), Shape(5, 1024, 1040)]

# |sum of a row - 1|: rounding each output to the dtype costs up to half an ulp, relative.
SUM_TOL = {torch.float32: 1e-5, torch.float16: 2 * torch.finfo(torch.float16).eps,
           torch.bfloat16: 2 * torch.finfo(torch.bfloat16).eps}


def cases(vs: list[Variant], shapes: list[Shape], dtypes: tuple[torch.dtype, ...] | None = None) -> list:
    """(variant, dtype, shape) for every combination the variant supports, with readable ids."""
    out = []
    for v in vs:
        for dtype in v.dtypes:
            if dtypes is not None and dtype not in dtypes:
                continue
            for shape in (COMPILE_SHAPES if v.per_shape else shapes):
                if v.per_shape and dtype != torch.float32:
                    continue
                if v.skip_reason(shape, dtype) is None:
                    case_id = f"{v.name}-{dtype_name(dtype)}-{shape.label}"
                    out.append(pytest.param(v, dtype, shape, id=case_id))
    return out


def variant_dtypes(vs: list[Variant], shape: Shape) -> list:
    """(variant, dtype) for every dtype in which the variant takes `shape` (see Variant.skip_reason)."""
    return [pytest.param(v, d, id=f"{v.name}-{dtype_name(d)}") for v in vs for d in v.dtypes
            if v.skip_reason(shape, d) is None]


def run(v: Variant, x: torch.Tensor) -> torch.Tensor:
    """As the checker calls it: into a NaN-poisoned `out` for the variants that take one."""
    return check.run_variant(v.kernel(), x, v.writes_out)


def assert_probabilities(y: torch.Tensor, dtype: torch.dtype) -> None:
    assert not y.isnan().any(), "NaN in the output"
    assert (y >= 0).all() and (y <= 1).all(), f"outside [0, 1]: min {y.min().item()}, max {y.max().item()}"
    err = (y.double().sum(dim=-1) - 1).abs()
    assert err.max().item() <= SUM_TOL[dtype], f"row sums off by up to {err.max().item():.3g}"


def assert_matches_reference(y: torch.Tensor, x: torch.Tensor, labels: list[str] | None = None) -> None:
    res = check.compare(y, SOFTMAX.reference(x), x.dtype, labels)
    assert res.ok, res.summary()


@pytest.mark.parametrize(("v", "dtype", "shape"), cases(RUNNABLE, SHAPES))
def test_matches_reference_and_sums_to_one(v, dtype, shape):
    x = inputs.make_input(shape, dtype, DEVICE)
    before = x.clone()
    y = run(v, x)
    assert_matches_reference(y, x)
    assert_probabilities(y, dtype)
    assert torch.equal(x, before), "the input was modified"


@pytest.mark.parametrize(("v", "dtype", "shape"), cases(EAGER, [Shape(4, 7), Shape(7, 33), Shape(4, 1025)],
                                                        dtypes=(torch.float32,)))
def test_shift_invariance(v, dtype, shape):
    """softmax(x + c) == softmax(x): a kernel that does not subtract the row max overflows here."""
    x = inputs.make_input(shape, dtype, DEVICE)
    y = run(v, x)
    shifted = run(v, x + 100)
    assert not shifted.isnan().any() and not shifted.isinf().any()
    torch.testing.assert_close(shifted, y, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("offset", [1e4, -1e4, "scale"], ids=["plus-1e4", "minus-1e4", "times-1e3"])
@pytest.mark.parametrize(("v", "dtype"), variant_dtypes(EAGER, Shape(4, 100)))
def test_large_magnitudes(v, dtype, offset):
    """Values around +-1e4 (exp alone overflows or underflows to 0/0) and spreads of +-1e4."""
    x32 = inputs.make_input(Shape(4, 100), torch.float32, DEVICE)
    x = (x32 * 1e3 if offset == "scale" else x32 + offset).to(dtype)
    y = run(v, x)
    assert y.isfinite().all(), "overflow"
    assert_matches_reference(y, x)
    assert_probabilities(y, dtype)


@pytest.mark.parametrize(("v", "dtype"), variant_dtypes(EAGER, Shape(0, 7)))
def test_empty_batch(v, dtype):
    x = torch.empty(0, 7, dtype=dtype, device=DEVICE)
    y = v.kernel()(x)
    assert y.shape == (0, 7) and y.dtype == dtype and y.device == x.device
    if v.writes_out:
        out = torch.empty(0, 7, dtype=dtype, device=DEVICE)
        assert v.kernel()(x, out).shape == (0, 7)


@pytest.mark.parametrize(("v", "dtype"), variant_dtypes(EAGER, Shape(6, 1)))
def test_single_column_gives_ones(v, dtype):
    x = (torch.randn(6, 1, device=DEVICE) * 100).to(dtype)
    x[0, 0] = 1e4
    y = run(v, x)
    assert y.shape == (6, 1)
    assert (y == 1).all(), y.flatten().tolist()


@pytest.mark.parametrize(("v", "dtype", "shape"), cases(EAGER, STRIDED))
def test_strided_rows_equal_contiguous(v, dtype, shape):
    """A row stride larger than N (the padding is NaN: reading past N would show)."""
    x = inputs.make_input(shape, dtype, DEVICE)
    assert x.stride(0) == shape.stride
    y = run(v, x)
    contiguous = run(v, x.contiguous())
    assert_matches_reference(y, x)
    tol = SOFTMAX.tolerances[dtype]
    torch.testing.assert_close(y, contiguous, rtol=tol.rtol, atol=tol.atol_rel)
    padding = x.as_strided((shape.m, shape.stride), (shape.stride, 1))[:, shape.n:]
    assert padding.isnan().all(), "the variant wrote into its input"


@pytest.mark.parametrize(("v", "dtype"), variant_dtypes([v for v in EAGER if v.writes_out], Shape(5, 100)))
def test_strided_out(v, dtype):
    """An `out` whose row stride is larger than N: rows land at the right place, padding untouched."""
    x = inputs.make_input(Shape(5, 100), dtype, DEVICE)
    buf = torch.full((5, 133), math.nan, dtype=dtype, device=DEVICE)
    out = buf[:, :100]
    y = v.kernel()(x, out)
    assert y.data_ptr() == out.data_ptr()
    assert_matches_reference(out, x)
    assert buf[:, 100:].isnan().all(), "wrote past N in out"


@pytest.mark.parametrize(
    ("v", "dtype", "n"),
    # special_input(n) holds two rows per special case: (2 * len(SPECIAL_ROWS), n).
    [pytest.param(*case.values, n, id=f"{case.id}-N={n}") for n in (7, 1000)
     for case in variant_dtypes(EAGER, Shape(2 * len(inputs.SPECIAL_ROWS), n))],
)
def test_special_rows(v, dtype, n):
    """-inf entries, an all -inf row, +inf, NaN, 1e4 magnitudes: NaN exactly where torch has NaN."""
    x, labels = inputs.special_input(n, dtype, DEVICE)
    y = run(v, x)
    assert_matches_reference(y, x, labels)
