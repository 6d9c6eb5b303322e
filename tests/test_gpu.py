"""GPU only (skipped without one): every Triton and CUDA variant in every dtype against float64 on
the edge shapes and the special rows, torch.library.opcheck on the CUDA ops, the error messages for
bad inputs, and 64-bit indexing (more than 2^31 elements). The peers (other projects' kernels, optional
packages) are checked on the shapes they take, and skipped with the reason where not installed."""

import math

import pytest
import torch

from lab import check, inputs
from lab.backends import cuda_variants
from lab.inputs import Shape
from lab.operators.softmax import SOFTMAX
from lab.registry import BACKENDS, Variant, dtype_name, variants

pytestmark = pytest.mark.gpu

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# Every kernel that needs a GPU: this repository's own (Triton, CUDA), then the peers'.
GPU_VARIANTS = [v for v in variants() if v.backend != "torch"]
# This repository's kernels, which must all run on a GPU (the peers may not be installed).
OWN = [v for v in GPU_VARIANTS if v.backend != "peer"]
CUDA_NAMES = list(cuda_variants.CUDA_VARIANTS)
# Just over 2^31 elements (4.3 GB in bfloat16): element offsets past 2^31 - 1 need 64-bit indexing.
# Long rows for the block-per-row kernels, short ones for those limited to shorter rows.
BIG = [(32769, 65536), (2097153, 1024)]


def variant_dtypes() -> list:
    return [pytest.param(v, d, id=f"{v.name}-{dtype_name(d)}") for v in GPU_VARIANTS for d in DTYPES]


def kernel_for(v: Variant, shape: Shape, dtype: torch.dtype):
    if reason := v.skip_reason(shape, dtype):
        pytest.skip(f"{v.name}: {reason}")
    if reason := v.availability():
        pytest.skip(f"{v.name}: {reason}")
    return v.kernel()


def test_own_variants_are_available():
    for v in OWN:
        assert v.availability() is None, f"{v.name}: {v.availability()}"
    assert {v.backend for v in OWN} == set(BACKENDS) - {"torch", "peer"}, "a GPU backend lost its variants"
    assert {v.name for v in OWN} >= {f"cuda.{n}" for n in CUDA_NAMES}


# --- correctness against float64 ----------------------------------------------------------------


@pytest.mark.parametrize("shape", inputs.EDGE_SHAPES, ids=lambda s: s.label)
@pytest.mark.parametrize(("v", "dtype"), variant_dtypes())
def test_edge_shapes(v, dtype, shape):
    kernel = kernel_for(v, shape, dtype)
    x = inputs.make_input(shape, dtype, "cuda")
    ref = SOFTMAX.reference(x)
    res = check.check(kernel, x, v.writes_out, ref)  # into a NaN-poisoned out
    assert res.ok, f"{v.name} {dtype_name(dtype)} {shape.label}: {res.summary()}"
    functional = kernel(x)  # and allocating its own output
    torch.cuda.synchronize()
    res = check.compare(functional, ref, dtype)
    assert res.ok, f"{v.name} {dtype_name(dtype)} {shape.label} (no out): {res.summary()}"


@pytest.mark.parametrize("n", inputs.SPECIAL_NS, ids=lambda n: f"N={n}")
@pytest.mark.parametrize(("v", "dtype"), variant_dtypes())
def test_special_rows(v, dtype, n):
    x, labels = inputs.special_input(n, dtype, "cuda")
    kernel = kernel_for(v, Shape.of(x), dtype)
    res = check.check(kernel, x, v.writes_out, row_labels=labels)
    assert res.ok, f"{v.name} {dtype_name(dtype)} N={n}: {res.summary()}"


# --- the CUDA ops: opcheck and error messages ---------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("name", CUDA_NAMES)
def test_opcheck(name, layout, dtype):
    """Schema, fake (meta) implementation, autograd registration and AOT dispatch agree with the op."""
    cuda_variants.load_extension()  # registers the fake implementations
    x = torch.randn(4, 128, device="cuda", dtype=dtype)
    if layout == "strided":
        x = x[:, :100]
    op = getattr(torch.ops.lab, name)
    torch.library.opcheck(op.default, (x,))
    torch.library.opcheck(op.out, (x,), {"out": torch.empty(x.shape, device="cuda", dtype=dtype)})


def _bad_inputs():
    """(id, make args, expected exception for the torch ops, for the Triton wrappers, regex)."""
    def x():
        return torch.randn(4, 10, device="cuda")

    return [
        ("3-D", lambda: (torch.randn(2, 3, 4, device="cuda"),), RuntimeError, ValueError, "2-D"),
        ("int32", lambda: (torch.ones(4, 10, dtype=torch.int32, device="cuda"),), TypeError, TypeError,
         "float32, float16 or bfloat16"),
        ("float64", lambda: (torch.randn(4, 10, dtype=torch.float64, device="cuda"),), TypeError, TypeError,
         "float32, float16 or bfloat16"),
        ("transposed", lambda: (torch.randn(10, 4, device="cuda").t(),), RuntimeError, ValueError,
         "contiguous"),
        ("out-shape", lambda: (x(), torch.empty(4, 11, device="cuda")), RuntimeError, ValueError, "shape"),
        ("out-dtype", lambda: (x(), torch.empty(4, 10, dtype=torch.float16, device="cuda")), RuntimeError,
         ValueError, "dtype"),
        ("out-device", lambda: (x(), torch.empty(4, 10)), RuntimeError, ValueError, "device|out is on cpu"),
        ("out-transposed", lambda: (x(), torch.empty(10, 4, device="cuda").t()), RuntimeError, ValueError,
         "contiguous"),
    ]


@pytest.mark.parametrize(
    ("make", "cuda_error", "triton_error", "words"),
    [pytest.param(*case[1:], id=case[0]) for case in _bad_inputs()],
)
@pytest.mark.parametrize("v", OWN, ids=lambda v: v.name)
def test_bad_inputs_raise_clearly(v, make, cuda_error, triton_error, words):
    kernel = kernel_for(v, Shape(4, 10), torch.float32)
    args = make()
    with pytest.raises(cuda_error if v.backend == "cuda" else triton_error, match=words):
        kernel(*args)
    # Nothing was launched with bad arguments: the device is still usable.
    x = inputs.make_input(inputs.Shape(3, 10), torch.float32, "cuda")
    assert check.check(kernel, x, v.writes_out).ok


@pytest.mark.parametrize("name", CUDA_NAMES)
def test_cuda_op_out_writes_out(name):
    cuda_variants.load_extension()
    op = getattr(torch.ops.lab, name)
    x = torch.randn(5, 300, device="cuda")
    out = torch.full_like(x, math.nan)
    assert op.out(x, out=out) is None  # the schema returns nothing (see csrc/bindings.cpp)
    assert check.compare(out, SOFTMAX.reference(x), torch.float32).ok


@pytest.mark.parametrize("name", [n for n, v in cuda_variants.CUDA_VARIANTS.items() if v.max_n])
def test_cuda_op_beyond_its_limit_raises_clearly(name):
    cuda_variants.load_extension()
    limit = cuda_variants.CUDA_VARIANTS[name].max_n
    x = torch.randn(2, limit + 1, device="cuda")
    words = f"lab::{name}: rows of {limit + 1} elements are beyond this variant's limit"
    with pytest.raises(RuntimeError, match=words):
        getattr(torch.ops.lab, name)(x)
    assert check.check(getattr(torch.ops.lab, name), x[:, :limit], writes_out=False).ok


# --- 64-bit indexing ----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=BIG, ids=lambda s: f"{s[0]}x{s[1]}")
def big_input(request):
    elements = request.param[0] * request.param[1]
    assert elements > 2**31
    free, _ = torch.cuda.mem_get_info()
    if free < 2 * elements * 2 + 2**30:
        pytest.skip(f"needs {2 * elements * 2 / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} free")
    x = torch.randn(request.param, dtype=torch.bfloat16, device="cuda")
    yield x
    del x
    torch.cuda.empty_cache()


@pytest.mark.parametrize("v", GPU_VARIANTS, ids=lambda v: v.name)
def test_64bit_indexing(v, big_input):
    x = big_input
    kernel = kernel_for(v, Shape.of(x), x.dtype)
    out = torch.full_like(x, math.nan)
    try:
        if v.writes_out:
            kernel(x, out)
        else:
            out.copy_(kernel(x))
        torch.cuda.synchronize()
        # The last row starts at element 2^31 (past int32), the one before it ends at 2^31 - 1.
        rows = [0, x.shape[0] // 2, x.shape[0] - 2, x.shape[0] - 1]
        assert (x.shape[0] - 1) * x.stride(0) == 2**31
        res = check.compare(out[rows], SOFTMAX.reference(x[rows]), x.dtype, [f"row {r}" for r in rows])
    finally:
        del out
        torch.cuda.empty_cache()
    assert res.ok, f"{v.name}: {res.summary()}"


# --- cuda.cluster: both sides of its launch table's row lengths, and misaligned rows ------------


def cluster_row_lengths() -> list[int]:
    """Both sides of every power of two from 2^11 to 2^20: the plan's row-length thresholds are powers
    of two (torch.ops.lab_tune.cluster_plan says which shape and cluster each length gets)."""
    return sorted({n + d for k in range(11, 21) for n in (2**k,) for d in (-1, 0, 1)})


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", cluster_row_lengths())
def test_cluster_plan_thresholds(n, dtype):
    v = cuda_variants.CUDA_VARIANTS["cluster"]
    kernel = kernel_for(v, inputs.Shape(3, n), dtype)
    x = inputs.make_input(inputs.Shape(3, n), dtype, "cuda")
    res = check.check(kernel, x, v.writes_out, SOFTMAX.reference(x))
    assert res.ok, f"N={n} {dtype_name(dtype)} plan {torch.ops.lab_tune.cluster_plan(n, dtype)}: {res.summary()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", [5000, 70001, 262144])
def test_cuda_variants_on_misaligned_rows(n, dtype):
    """A view starting one element in: rows not 16-byte aligned (cluster takes its streaming path)."""
    x = inputs.make_input(inputs.Shape(4, n + 1), dtype, "cuda")[:, 1:]
    ref = SOFTMAX.reference(x)
    for v in GPU_VARIANTS:
        if v.backend == "cuda" and v.skip_reason(inputs.Shape.of(x), dtype) is None:
            res = check.check(v.kernel(), x, v.writes_out, ref)
            assert res.ok, f"{v.name} N={n} {dtype_name(dtype)}: {res.summary()}"
