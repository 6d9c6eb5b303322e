"""Shapes, sweeps and input tensors (lab/inputs.py)."""

import math

import pytest
import torch

from lab import inputs
from lab.inputs import Shape

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["float32", "float16", "bfloat16"]


def storage_rows(x: torch.Tensor, shape: Shape) -> torch.Tensor:
    """The (M, stride) buffer x is a view of, padding included."""
    return x.as_strided((shape.m, shape.stride), (shape.stride, 1))


# --- sweeps -------------------------------------------------------------------------------------


def test_fixed_sweep_keeps_elements_constant():
    shapes = inputs.SWEEPS["fixed"]
    ns = [s.n for s in shapes]
    assert ns[0] == 32 and ns[-1] == 262144 and ns == sorted(ns)
    for s in shapes:
        assert s.m * s.n == 64 * 2**20, s
        assert s.row_stride is None


def test_tutorial_sweep_has_4096_rows():
    shapes = inputs.SWEEPS["tutorial"]
    ns = [s.n for s in shapes]
    assert ns[0] == 128 and ns[-1] == 262144 and ns == sorted(ns)
    assert all(s.m == 4096 and s.row_stride is None for s in shapes)


def test_quick_sweep_is_a_subset_of_the_range():
    assert all(32 <= s.n <= 262144 for s in inputs.SWEEPS["quick"])


def test_cpu_sweep_is_small():
    for s in inputs.SWEEPS["cpu"]:
        assert s.m * s.n <= 2**17 and s.n <= inputs.CPU_EDGE_MAX_N, s


def test_edge_shapes_cover_the_branches():
    shapes = inputs.EDGE_SHAPES
    ns = {s.n for s in shapes}
    assert any(s.m == 0 for s in shapes) and any(s.m == 1 for s in shapes)
    assert 1 in ns and any(n % 2 for n in ns) and any(n % 8 and n > 8 for n in ns)
    assert any(s.stride > s.n for s in shapes), "a row stride larger than N"
    assert any(s.stride > s.n and s.stride % 8 for s in shapes), "a misaligned row stride"
    assert {1024, 1025} <= ns and max(ns) > 65536, "both sides of the thresholds"
    assert {64, 65, 256, 257, 16384, 16385} <= ns, "both sides of register_cached's row shapes and limit"
    assert any(s.n <= inputs.CPU_EDGE_MAX_N for s in shapes)
    assert len(set(shapes)) == len(shapes)


# --- Shape.parse --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "shape", "label"),
    [
        ("4096x1000", Shape(4096, 1000), "4096x1000"),
        ("8x100/128", Shape(8, 100, 128), "8x100/128"),
        ("8X100", Shape(8, 100), "8x100"),
        ("0x7", Shape(0, 7), "0x7"),
        ("3x10/10", Shape(3, 10, 10), "3x10"),
    ],
    ids=["plain", "strided", "upper-case", "empty-batch", "stride-equal-n"],
)
def test_shape_parse(text, shape, label):
    parsed = Shape.parse(text)
    assert parsed == shape
    assert parsed.label == label
    assert parsed.stride == (shape.row_stride or shape.n)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("abc", "cannot read shape 'abc'"),
        ("4x", "cannot read shape"),
        ("4x10x3", "cannot read shape"),
        ("4x0", "N >= 1"),
        ("-1x5", "M >= 0"),
        ("4x10/5", "STRIDE >= N"),
    ],
    ids=["letters", "missing-n", "three-dims", "zero-n", "negative-m", "stride-below-n"],
)
def test_shape_parse_errors(text, match):
    with pytest.raises(ValueError, match=match):
        Shape.parse(text)


# --- make_input ---------------------------------------------------------------------------------

INPUT_SHAPES = [Shape(6, 100), Shape(5, 31), Shape(3, 1), Shape(6, 100, 133), Shape(4, 1024, 1040),
                Shape(2, 4097)]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", INPUT_SHAPES, ids=lambda s: s.label)
def test_make_input_layout_and_values(shape, dtype):
    x = inputs.make_input(shape, dtype, "cpu")
    assert x.shape == (shape.m, shape.n)
    assert x.dtype == dtype
    assert x.stride() == (shape.stride, 1)
    assert x.isfinite().all()
    assert (x != 0).all(), "never zeros"
    if shape.n > 1:
        mantissa = torch.frexp(x.float()).mantissa.abs()
        assert (mantissa == 0.5).float().mean() < 0.05, "not only powers of two"
    padding = storage_rows(x, shape)[:, shape.n:]
    assert padding.numel() == shape.m * (shape.stride - shape.n)
    assert padding.isnan().all(), "the padding past N is NaN, so an over-read fails the check"


def test_make_input_empty_batch():
    x = inputs.make_input(Shape(0, 7), torch.float32, "cpu")
    assert x.shape == (0, 7)


def test_make_input_is_seeded():
    shape = Shape(4, 50)
    a = inputs.make_input(shape, torch.float32, "cpu", seed=1)
    assert torch.equal(a, inputs.make_input(shape, torch.float32, "cpu", seed=1))
    assert not torch.equal(a, inputs.make_input(shape, torch.float32, "cpu", seed=2))


@pytest.mark.parametrize("n", [100, 1000, 4096])
def test_make_input_has_outliers(n):
    """A few large values per row: the softmax is far from uniform (llm.c's advice)."""
    x = inputs.make_input(Shape(64, n), torch.float32, "cpu").double()
    spread = (x.amax(dim=1) - x.mean(dim=1)) / x.std(dim=1)
    # Gaussian rows alone have max - mean of about 3 to 4.5 standard deviations at these N.
    assert spread.median() > 5
    p = torch.softmax(x, dim=-1)
    assert (p.amax(dim=1) * n > 5).all(), "every row has a clear maximum"


def test_make_input_rows_differ_in_scale_and_offset():
    x = inputs.make_input(Shape(32, 512), torch.float32, "cpu").double()
    assert x.median(dim=1).values.std() > 1.0
    std = x.std(dim=1)
    assert std.max() / std.min() > 1.5


# --- special_input ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("n", inputs.SPECIAL_NS, ids=lambda n: f"N={n}")
def test_special_input_rows(n, dtype):
    x, labels = inputs.special_input(n, dtype, "cpu")
    assert x.dtype == dtype and x.shape == (len(labels), n) and x.is_contiguous()
    assert set(labels) == {"random", *inputs.SPECIAL_ROWS}
    assert labels.count("random") == len(inputs.SPECIAL_ROWS)
    rows = {label: x[i].double() for i, label in enumerate(labels) if label != "random"}
    for i, label in enumerate(labels):
        if label == "random":
            assert x[i].isfinite().all() and (x[i] != 0).all()

    neg = rows["-inf entries"]
    assert (neg == -math.inf).any()
    if n > 1:
        assert neg.isfinite().any(), "one finite entry keeps the row from being all -inf"
    assert not neg.isnan().any() and not (neg == math.inf).any()

    assert (rows["all -inf"] == -math.inf).all()

    pos = rows["+inf entry"]
    assert int((pos == math.inf).sum()) == 1 and not pos.isnan().any()

    nan = rows["NaN entry"]
    assert int(nan.isnan().sum()) == 1 and not nan.isinf().any()

    big = rows["1e4 magnitudes"]
    assert big.isfinite().all() and (big.abs() > 9000).all()


def test_special_input_reference_semantics():
    """torch's softmax gives NaN rows for all -inf, +inf and NaN entries; the other rows are finite."""
    x, labels = inputs.special_input(33, torch.float32, "cpu")
    ref = torch.softmax(x.double(), dim=-1)
    nan_rows = {labels[i] for i in range(len(labels)) if ref[i].isnan().all()}
    assert nan_rows == {"all -inf", "+inf entry", "NaN entry"}
    for i, label in enumerate(labels):
        if label not in nan_rows:
            assert ref[i].isfinite().all() and ref[i].sum().item() == pytest.approx(1.0), label
    neg = labels.index("-inf entries")
    assert (ref[neg][x[neg] == -math.inf] == 0).all()
