"""The Triton kernels called directly: small and odd shapes, `out=`, and input validation.

Without a GPU they run on CPU tensors under TRITON_INTERPRET=1 (set by conftest.py); with one, on
the GPU. bfloat16 is left to the GPU tests: the interpreter rounds it differently (see
lab/backends/triton_variants.py).
"""

import math

import pytest
import torch

pytest.importorskip("triton")

from lab import check  # noqa: E402
from lab.backends import triton_variants  # noqa: E402
from lab.registry import variants  # noqa: E402
from triton_kernels import fused, persistent  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
KERNELS = [pytest.param(fused.softmax_fused, id="fused"),
           pytest.param(persistent.softmax_persistent, id="persistent")]
DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.float16, id="float16")]


def irregular(m: int, n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, n, generator=g) * 3 + torch.randn(m, 1, generator=g) * 5
    return x.to(dtype).to(DEVICE)


def assert_softmax(y: torch.Tensor, x: torch.Tensor) -> None:
    res = check.compare(y, torch.softmax(x.double(), dim=-1), x.dtype)
    assert res.ok, res.summary()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 7, 100, 1023, 1025], ids=lambda n: f"N={n}")
@pytest.mark.parametrize("m", [1, 3, 9], ids=lambda m: f"M={m}")
@pytest.mark.parametrize("softmax", KERNELS)
def test_small_and_odd_shapes(softmax, m, n, dtype):
    x = irregular(m, n, dtype)
    y = softmax(x)
    assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
    assert_softmax(y, x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("softmax", KERNELS)
def test_out(softmax, dtype):
    x = irregular(9, 100, dtype)
    out = torch.full_like(x, math.nan)
    y = softmax(x, out=out)
    assert y is out
    assert_softmax(out, x)


@pytest.mark.parametrize("softmax", KERNELS)
def test_strided_input_and_out(softmax):
    xbuf = torch.full((5, 130), math.nan, device=DEVICE)
    xbuf[:, :100] = irregular(5, 100, torch.float32)
    ybuf = torch.full((5, 117), math.nan, device=DEVICE)
    x, out = xbuf[:, :100], ybuf[:, :100]
    softmax(x, out=out)
    assert_softmax(out, x)
    assert ybuf[:, 100:].isnan().all()


@pytest.mark.parametrize("softmax", KERNELS)
def test_rows_beyond_the_persistent_grid(softmax):
    """More rows than the interpreter's persistent grid (4 programs): every row is visited once."""
    m = 4 * persistent.INTERPRETER_PROGRAMS + 3
    x = irregular(m, 33, torch.float32)
    assert_softmax(softmax(x), x)


@pytest.mark.parametrize("softmax", KERNELS)
def test_empty_batch(softmax):
    x = torch.empty(0, 10, device=DEVICE)
    assert softmax(x).shape == (0, 10)


@pytest.mark.parametrize("softmax", KERNELS)
def test_special_values(softmax):
    x = torch.tensor(
        [[0.0, -math.inf, 1.0, 2.0], [-math.inf] * 4, [1.0, math.inf, 0.0, 0.0], [1.0, math.nan, 0.0, 0.0]],
        device=DEVICE,
    )
    y = softmax(x)
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.equal(y.isnan(), ref.isnan())
    assert y[0, 1] == 0
    assert_softmax(y, x)


@pytest.mark.parametrize("softmax", KERNELS)
def test_rejects_3d(softmax):
    with pytest.raises(ValueError, match="2-D"):
        softmax(torch.randn(2, 3, 4, device=DEVICE))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float64], ids=["int32", "float64"])
@pytest.mark.parametrize("softmax", KERNELS)
def test_rejects_dtype(softmax, dtype):
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        softmax(torch.ones(2, 3, dtype=dtype, device=DEVICE))


@pytest.mark.parametrize("softmax", KERNELS)
def test_rejects_non_contiguous_last_dim(softmax):
    x = torch.randn(8, 5, device=DEVICE).t()
    with pytest.raises(ValueError, match="contiguous"):
        softmax(x)


@pytest.mark.parametrize("softmax", KERNELS)
def test_rejects_rows_longer_than_max_n(softmax):
    """Refused before launch: nothing of this size runs."""
    with pytest.raises(ValueError, match=str(fused.MAX_N)):
        softmax(torch.empty(1, fused.MAX_N + 1, device=DEVICE))


@pytest.mark.parametrize(
    "out",
    [
        pytest.param(lambda x: torch.empty(3, 6, device=DEVICE), id="shape"),
        pytest.param(lambda x: torch.empty(3, 5, dtype=torch.float16, device=DEVICE), id="dtype"),
        pytest.param(lambda x: torch.empty(5, 3, device=DEVICE).t(), id="non-contiguous"),
    ],
)
@pytest.mark.parametrize("softmax", KERNELS)
def test_rejects_bad_out(softmax, out):
    x = torch.randn(3, 5, device=DEVICE)
    with pytest.raises(ValueError, match="out"):
        softmax(x, out=out(x))


def test_max_n_matches_the_registry():
    """triton_variants repeats fused.MAX_N so that listing variants does not import triton."""
    assert triton_variants.FUSED_MAX_N == fused.MAX_N
    for v in variants(backends=["triton"]):
        assert v.max_n == fused.MAX_N


@pytest.mark.parametrize(("block", "warps"), [(1, 4), (1024, 4), (2048, 8), (4096, 16), (65536, 16)])
def test_num_warps_for(block, warps):
    assert fused.num_warps_for(block) == warps
