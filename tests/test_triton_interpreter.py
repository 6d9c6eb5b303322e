"""The Triton kernels called directly: small and odd shapes, `out=`, and input validation.

Without a GPU they run on CPU tensors under TRITON_INTERPRET=1 (set by conftest.py); with one, on
the GPU. bfloat16 is left to the GPU tests: the interpreter rounds it differently (see
lab/backends/triton_variants.py). The shared tests take every registered Triton variant; the ones
after them reach into multirow (several rows per program) and looped (rows in chunks, two sweeps).
"""

import math
import sys

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")

from lab import check, registry  # noqa: E402
from lab.registry import variants  # noqa: E402
from triton_kernels import common, fused, looped, multirow, persistent  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:Conversion of an array with ndim > 0:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TRITON = [v for v in variants(backends=["triton"]) if v.availability() is None]
KERNELS = [pytest.param(v.kernel(), id=v.name) for v in TRITON]
LIMITED = [pytest.param(v, id=v.name) for v in TRITON if v.max_n is not None]
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


@pytest.mark.parametrize("v", LIMITED)
def test_rejects_rows_longer_than_max_n(v):
    """Refused before launch: nothing of this size runs."""
    with pytest.raises(ValueError, match=str(v.max_n)):
        v.kernel()(torch.empty(1, v.max_n + 1, device=DEVICE))


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


@pytest.mark.parametrize("v", [pytest.param(v, id=v.name) for v in TRITON])
def test_max_n_matches_the_registry(v):
    """triton_variants repeats each module's MAX_N so that listing variants does not import triton."""
    module = sys.modules[v.kernel().__module__]
    assert v.max_n == module.MAX_N


def test_the_cross_entropy_kernels_limit_matches_the_registry():
    """triton_variants repeats triton_kernels.cross_entropy's FUSED_MAX_V, for cross_entropy and the loss alone."""
    from triton_kernels.cross_entropy import FUSED_MAX_V

    for op in ("cross_entropy", "cross_entropy_loss"):
        assert registry.get(op, "triton.fused").max_n == FUSED_MAX_V


@pytest.mark.parametrize(("block", "warps"), [(1, 4), (1024, 4), (2048, 8), (4096, 16), (65536, 16)])
def test_num_warps_for(block, warps):
    assert common.num_warps_for(block) == warps


# --- multirow: several rows per program ---------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("m", "n", "rows"),
    [(150, 100, None), (13, 7, 4), (5, 1, 2), (3, 33, 8), (1, 64, 4)],
    ids=lambda v: str(v),
)
def test_multirow_packs_rows(m, n, rows, dtype):
    """ROWS rows per program, M not a multiple of ROWS: the last program's extra rows are masked off.
    rows=None: the heuristic's choice, which without an SM count (the interpreter) packs several rows here."""
    x = irregular(m, n, dtype)
    if rows is None:
        _, chosen, _ = multirow.launch_config(m, n, x.element_size(), None)
        assert chosen > 1 and m % chosen and m > chosen, chosen
    out = torch.full_like(x, math.nan)
    multirow.softmax_multirow(x, out, rows_per_program=rows)
    assert_softmax(out, x)


def test_multirow_strided_rows_across_programs():
    xbuf = torch.full((7, 45), math.nan, device=DEVICE)
    xbuf[:, :33] = irregular(7, 33, torch.float32)
    ybuf = torch.full((7, 40), math.nan, device=DEVICE)
    x, out = xbuf[:, :33], ybuf[:, :33]
    multirow.softmax_multirow(x, out, rows_per_program=2)
    assert_softmax(out, x)
    assert ybuf[:, 33:].isnan().all()


def test_multirow_special_rows_in_one_program():
    """Special rows packed with ordinary ones: each row's max and sum stay its own."""
    x = irregular(6, 5, torch.float32)
    x[1] = -math.inf
    x[2, 3] = math.nan
    x[3, 0] = math.inf
    x[4, 1:] = -math.inf
    y = multirow.softmax_multirow(x, rows_per_program=8)
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.equal(y.isnan(), ref.isnan())
    assert_softmax(y, x)


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("n", [1, 7, 32, 100, 1024, 4096, 16384, 32768])
@pytest.mark.parametrize("m", [1, 100, 4096, 1 << 20])
def test_multirow_launch_config(m, n, itemsize):
    sms = 132
    block_n, rows, warps = multirow.launch_config(m, n, itemsize, sms)
    assert block_n == triton.next_power_of_2(n) and rows & (rows - 1) == 0
    assert rows * block_n * itemsize <= max(multirow.TARGET_BYTES, block_n * itemsize)
    # Enough programs for every SM, or one row each.
    assert rows == 1 or -(-m // rows) >= multirow.MIN_PROGRAMS_PER_SM * sms
    assert warps in (4, 8, 16)
    full = multirow.TARGET_BYTES // (block_n * itemsize)
    if full >= 1 and m // full >= multirow.MIN_PROGRAMS_PER_SM * sms:  # enough rows: full programs
        assert rows == full
        assert rows * block_n == 32 * warps * multirow.ELEMENTS_PER_THREAD


def test_multirow_rejects_bad_rows_per_program():
    with pytest.raises(ValueError, match="power of two"):
        multirow.softmax_multirow(torch.randn(4, 5, device=DEVICE), rows_per_program=3)


# --- looped: rows in chunks, online (max, sum), then a write sweep ------------------------------

HINTS = [pytest.param(True, id="hints"), pytest.param(False, id="no-hints")]


@pytest.mark.parametrize("hints", HINTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("m", "n", "block"),
    [(3, 100, 16), (2, 64, 16), (1, 1, 4), (4, 7, 2), (5, 33, 32), (2, 1000, 128)],
    ids=lambda v: str(v),
)
def test_looped_chunks(m, n, block, dtype, hints):
    """Several chunks per row, the last one partial or full, with a chunk size forced small."""
    x = irregular(m, n, dtype)
    out = torch.full_like(x, math.nan)
    looped.softmax_looped(x, out, hints, block=block)
    assert_softmax(out, x)


@pytest.mark.parametrize("hints", HINTS)
def test_looped_max_moves_between_chunks(hints):
    """Rising rows rescale d at every chunk; falling rows never do; a peak in the middle does both."""
    ramp = torch.linspace(-20, 20, 97, device=DEVICE)
    x = torch.stack([ramp, ramp.flip(0), -ramp.abs(), ramp.abs()])
    y = looped.softmax_looped(x, eviction_hints=hints, block=8)
    assert_softmax(y, x)


@pytest.mark.parametrize("hints", HINTS)
def test_looped_special_values_across_chunks(hints):
    """-inf chunks before finite ones (lanes at m = -inf), all -inf, NaN or +inf after -inf, two +inf."""
    n, block = 24, 8
    x = irregular(7, n, torch.float32)
    x[0, :block] = -math.inf  # whole first chunk -inf, then finite values
    x[1] = -math.inf  # all -inf: NaN, like torch
    x[2, :block] = -math.inf
    x[2, block + 3] = math.nan  # NaN in a lane whose max is still -inf
    x[3, 2 * block + 1] = math.nan  # NaN in the last chunk
    x[4, :block] = -math.inf
    x[4, block + 5] = math.inf  # +inf in a lane whose max is -inf
    x[5, 1] = x[5, 2 * block + 1] = math.inf  # two +inf in one lane
    x[6, 5::block] = -math.inf  # one lane -inf in every chunk
    y = looped.softmax_looped(x, eviction_hints=hints, block=block)
    ref = torch.softmax(x.double(), dim=-1)
    assert torch.equal(y.isnan(), ref.isnan()), (y.isnan().any(1), ref.isnan().any(1))
    assert y[0, :block].eq(0).all() and y[6, 5::block].eq(0).all()
    assert_softmax(y, x)


@pytest.fixture
def gpu_max_semantics(monkeypatch):
    """Under the interpreter, make tl.maximum drop a NaN operand as the GPU's max.f32 does (numpy's
    maximum keeps it), so that a kernel relying on max to carry NaN fails here too, not only on a GPU."""
    if DEVICE == "cuda":
        return
    from triton.runtime import interpreter

    if not hasattr(interpreter.InterpreterBuilder, "create_maxnumf"):
        pytest.skip("this triton's interpreter has no create_maxnumf to patch")
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_maxnumf",
                        lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax))


@pytest.mark.parametrize("hints", HINTS)
def test_looped_nan_with_the_gpus_max(gpu_max_semantics, hints):
    """NaN where max(-inf, NaN) gives -inf: the first element of a lane, after -inf, in a later chunk."""
    x = irregular(4, 24, torch.float32)
    x[0, 0] = math.nan
    x[1, :8] = -math.inf
    x[1, 9] = math.nan
    x[2, 17] = math.nan
    x[3, :] = -math.inf
    x[3, 20] = math.nan
    y = looped.softmax_looped(x, eviction_hints=hints, block=8)
    assert y.isnan().all()


@pytest.mark.parametrize("hints", HINTS)
def test_looped_strided_rows(hints):
    xbuf = torch.full((3, 90), math.nan, device=DEVICE)
    xbuf[:, :70] = irregular(3, 70, torch.float32)
    ybuf = torch.full((3, 77), math.nan, device=DEVICE)
    x, out = xbuf[:, :70], ybuf[:, :70]
    looped.softmax_looped(x, out, hints, block=16)
    assert_softmax(out, x)
    assert ybuf[:, 70:].isnan().all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_looped_default_chunks_past_the_register_limit(dtype):
    """No max_n: a row longer than fused's limit, in the wrapper's own chunks (several of them)."""
    n = fused.MAX_N + 3
    block, _ = looped.launch_config(n, torch.tensor([], dtype=dtype).element_size())
    assert -(-n // block) > 2
    x = irregular(1, n, dtype)
    assert_softmax(looped.softmax_looped(x), x)


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("n", [1, 7, 1000, 4096, 8192, 1 << 20])
def test_looped_launch_config(n, itemsize):
    block, warps = looped.launch_config(n, itemsize)
    assert block & (block - 1) == 0 and block * itemsize <= looped.CHUNK_BYTES
    assert block >= n or block * itemsize == looped.CHUNK_BYTES  # short rows in one chunk, long in full ones
    assert warps in (4, 8, 16)
    assert block <= 32 * warps * looped.ELEMENTS_PER_THREAD


def test_looped_rejects_bad_block():
    with pytest.raises(ValueError, match="power of two"):
        looped.softmax_looped(torch.randn(4, 5, device=DEVICE), block=6)


def test_looped_variants_differ_only_in_hints():
    """The two registered looped variants: the same kernel, with and without the eviction hints."""
    fns = {v.kernel() for v in TRITON if v.kernel().__module__ == looped.__name__}
    assert fns >= {looped.softmax_looped, looped.softmax_looped_no_hints}
    x = irregular(3, 5000, torch.float32)  # two chunks
    assert torch.equal(looped.softmax_looped(x), looped.softmax_looped_no_hints(x))  # hints move no values


def test_persistent_launch_config_is_a_constant_under_torch_compile(monkeypatch):
    """triton.persistent sizes its grid by compiling the kernel and reading its registers, which
    Dynamo cannot trace: inside torch.compile(fullgraph=True) the answer must be a constant that
    Dynamo takes from one eager call. The compilation is replaced by a body Dynamo cannot trace."""
    import inspect

    calls = []

    def untraceable(x_dtype, block, num_warps, device_index):
        calls.append((x_dtype, block, num_warps, device_index))
        return (len(inspect.getsourcelines(untraceable)[0]) > 0) + 1, block * 3

    monkeypatch.setattr(persistent, "_launch_config", untraceable)

    def grid_scaled(x):
        stages, programs = persistent.launch_config(x.dtype, 64, 4, 0)
        return x * stages + programs

    x = torch.ones(5)
    compiled = torch.compile(grid_scaled, fullgraph=True, backend="eager")
    assert torch.equal(compiled(x), grid_scaled(x)) and torch.equal(compiled(x), torch.full((5,), 194.0))
    assert calls and all(c == (torch.float32, 64, 4, 0) for c in calls)


def test_plain_int_helpers_match_triton():
    """The wrappers' host-side next_power_of_2 and cdiv (cheaper on every launch) agree with Triton's."""
    assert all(common.next_power_of_2(n) == triton.next_power_of_2(n) for n in range(0, 70000))
    assert all(common.cdiv(a, b) == triton.cdiv(a, b) for a in range(0, 400) for b in range(1, 50))


@pytest.mark.parametrize("kernel", [multirow.softmax_multirow, fused.softmax_fused], ids=["multirow", "fused"])
def test_wrappers_take_the_uncached_path_while_compiling(kernel, monkeypatch):
    """Under torch.compile the wrappers use Triton's own helpers and no functools cache (Dynamo refuses
    to trace into one); the result is the same."""
    x = irregular(13, 100, torch.float32)
    expected = kernel(x)
    used = []
    real = triton.next_power_of_2
    monkeypatch.setattr(triton, "next_power_of_2", lambda n: used.append(n) or real(n))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    before = multirow.launch_config.cache_info()
    assert torch.equal(kernel(x), expected)
    assert used, "Triton's next_power_of_2 was not used while compiling"
    assert multirow.launch_config.cache_info() == before, "the cached launch_config was called while compiling"


@pytest.mark.parametrize("itemsize", [4, 2])
@pytest.mark.parametrize("n", [1, 100, 1024, 32768])
def test_multirow_config_leaves_m_out_while_compiling(n, itemsize, monkeypatch):
    """Under torch.compile M turns symbolic after a second M, and Triton takes ROWS and num_warps as
    constants (a config computed from a symbolic M failed fullgraph compilation on the H200): while
    compiling, multirow's config is the one of many rows, whatever M the call has."""
    real = multirow.compute_launch_config
    assert real(None, n, itemsize, 132) == real(1 << 30, n, itemsize, 132)
    seen = []
    monkeypatch.setattr(multirow, "compute_launch_config", lambda m, *rest: seen.append(m) or real(m, *rest))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    x = irregular(3, n, torch.float32 if itemsize == 4 else torch.bfloat16)
    assert_softmax(multirow.softmax_multirow(x), x)
    assert seen == [None]


@pytest.mark.parametrize(("op", "module", "limit"), [("softmax_backward", "triton_kernels.softmax_backward", "MAX_N"),
                                                     ("cross_entropy", "triton_kernels.cross_entropy", "FUSED_MAX_V")])
def test_the_other_operators_fused_limits_match_the_registry(op, module, limit):
    """The fused kernels of softmax_backward and cross_entropy: the registry's max_n is the module's limit."""
    import importlib

    from lab.registry import get

    assert get(op, "triton.fused").max_n == getattr(importlib.import_module(module), limit)
