"""GPU only (skipped without one): every Triton and CUDA variant in every dtype against float64 on
the edge shapes and the special rows, torch.library.opcheck on the CUDA ops, the error messages for
bad inputs, and 64-bit indexing (more than 2^31 elements). The peers (other projects' kernels, optional
packages) are checked on the shapes they take, and skipped with the reason where not installed."""

import math

import pytest
import torch

from lab import check, inputs
from lab.backends import cuda_variants
from lab.dispatch import PACK_BYTES, pack_elements, whole_packs
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
BIG = [(32769, 65536), (2097153, 1024), (8388609, 256)]


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
    if v.backend == "lab" and len(args) == 2:  # lab.softmax(x, dim=-1) has no out: a tensor for dim is refused
        cuda_error, words = TypeError, "dim must be an int, got Tensor"
    elif v.backend == "lab" and args[0].is_floating_point() and args[0].dtype != torch.float64:
        # lab.softmax takes any rank and layout (rows of the last dimension): these inputs are not bad for it
        torch.testing.assert_close(kernel(*args), torch.softmax(args[0], -1))
        return
    with pytest.raises(cuda_error if v.backend in ("cuda", "lab") else triton_error, match=words):
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
    """Both sides of every power of two from 2^11 to 2^20 and of the end of every entry of the launch table, which
    may lie between them (cuda_variants.cluster_thresholds, from torch.ops.lab_tune.cluster_plan, which says which
    shape and cluster each length gets)."""
    ends = {2**k for k in range(11, 21)}
    try:
        for dtype in DTYPES:
            ends |= set(cuda_variants.cluster_thresholds(dtype))
    except Exception:  # lab._C not built: cuda.cluster's own tests say so
        pass
    return sorted({n + d for n in ends for d in (-1, 0, 1) if n + d <= 2**20 + 1})


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", cluster_row_lengths())
def test_cluster_plan_thresholds(n, dtype):
    v = cuda_variants.CUDA_VARIANTS["cluster"]
    kernel = kernel_for(v, inputs.Shape(3, n), dtype)
    x = inputs.make_input(inputs.Shape(3, n), dtype, "cuda")
    res = check.check(kernel, x, v.writes_out, SOFTMAX.reference(x))
    assert res.ok, f"N={n} {dtype_name(dtype)} plan {torch.ops.lab_tune.cluster_plan(n, dtype)}: {res.summary()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
def test_cluster_stagger_changes_no_result(dtype):
    """Where the launch table starts its first wave of clusters in groups (the stagger), the result is
    bitwise the one of the same launch started at once, and right, on more rows than a wave holds."""
    cuda_variants.load_extension()
    staggered = 0
    # each entry's longest row of whole packs (an odd end's contiguous rows would be shifted rows, their own table's)
    for n in sorted({whole_packs(e, dtype) for e in cuda_variants.cluster_thresholds(dtype)} | {262144}):
        rows = max(64, 2**25 // n)  # 128 rows of 262144: more than the 35 clusters of 16 resident at once
        shape, cluster, persistent, groups, step_ns = torch.ops.lab_tune.cluster_plan(n, dtype, rows)
        if shape < 0 or groups == 1 or step_ns == 0:
            continue
        x = inputs.make_input(Shape(rows, n), dtype, "cuda")
        y = torch.ops.lab.cluster(x)
        assert torch.equal(y, torch.ops.lab_tune.cluster(x, shape, cluster, bool(persistent), groups, step_ns))
        assert torch.equal(y, torch.ops.lab_tune.cluster(x, shape, cluster, bool(persistent), 1, 0))
        res = check.compare(y, SOFTMAX.reference(x), dtype)
        assert res.ok, f"{rows}x{n} {dtype_name(dtype)} stagger {groups} x {step_ns} ns: {res.summary()}"
        staggered += 1
    assert staggered, f"no {dtype_name(dtype)} entry of the launch table has a stagger"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_cluster_plan_for_many_rows(dtype):
    """Where the launch table has an entry for many rows (min_rows in cluster.cu), that entry runs: at
    each row length the plan changes with the rows, the plan changes once, at a power of two of rows, and
    4096 rows of it run that entry (bitwise against the tuned op with the same shape and cluster), one row and one
    fewer than its start the entry for fewer rows, each at the entry's longest row or, where that row is not whole
    16-byte packs (a contiguous input's rows would be shifted rows, which their own table takes), at the longest
    that is."""
    cuda_variants.load_extension()
    checked = 0
    for n in cuda_variants.cluster_thresholds(dtype):
        few, many = (list(torch.ops.lab_tune.cluster_plan(n, dtype, rows)) for rows in (0, 4096))
        if few == many:
            continue
        counts = {*range(1, 2**20, 97), *(2**k + d for k in range(21) for d in (-1, 0))}
        plans = {rows: list(torch.ops.lab_tune.cluster_plan(n, dtype, rows)) for rows in counts}
        start = min(rows for rows, plan in plans.items() if plan == many)
        assert start & (start - 1) == 0, f"N={n}: the entry for many rows starts at {start} rows, not a power of two"
        assert all(plan == (many if rows >= start else few) for rows, plan in plans.items()), (n, start)
        aligned = whole_packs(n, dtype)
        for rows, plan in ((4096, many), (1, few), (start - 1, few)):
            assert list(torch.ops.lab_tune.cluster_plan(aligned, dtype, rows)) == plan, (n, aligned, rows)
            x = inputs.make_input(Shape(rows, aligned), dtype, "cuda")
            y = torch.ops.lab.cluster(x)
            assert torch.equal(y, torch.ops.lab_tune.cluster(x, plan[0], plan[1], bool(plan[2]), plan[3], plan[4]))
            res = check.compare(y, SOFTMAX.reference(x), dtype)
            assert res.ok, f"{rows}x{aligned} {dtype_name(dtype)} plan {plan}: {res.summary()}"
        checked += 1
    if not checked:
        pytest.skip(f"cluster.cu's {dtype_name(dtype)} plan has no entry for many rows (min_rows)")


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


# --- cuda.cluster's resident shapes, each with every cluster size, through the tuning op -----------


def _cluster_shapes() -> list:
    """The resident shapes compiled into lab._C (torch.ops.lab_tune.cluster_shapes); none when the
    extension is not built (the tests below are skipped then, or on a machine without a GPU)."""
    try:
        return cuda_variants.cluster_shapes()
    except Exception:  # lab._C not built: cuda.cluster's own tests say so
        return []


CLUSTER_SHAPES = _cluster_shapes()
CLUSTER_SIZES = range(1, 17)  # every size a cluster can have on Hopper (above 8: non-portable)
# The packed shapes (16-bit elements held as loaded, two per register) in the dtypes they run in.
PACKED = [pytest.param(i, d, id=f"{s.label()}-{dtype_name(d)}")
          for i, s in enumerate(CLUSTER_SHAPES) if s.packed for d in DTYPES if s.runs(d)]
# The one-row shapes (no row loop, one cluster per row only) in the dtypes they run in.
ONE_ROW = [pytest.param(i, d, id=f"{s.label()}-{dtype_name(d)}")
           for i, s in enumerate(CLUSTER_SHAPES) if s.one_row for d in DTYPES if s.runs(d)]
# The float-register shapes loaded straight into registers (stages 0): kPlan32's shapes, and the float
# shapes any dtype can be tuned with.
FLOAT_DIRECT = [pytest.param(i, d, id=f"{s.label()}-{dtype_name(d)}")
                for i, s in enumerate(CLUSTER_SHAPES) if not s.packed and s.stages == 0 for d in DTYPES]


def _aligned(x: torch.Tensor) -> bool:
    """Whether the resident path takes x: its rows and those of the contiguous output start 16-byte aligned."""
    return (x.data_ptr() % PACK_BYTES == 0 and (x.stride(0) * x.element_size()) % PACK_BYTES == 0
            and (x.shape[-1] * x.element_size()) % PACK_BYTES == 0)


def _fits(shape, n: int, dtype: torch.dtype, cluster: int) -> bool:
    """Whether a row of n elements split across `cluster` CTAs fits the shape (whole 16-byte packs)."""
    pack = pack_elements(dtype)
    return math.ceil(math.ceil(n / pack) / cluster) <= shape.threads * shape.elems // pack


def _shiftable(x: torch.Tensor) -> bool:
    """Whether rows of x not 16-byte aligned are each as far past a 16-byte boundary as the same row of the
    contiguous output (16-byte aligned, as torch allocates it): the resident path's shapes that load straight
    into registers take them shifted (cluster.cu, SHIFTED)."""
    return x.data_ptr() % PACK_BYTES == 0 and ((x.stride(0) - x.shape[-1]) * x.element_size()) % PACK_BYTES == 0


def _resident_launch(shape, x: torch.Tensor, cluster: int) -> bool:
    """Whether the tuning op launches `shape` on `cluster` CTAs for x: aligned rows that fit, or shiftable rows
    of a direct shape whose shifted row (a pack less one element longer) fits."""
    n = x.shape[-1]
    if _aligned(x):
        return _fits(shape, n, x.dtype, cluster)
    pack = pack_elements(x.dtype)
    return _shiftable(x) and shape.stages == 0 and _fits(shape, n + pack - 1, x.dtype, cluster)


def _check_every_cluster(index: int, x: torch.Tensor, ref: torch.Tensor, labels: list[str] | None = None) -> int:
    """Run shape `index` with every cluster size, persistent and not, on x: each launch that fits is
    checked against ref, each that cannot (the slice exceeds the shape, rows neither 16-byte aligned nor
    shiftable by the shape, or a persistent grid of a one-row shape) must raise. Returns how many launches were
    checked."""
    shape = CLUSTER_SHAPES[index]
    checked = 0
    for c in CLUSTER_SIZES:
        for persistent in (True, False):
            def run(t: torch.Tensor, c: int = c, p: bool = persistent) -> torch.Tensor:
                return torch.ops.lab_tune.cluster(t, index, c, p)

            where = f"{shape.label()} c{c} {'persistent' if persistent else 'one cluster per row'} " \
                    f"{dtype_name(x.dtype)} {tuple(x.shape)} stride {x.stride(0)}"
            if x.numel() > 0 and not (_resident_launch(shape, x, c) and shape.launches(persistent)):
                with pytest.raises(RuntimeError):
                    run(x)
                continue
            res = check.check(run, x, False, ref, row_labels=labels)
            assert res.ok, f"{where}: {res.summary()}"
            checked += 1
    return checked


def _tail_rows(n: int, dtype: torch.dtype) -> tuple[torch.Tensor, list[str]]:
    """Rows whose -inf or NaN parts fill whole threads and CTAs of the cluster: a -inf tail, a -inf
    head, a NaN as the last element, all -inf but the last element."""
    g = torch.Generator(device="cuda").manual_seed(1)
    rows = inputs.irregular(4, n, g, "cuda")
    rows[0, n // 2:] = -math.inf
    rows[1, : 3 * n // 4] = -math.inf
    rows[2, -1] = math.nan
    rows[3, :-1] = -math.inf
    return rows.to(dtype), ["-inf tail", "-inf head", "NaN last", "only the last finite"]


@pytest.mark.parametrize(("index", "dtype"), PACKED + ONE_ROW)
def test_cluster_packed_shapes_edge_shapes(index, dtype):
    """Every packed and one-row shape x every cluster size on the edge shapes (odd N, partial last packs, row
    strides, M = 0 and 1, long rows); a one-row shape's persistent launches must raise."""
    checked = 0
    for shape in inputs.EDGE_SHAPES:
        x = inputs.make_input(shape, dtype, "cuda")
        checked += _check_every_cluster(index, x, SOFTMAX.reference(x))
    assert checked, "no edge shape fits this shape with any cluster size"


@pytest.mark.parametrize(("index", "dtype"), PACKED + ONE_ROW)
def test_cluster_packed_shapes_special_rows(index, dtype):
    """Every packed and one-row shape x every cluster size on the special rows (-inf entries, all -inf, +inf,
    NaN, large magnitudes) and on rows whose -inf or NaN parts fill whole threads and CTAs."""
    _check_special_rows_every_cluster(index, dtype)


def _check_special_rows_every_cluster(index: int, dtype: torch.dtype) -> None:
    """Shape `index` with every cluster size on the special rows and on _tail_rows."""
    for n in inputs.SPECIAL_NS:
        x, labels = inputs.special_input(n, dtype, "cuda")
        _check_every_cluster(index, x, SOFTMAX.reference(x), labels)
    for n in (4104, 70008):  # multiples of 8: the contiguous output is aligned, so the resident path runs
        x, labels = _tail_rows(n, dtype)
        assert _check_every_cluster(index, x, SOFTMAX.reference(x), labels) or not any(
            _fits(CLUSTER_SHAPES[index], n, dtype, c) for c in CLUSTER_SIZES), f"N={n}: no launch was checked"


@pytest.mark.parametrize(("index", "dtype"), ONE_ROW)
def test_cluster_one_row_shapes_many_rows(index, dtype):
    """A one-row shape's grid is one cluster per row: 1500 rows (more clusters than are resident at once,
    so later clusters start as earlier ones retire), with and without the first wave's stagger, every row checked."""
    s = CLUSTER_SHAPES[index]
    for c in (1, 2, 4):
        n = c * s.threads * s.elems - 8 * c  # every CTA's slice part empty at its end
        x = inputs.make_input(Shape(1500, n), dtype, "cuda")
        ref = SOFTMAX.reference(x)
        for groups, ns in ((1, 0), (4, 500)):
            res = check.check(lambda t, c=c, g=groups, ns=ns: torch.ops.lab_tune.cluster(t, index, c, False, g, ns),
                              x, False, ref)
            assert res.ok, f"{s.label()} c{c} stagger {groups}x{ns} {dtype_name(dtype)} 1500x{n}: {res.summary()}"


@pytest.mark.parametrize(("index", "dtype"), FLOAT_DIRECT)
def test_cluster_float_direct_shapes_special_rows(index, dtype):
    """Every float-register shape loaded straight into registers x every cluster size on the special rows
    (-inf entries, all -inf, +inf, NaN, large magnitudes) and on rows whose -inf or NaN parts fill whole
    threads and CTAs, as the packed shapes are checked above."""
    _check_special_rows_every_cluster(index, dtype)


@pytest.mark.parametrize("n", [8193, 16383, 40001, 65535, 100003])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cluster_16bit_partial_last_pack_through_out(n, dtype):
    """Odd N on kPlan16's entries for a few rows (packed, and at 100003 one row a CTA held as floats): with rows of x
    and out padded to 16-byte strides the launch stays resident and aligned, and the last pack is partial (the tail
    code of aligned rows; an odd-N contiguous out takes the shifted rows, below). Irregular rows, a -inf tail, a NaN
    last element."""
    stride = (n + 7) // 8 * 8 + 8
    x = inputs.make_input(Shape(3, n, stride), dtype, "cuda")
    x[1, n // 2:] = -math.inf
    x[2, -1] = math.nan
    out = torch.full((3, stride), math.nan, dtype=dtype, device="cuda")[:, :n]
    shape, *_ = torch.ops.lab_tune.cluster_plan(n, dtype)
    assert shape >= 0 and (CLUSTER_SHAPES[shape].packed or n == 100003), f"N={n}: kPlan16 takes no packed shape here"
    assert n != 100003 or CLUSTER_SHAPES[shape].one_row, f"N={n}: kPlan16 takes no one-row shape here"
    torch.ops.lab.cluster.out(x, out=out)
    res = check.compare(out, SOFTMAX.reference(x), dtype, ["irregular", "-inf tail", "NaN last"])
    assert res.ok, f"N={n} {dtype_name(dtype)}: {res.summary()}"


def _odd_rows(rows: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """A contiguous rows x n input with -inf, NaN and +inf at the ends of rows 1 to 7 (where a row's first and last
    16-byte packs are), and a view of as many rows one element into its buffer (every row off a boundary)."""
    x = inputs.make_input(Shape(rows, n), dtype, "cuda")
    x[1, :3] = -math.inf
    x[2, -3:] = -math.inf
    x[3, 0] = math.nan
    x[4, -1] = math.nan
    x[5, :-1] = -math.inf
    x[6, 1:] = -math.inf
    x[7, min(1, n - 1)] = math.inf
    view = inputs.make_input(Shape(1, rows * n + 1), dtype, "cuda").view(-1)[1:].view(rows, n)
    return x, view


# cuda.tiled_rows: every row shape of kTileShapes at both of its ends and odd lengths between, with tiles whole and
# partial (its tiles hold about 8 KB of x: 64 rows of 63 bfloat16 elements, 4 of 512 float32 ones).
TILED_NS = [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 127, 128, 129, 197, 255, 256, 257, 383, 511, 512]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", TILED_NS)
def test_tiled_rows_layouts(n, dtype):
    """cuda.tiled_rows against float64 with -inf, NaN and +inf at rows' ends (_odd_rows), on each of its paths:
    a contiguous input (the tile by 16-byte copies, y in place), the same rows one element into their buffer (x's
    tiles at other phases), an output off by other distances (y's image in a buffer of its own), a strided view
    (element by element) into a contiguous output and into a strided one; rows from 1 to several tiles, the last
    tile partial."""
    for rows in (1, 5, 67, 3001):
        x, view = _odd_rows(rows, n, dtype) if rows >= 8 else (inputs.make_input(Shape(rows, n), dtype, "cuda"),) * 2
        strided = inputs.make_input(Shape(rows, n, n + 5), dtype, "cuda")
        for t, what in ((x, "contiguous"), (view, "one element in"), (strided, "strided")):
            res = check.check(torch.ops.lab.tiled_rows, t, False, SOFTMAX.reference(t))
            assert res.ok, f"{rows}x{n} {dtype_name(dtype)} {what}: {res.summary()}"
            for offset, width in ((3, n), (0, n + 3)):
                buf = torch.full((rows * width + offset,), math.nan, dtype=dtype, device="cuda")
                out = buf[offset:].as_strided((rows, n), (width, 1))
                torch.ops.lab.tiled_rows.out(t, out=out)
                res = check.compare(out, SOFTMAX.reference(t), dtype)
                assert res.ok, f"{rows}x{n} {dtype_name(dtype)} {what} into ({offset}, {width}): {res.summary()}"


# tiled_rows.cu's rotate_slots: rows whose lengths would put a warp's reads of one slot on few banks rotate each
# group's slots; the rest read constant slots (less arithmetic). (dtype, N, rows one element in, rotated): the
# shared-memory wavefronts without and with the rotation, summed over slots and phases, in the comments.
@pytest.mark.parametrize(("dtype", "n", "shifted", "rotated"), [
    (torch.bfloat16, 31, False, False),  # 248 against 256
    (torch.bfloat16, 63, False, True),  # 632 against 256
    (torch.float16, 50, False, False),  # 104 against 172
    (torch.bfloat16, 255, False, False),  # 256 against 248
    (torch.bfloat16, 64, True, True),  # 128-byte rows, one element in: every row of a warp on the same banks
    (torch.float32, 17, False, False),  # 68 against 116
    (torch.float32, 127, False, True),  # 256 against 128
    (torch.float32, 15, False, False),  # 60 against 960: one lane a row, the rotation puts rows on few banks
    (torch.float16, 16, True, True),  # 1024 against 260
], ids=lambda p: dtype_name(p) if isinstance(p, torch.dtype) else str(p))
def test_tiled_rows_rotates_slots_where_banks_collide(dtype, n, shifted, rotated):
    """The kernel tiled_rows launches has the slot rotation rotate_slots chooses, and its result is right."""
    m = 4099
    x = (inputs.make_input(Shape(1, m * n + 1), dtype, "cuda").view(-1)[1:].view(m, n) if shifted
         else inputs.make_input(Shape(m, n), dtype, "cuda"))
    launched = [k for k in _launched_kernels(lambda: torch.ops.lab.tiled_rows(x)) if "tiled_rows_softmax_kernel" in k]
    assert len(launched) == 1 and launched[0].split(">")[0].endswith(f", {str(rotated).lower()}"), launched
    res = check.check(torch.ops.lab.tiled_rows, x, False, SOFTMAX.reference(x))
    assert res.ok, f"{m}x{n} {dtype_name(dtype)}: {res.summary()}"


@pytest.mark.parametrize(("dtype", "m", "n", "view", "expected"), [
    (torch.float32, 131072, 63, False, "tiled_rows"),
    (torch.float32, 131071, 63, False, "register_cached"),  # fewer rows than the rule's
    (torch.float32, 131072, 63, True, "register_cached"),  # rows not contiguous (a view of wider rows)
    (torch.float32, 131072, 64, False, "register_cached"),  # aligned rows
    (torch.float32, 32768, 50, False, "register_cached"),  # float32 rows: from 131072
    (torch.bfloat16, 32768, 31, False, "tiled_rows"),
    (torch.float16, 32768, 17, False, "tiled_rows"),
    (torch.bfloat16, 32768, 33, False, "register_cached"),  # 16-bit rows of 33 to 64 elements: from 131072 rows
    (torch.bfloat16, 131072, 50, False, "tiled_rows"),
    (torch.bfloat16, 131072, 65, False, "register_cached"),  # longer than the rule's rows
], ids=lambda p: dtype_name(p) if isinstance(p, torch.dtype) else str(p))
def test_auto_takes_short_ragged_rows_in_tiles(dtype, m, n, view, expected):
    """cuda.auto's tiles rule at run time (auto.cu, softmax_auto): the kernel it launches for contiguous ragged rows
    is tiled_rows where the rule says so (as auto_choice, which --explain prints, says for a contiguous input), else
    the table's register_cached (its lean kernel for many aligned rows); the result against float64."""
    shape = Shape(m, n, n + 1 if view else None)
    x = inputs.make_input(shape, dtype, "cuda")
    choice = torch.ops.lab_tune.auto_choice(m, n, dtype, n % pack_elements(x.dtype) == 0)[0]
    if not view:
        assert choice == expected, f"auto_choice says {choice}"
    launched = [k for k in _launched_kernels(lambda: torch.ops.lab.softmax(x)) if "_kernel" in k]
    assert len(launched) == 1 and launched[0].split("<")[0].split("::")[-1].startswith(f"{expected}_"), launched
    res = check.check(torch.ops.lab.softmax, x, False, SOFTMAX.reference(x))
    assert res.ok, f"{shape.label} {dtype_name(dtype)}: {res.summary()}"


# Odd N across the shifted rows' tables (kShiftedPlan32, kShiftedPlan16: 1 to 16 CTAs, one cluster per row or a
# persistent grid (float32 327681), entries that stream (bfloat16 262143)) and past the last entry (streaming too).
SHIFTED_NS = [2049, 4097, 8191, 12001, 16383, 16385, 32001, 40961, 50257, 65535, 65537, 100003, 131071, 262143,
              327681, 524287]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", SHIFTED_NS)
def test_cluster_shifted_rows(n, dtype):
    """Odd N of a contiguous input: its rows start off 16-byte boundaries, every distance in its 16 rows.
    cuda.cluster runs them on the resident kernel, shifted (one read), where its plan for such rows says so
    (torch.ops.lab_tune.cluster_plan(..., aligned=False); tests/test_cuda_compile.py checks which N), else on the
    streaming kernel; checked against float64 with -inf and NaN in the first and last packs. A view one element into
    its buffer, whose rows are no longer as far past a boundary as the output's, takes the streaming kernel."""
    rows = 16
    plan = torch.ops.lab_tune.cluster_plan(n, dtype, rows, False)
    x, off = _odd_rows(rows, n, dtype)
    for t, resident in ((x, plan[0] >= 0), (off, False)):
        names = [k for k in _launched_kernels(lambda t=t: torch.ops.lab.cluster(t)) if "cluster_" in k]
        kernel = "cluster_rows_kernel" if resident else "cluster_streaming_softmax_kernel"
        assert len(names) == 1 and kernel in names[0], f"N={n} plan {list(plan)}: launched {names}"
        if resident:
            # <T, THREADS, ELEMS, STAGES, PACKED, SHIFTED, ONE_ROW, LOSS>: SHIFTED is the sixth template argument
            assert names[0].split(">")[0].split(", ")[5] == "true", f"not the shifted kernel: {names[0]}"
        res = check.check(torch.ops.lab.cluster, t, False, SOFTMAX.reference(t))
        assert res.ok, f"{rows}x{n} {dtype_name(dtype)} {'shifted' if resident else 'streaming'}: {res.summary()}"


def test_cluster_packed_shapes_refuse_float32():
    """A packed or one-row shape is compiled for 16-bit dtypes only: float32 is refused, not run (on a grid the shape
    takes: one cluster per row for a one-row shape, which refuses a persistent one whatever the dtype)."""
    packed = [i for i, s in enumerate(CLUSTER_SHAPES) if s.packed or s.one_row]
    if not packed:
        pytest.skip("no packed or one-row shapes in this build")
    x = torch.randn(2, 1000, device="cuda")
    for i in packed:
        persistent = CLUSTER_SHAPES[i].launches(True)
        torch.ops.lab_tune.cluster(x.bfloat16(), i, 1, persistent)  # the same launch runs in bfloat16
        with pytest.raises(RuntimeError):
            torch.ops.lab_tune.cluster(x, i, 1, persistent)


# --- cuda.register_cached's tuning shapes (rows per block, elements per thread), through the tuning op --


def _register_cached_shapes() -> list:
    """(dtype, index, shape) of every tuning shape compiled into lab._C; none when it is not built."""
    try:
        return [(d, i, s) for d in DTYPES for i, s in enumerate(cuda_variants.register_cached_shapes(d))]
    except Exception:  # lab._C not built: cuda.register_cached's own tests say so
        return []


RC_SHAPES = [pytest.param(d, i, s, id=f"{s.label()}-{dtype_name(d)}") for d, i, s in _register_cached_shapes()]


def _rc_rows(s) -> list[Shape]:
    """Rows that fill the shape, leave its last pack partial, leave whole threads idle, misalign it, and
    leave the last block part empty: N at the shape's capacity, one under, just over half, odd; M of one
    row, of a block's rows plus one, and of three blocks' rows less one."""
    cap = s.threads * s.elems
    per_block = s.block // s.threads
    ns = sorted({cap, cap - 1, cap // 2 + 1, max(1, cap // 3 | 1)})
    return [Shape(m, n, stride) for n in ns for m in (1, per_block + 1, 3 * per_block - 1)
            for stride in (None, n + 3)]


@pytest.mark.parametrize(("dtype", "index", "shape"), RC_SHAPES)
def test_register_cached_tune_shapes(dtype, index, shape):
    """Every tuning shape on rows it holds (the edge shapes and _rc_rows, irregular and special rows),
    checked against float64; a row longer than it holds is refused, not cut."""
    def run(t: torch.Tensor) -> torch.Tensor:
        return torch.ops.lab_tune.register_cached_shape(t, index)

    checked = 0
    for s in (*inputs.EDGE_SHAPES, *_rc_rows(shape)):
        x = inputs.make_input(s, dtype, "cuda")
        if not shape.holds(s.n):
            if s.m:
                with pytest.raises(RuntimeError):
                    run(x)
            continue
        res = check.check(run, x, False, SOFTMAX.reference(x))
        assert res.ok, f"{shape.label()} {dtype_name(dtype)} {s.label}: {res.summary()}"
        checked += 1
    for n in inputs.SPECIAL_NS:
        if shape.holds(n):
            x, labels = inputs.special_input(n, dtype, "cuda")
            res = check.check(run, x, False, SOFTMAX.reference(x), row_labels=labels)
            assert res.ok, f"{shape.label()} {dtype_name(dtype)} special N={n}: {res.summary()}"
            checked += 1
    assert checked >= 12, f"{shape.label()}: only {checked} inputs fit"


def test_register_cached_tune_shape_index_out_of_range():
    x = torch.randn(2, 100, device="cuda")
    with pytest.raises(RuntimeError):
        torch.ops.lab_tune.register_cached_shape(x, len(cuda_variants.register_cached_shapes(x.dtype)))


def _launched_kernels(fn) -> list[str]:
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


# (dtype, N, few rows, many rows, the kernel's template arguments for few and for many: threads per row,
# elements per thread, block threads, persistent, packed, staged, registers asked (0: the estimate), shared
# exponentials, then {peeled}, which the test fills in from the input's alignment and the entry's peel, and the
# shared row; a shared row's kernel is PEELED whatever the rows):
# register_cached.cu's few-rows shapes (FewRowsShape). The few rows are a grid that any GPU of 16 SMs or
# more holds at once (64 blocks of 128 threads, or 256 of 64 at 32 registers: 16 per SM, the fewest blocks
# an SM of sm_80 or later holds); the many are more blocks than a GPU of 132 SMs holds at 16 blocks of 128
# (or 32 of 64) per SM.
# Both 16-bit dtypes share a table (kRowShapes16), so the entries that keep their exponentials in shared memory
# are checked in each.
SIXTEEN_BIT_FEW_ROWS = [
    (512, 256, 131072, "32, 16, 128, false, true, true, 0, true, {peeled}, false",
     "32, 16, 128, false, true, true, 0, false, {peeled}, false", "32, 16, 128"),
    (1024, 256, 65536, "64, 16, 64, false, true, true, 32, true, {peeled}, false",
     "64, 16, 64, false, true, true, 0, false, {peeled}, false", "64, 16, 128"),
    (2048, 256, 32768, "64, 32, 64, false, true, true, 32, false, true, true",
     "64, 32, 64, false, true, true, 0, false, {peeled}, false", None),
]
# The last field: the lean shape's template arguments (threads per row, elements per thread, block threads;
# register_cached_lean_kernel), which takes the few rows where they are whole packs on 16-byte boundaries; None: none.
# The many rows are written into an output off its boundaries, which no lean kernel takes (the many-rows lean
# shapes: test_register_cached_lean_many_rows).
FEW_ROWS = [
    (torch.bfloat16, 128, 512, 524288,
     "16, 8, 128, false, true, false, 0, false, {peeled}, false",
     "8, 16, 128, false, true, true, 0, false, {peeled}, false", "8, 16, 128"),
    *[(dtype, *entry) for entry in SIXTEEN_BIT_FEW_ROWS for dtype in (torch.bfloat16, torch.float16)],
    (torch.float32, 1024, 256, 65536,
     "32, 32, 128, false, false, true, 0, false, {peeled}, false",
     "64, 16, 64, false, false, false, 0, false, {peeled}, false", "32, 32, 128"),
]


def _elements_in(like: torch.Tensor, k: int = 1) -> torch.Tensor:
    """A NaN-filled tensor of like's shape and dtype, k elements into its buffer (k = 1: every row off its 16-byte
    boundary): an output whose unwritten elements show, or, copied into, an input off its boundaries."""
    return torch.full((like.numel() + k,), math.nan, dtype=like.dtype, device=like.device)[k:].view(like.shape)


@pytest.mark.parametrize(("dtype", "n", "few", "many", "few_args", "many_args", "lean_args"), FEW_ROWS,
                         ids=[f"{dtype_name(f[0])}-{f[1]}" for f in FEW_ROWS])
def test_register_cached_few_rows_shape(dtype, n, few, many, few_args, many_args, lean_args):
    """Where the few-rows shape's grid is resident all at once, cuda.register_cached launches it (the lean shape
    first, where the entry has one and the rows are whole packs on 16-byte boundaries); with more rows, the
    table's own shape. All checked against float64, and the few-rows kernel also on the special rows (NaN, +inf
    and -inf entries, an all -inf row) of N - 4 elements: the same entry, a partial last pack in 16 bits (in float32
    whole packs, which the lean shape takes where the entry has one)."""
    special, labels = inputs.special_input(n - 4, dtype, "cuda")
    aligned = inputs.make_input(Shape(few, n), dtype, "cuda")
    special_lean = lean_args if (n - 4) % pack_elements(dtype) == 0 else None  # float32's are whole packs
    cases = [(aligned, few_args, None, lean_args, False), (special, few_args, labels, special_lean, False),
             (inputs.make_input(Shape(many, n), dtype, "cuda"), many_args, None, None, True)]
    if lean_args:  # the same few rows off their boundaries: the few-rows shape, not the lean one
        cases.append((_elements_in(aligned).copy_(aligned), few_args, None, None, False))
    for x, args, row_labels, lean, off_output in cases:
        what = f"{dtype_name(dtype)} {Shape.of(x).label}{' special rows' if row_labels else ''}"
        out = _elements_in(x) if off_output else None  # into an output off its boundaries
        names = _register_cached_launches(x, out)
        if out is not None:
            assert check.compare(out, SOFTMAX.reference(x), dtype).ok, f"{what} into an output off its boundaries"
        pack = pack_elements(x.dtype)  # ragged rows: off 16-byte boundaries, or N not a multiple of a pack
        ragged = x.data_ptr() % PACK_BYTES or (x.stride(0) * x.element_size()) % PACK_BYTES or x.shape[1] % pack
        peeled = "true" if ragged and torch.ops.lab_tune.register_cached_ragged(x.shape[1], dtype)[1] else "false"
        if lean:
            kernel = f"register_cached_lean_kernel<{_cuda_type(dtype)}, {lean}>"
        else:
            kernel = f"register_cached_softmax_kernel<{_cuda_type(dtype)}, {args.format(peeled=peeled)}>"
        assert len(names) == 1 and kernel in names[0], f"{what}: launched {names}"
        res = check.check(torch.ops.lab.register_cached, x, False, SOFTMAX.reference(x), row_labels=row_labels)
        assert res.ok, f"{what}: {res.summary()}"


LEAN_ROWS = [(torch.float32, 512, "64, 8, 128"), (torch.bfloat16, 128, "8, 16, 128"),
             (torch.float16, 512, "32, 16, 128"), (torch.bfloat16, 1024, "64, 16, 128"),
             (torch.float32, 128, "32, 4, 128"), (torch.float32, 1024, "32, 32, 128")]


@pytest.mark.parametrize(("dtype", "n", "lean"), LEAN_ROWS, ids=[f"{dtype_name(d)}-{n}" for d, n, _ in LEAN_ROWS])
def test_register_cached_lean_rows(dtype, n, lean):
    """The lean kernel on its rows: special values (NaN, +inf, -inf, an all -inf row) at N, row counts that leave a
    block's last group without a row, a row stride past N, and an output of its own stride; checked against
    float64. Into an output off its boundaries, the rows take the other kernels."""
    kernel = f"register_cached_lean_kernel<{_cuda_type(dtype)}, {lean}>"
    special, labels = inputs.special_input(n, dtype, "cuda")
    cases = [(special, labels), *[(inputs.make_input(Shape(m, n), dtype, "cuda"), None) for m in (1, 3, 129, 1001)],
             (inputs.make_input(Shape(77, n, n + 16), dtype, "cuda"), None)]
    for x, row_labels in cases:
        what = f"{dtype_name(dtype)} {Shape.of(x).label}{' special rows' if row_labels else ''}"
        names = _register_cached_launches(x)
        assert len(names) == 1 and kernel in names[0], f"{what}: launched {names}"
        res = check.check(torch.ops.lab.register_cached, x, False, SOFTMAX.reference(x), row_labels=row_labels)
        assert res.ok, f"{what}: {res.summary()}"
    x = inputs.make_input(Shape(100, n), dtype, "cuda")
    out = torch.empty(x.shape[0], n + 8, dtype=dtype, device="cuda")[:, :n]  # rows of its own stride
    assert kernel.rstrip(">") in _register_cached_kernel(x, out), "into a strided output: the lean kernel"
    assert check.compare(out, SOFTMAX.reference(x), dtype).ok
    off = _elements_in(x)
    assert "lean" not in _register_cached_kernel(x, off), "into an output off its boundaries: not the lean kernel"
    assert check.compare(off, SOFTMAX.reference(x), dtype).ok


# register_cached.cu's many-rows lean shapes (RowShape.lean_many): (dtype, N, the kernel's template arguments), one
# of the two 16-bit dtypes at each length (they share a table).
LEAN_MANY_ROWS = [(torch.float32, 32, "8, 4, 128"), (torch.float32, 64, "16, 4, 128"),
                  (torch.float32, 128, "32, 4, 128"), (torch.float32, 256, "32, 8, 128"),
                  (torch.float32, 512, "64, 8, 128"), (torch.float32, 1024, "64, 16, 64"),
                  (torch.float32, 4096, "128, 32, 128"),
                  (torch.bfloat16, 32, "4, 8, 128"), (torch.float16, 64, "8, 8, 128"),
                  (torch.bfloat16, 128, "8, 16, 128"), (torch.float16, 256, "16, 16, 128"),
                  (torch.bfloat16, 512, "32, 16, 128")]


@pytest.mark.parametrize(("dtype", "n", "lean"), LEAN_MANY_ROWS,
                         ids=[f"{dtype_name(d)}-{n}" for d, n, _ in LEAN_MANY_ROWS])
def test_register_cached_lean_many_rows(dtype, n, lean):
    """More rows than one wave of the lean kernel holds (an SM holds at most 2048 threads): the many-rows lean shape,
    checked against float64 with the special rows (NaN, +inf, -inf, an all -inf row) last, in a last block that some
    of its groups leave without a row; with a row stride past N too. Into an output off its boundaries, and as rows
    of N - 1 elements (ragged: not a whole number of packs), the rows take the other kernels."""
    kernel = f"register_cached_lean_kernel<{_cuda_type(dtype)}, {lean}>"
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    rows = 2 * 2048 * sms // int(lean.split(",")[0]) + 3
    special, labels = inputs.special_input(n, dtype, "cuda")
    x = torch.cat([inputs.make_input(Shape(rows - special.shape[0], n), dtype, "cuda"), special])
    row_labels = ["random"] * (rows - special.shape[0]) + labels
    strided = inputs.make_input(Shape(rows, n, n + 16), dtype, "cuda")
    for t, t_labels in ((x, row_labels), (strided, None)):
        what = f"{dtype_name(dtype)} {Shape.of(t).label}"
        assert kernel.rstrip(">") in _register_cached_kernel(t), f"{what}: launched {_register_cached_kernel(t)}"
        res = check.check(torch.ops.lab.register_cached, t, False, SOFTMAX.reference(t), row_labels=t_labels)
        assert res.ok, f"{what}: {res.summary()}"
    off = _elements_in(x)
    assert "lean" not in _register_cached_kernel(x, off), "into an output off its boundaries: not the lean kernel"
    assert check.compare(off, SOFTMAX.reference(x), dtype, row_labels).ok
    ragged = inputs.make_input(Shape(rows, n - 1), dtype, "cuda")
    assert "lean" not in _register_cached_kernel(ragged), "ragged rows: not the lean kernel"
    assert check.check(torch.ops.lab.register_cached, ragged, False, SOFTMAX.reference(ragged)).ok


# Odd N on both sides of every power of two from 32 to 16384 (register_cached's table changes shape there and at 208),
# rows shorter than a 16-byte pack, whose head may be the whole row, and N = 2^k + 6, whose rows one element into a
# buffer include the longest edge, a head and a tail of a pack less one element each (pack - 2 = 6 in 16 bits,
# and 6 = 2 mod 4 in float32).
PEELED_NS = [1, 3, 7, *[2**k + d for k in range(5, 15) for d in (-1, 1) if 2**k + d <= 16384], 38, 1030, 8198,
             197, 209]  # and both sides of the 208 entry's end


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", PEELED_NS)
def test_register_cached_peeled_rows(n, dtype):
    """Odd N of a contiguous input: its rows start off 16-byte boundaries, every distance in its 16 rows.
    cuda.register_cached takes them on its PEELED kernels (each row's whole packs in the fragment, its head and tail
    beside them) where the table entry that takes them peels, else element by element: the entry of the rows' whole
    packs where it peels (torch.ops.lab_tune.register_cached_ragged), the kernel of aligned rows of that entry's
    length but for the PEELED flag. Checked against float64 with -inf, NaN and +inf in the heads and at the ends,
    with few rows (the few-rows shapes) and with more (the table's own), into a contiguous output (its body written
    as packs) and into one whose rows are off boundaries by other distances (written element by element). An
    aligned view one element into its buffer takes them too; rows of whole packs on boundaries take the kernel
    without the peel."""
    pack = pack_elements(dtype)
    for rows in (16, 3000):
        x, view = _odd_rows(rows, n, dtype)
        expected = _ragged_kernel(rows, n, dtype)
        for t, what in ((x, "contiguous"), (view, "one element in")):
            label = f"{rows}x{n} {dtype_name(dtype)} {what}"
            assert _register_cached_kernel(t) == expected, f"{label}: launched {_register_cached_kernel(t)}"
            res = check.check(torch.ops.lab.register_cached, t, False, SOFTMAX.reference(t))
            assert res.ok, f"{label}: {res.summary()}"
        out = _elements_in(x, 3)
        torch.ops.lab.register_cached.out(x, out=out)
        res = check.compare(out, SOFTMAX.reference(x), dtype)
        assert res.ok, f"{rows}x{n} {dtype_name(dtype)} into an output off by other distances: {res.summary()}"
    aligned = inputs.make_input(Shape(16, (n + pack - 1) // pack * pack), dtype, "cuda")
    if "lean" not in _register_cached_kernel(aligned):  # the lean kernel takes only such rows, and has no PEELED form
        peeled, shared_row = _register_cached_kernel(aligned).split(", ")[-2:]
        assert peeled == shared_row, "aligned rows: a PEELED kernel (only a shared row's is PEELED for every row)"
    res = check.check(torch.ops.lab.register_cached, aligned, False, SOFTMAX.reference(aligned))
    assert res.ok, f"aligned rows of {aligned.shape[1]}: {res.summary()}"


def _register_cached_launches(t: torch.Tensor, out: torch.Tensor | None = None) -> list[str]:
    """The names of the kernels cuda.register_cached launches for t (into `out`, where given)."""
    def run():
        return torch.ops.lab.register_cached(t) if out is None else torch.ops.lab.register_cached.out(t, out=out)

    return [k for k in _launched_kernels(run) if "register_cached" in k]


def _register_cached_kernel(t: torch.Tensor, out: torch.Tensor | None = None) -> str:
    """The template arguments of the one kernel cuda.register_cached launches for t (into `out`, where given)."""
    names = _register_cached_launches(t, out)
    assert len(names) == 1, f"{Shape.of(t).label}: launched {names}"
    return names[0].split(">")[0]


def _ragged_kernel(rows: int, n: int, dtype: torch.dtype) -> str:
    """The kernel that should take ragged rows x n: that of aligned rows of the length of the table entry that takes
    them (torch.ops.lab_tune.register_cached_ragged), PEELED where that entry peels (the next to last template
    argument; the last is the shared row's). The aligned rows are written into an output off its boundaries, which
    the lean kernel does not take, as it takes no ragged rows."""
    entry, peeled = torch.ops.lab_tune.register_cached_ragged(n, dtype)
    twin = inputs.make_input(Shape(rows, entry), dtype, "cuda")
    off = _elements_in(twin)
    args = _register_cached_kernel(twin, off).split(", ")
    args[-2] = "true" if peeled else "false"
    return ", ".join(args)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", [129, 1025, 4097, 8193, 2**14 - 3])
def test_register_cached_ragged_aligned_rows(n, dtype):
    """Rows that start on 16-byte boundaries but whose N is not a multiple of a pack (a view of the first N columns
    of a wider buffer): their tails go beside the packs too, on the PEELED kernel of the entry of their whole packs
    where it peels (2^k + 1: the entry of 2^k); checked against float64 with special values at the row ends."""
    pack = pack_elements(dtype)
    width = (n + pack - 1) // pack * pack + pack
    for rows in (16, 3000):
        t = inputs.make_input(Shape(rows, width), dtype, "cuda")[:, :n]
        t[1, -1], t[2, -1], t[3, 0], t[4, -2] = math.inf, math.nan, -math.inf, math.inf
        assert t.data_ptr() % PACK_BYTES == 0 and (t.stride(0) * t.element_size()) % PACK_BYTES == 0
        assert _register_cached_kernel(t) == _ragged_kernel(rows, n, dtype)
        res = check.check(torch.ops.lab.register_cached, t, False, SOFTMAX.reference(t))
        assert res.ok, f"{rows}x{n} {dtype_name(dtype)} aligned rows of a wider buffer: {res.summary()}"


def _cuda_type(dtype: torch.dtype) -> str:
    return {torch.float32: "float", torch.float16: "__half", torch.bfloat16: "__nv_bfloat16"}[dtype]


# --- cuda.grid_split: few long rows over the whole GPU, its register limit, its persistent path ---


def grid_split():
    return cuda_variants.CUDA_VARIANTS["grid_split"]


def grid_split_grid() -> int:
    """The CTAs of its cooperative grid: one per SM (kCtasPerSm, kMaxGrid in grid_split.cu)."""
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return min(cuda_variants.GRID_SPLIT_MAX_GRID, sms)


def grid_split_max_n(m: int) -> int:
    """The longest row M rows may have: G CTAs per row of 512 threads x 64 elements (G = 1 past grid / 2)."""
    grid = grid_split_grid()
    parts = grid // m if m <= grid // 2 else 1
    return parts * cuda_variants.GRID_SPLIT_THREADS * cuda_variants.GRID_SPLIT_ELEMS


def check_grid_split(x: torch.Tensor, labels: list[str] | None = None) -> None:
    v = grid_split()
    kernel = kernel_for(v, Shape.of(x), x.dtype)
    res = check.check(kernel, x, v.writes_out, row_labels=labels)
    assert res.ok, f"{v.name} {dtype_name(x.dtype)} {Shape.of(x).label}: {res.summary()}"


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", [2**16, 2**16 + 1, 2**17 + 3, 2**18, 2**19 - 1, 2**19, 2**20 - 7, 2**20])
@pytest.mark.parametrize("m", range(1, 9))
def test_grid_split_few_long_rows(m, n, dtype):
    """M = 1..8 rows of 2^16..2^20 (odd N: a partial last pack); shapes past its registers are skipped
    with the reason (M >= 5 at 2^20 on 132 SMs)."""
    check_grid_split(inputs.make_input(Shape(m, n), dtype, "cuda"))


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("n", [65537, 262147])
def test_grid_split_special_rows(n, dtype):
    """-inf entries, an all -inf row, +inf, NaN and 1e4 magnitudes in long rows split over CTAs (10 rows)."""
    x, labels = inputs.special_input(n, dtype, "cuda")
    check_grid_split(x, labels)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize(("m", "n", "stride"), [(3, 100003, 100096), (3, 100003, 100011), (2, 262144, 262145),
                                                (1, 70001, None)])
def test_grid_split_strides_and_misaligned_rows(m, n, stride, dtype):
    """Row strides (16-byte aligned, then odd, so rows start misaligned), and a view starting one element in."""
    if stride is None:
        x = inputs.make_input(Shape(m, n + 1), dtype, "cuda")[:, 1:]
    else:
        x = inputs.make_input(Shape(m, n, stride), dtype, "cuda")
    check_grid_split(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
def test_grid_split_persistent_path(dtype):
    """More rows than half the grid: one CTA per row, no grid barrier (and M > grid: CTAs loop over rows)."""
    grid = grid_split_grid()
    for m, n in [(grid // 2 + 1, 32768), (grid, 5001), (3 * grid + 7, 32767), (1000, 129)]:
        check_grid_split(inputs.make_input(Shape(m, n), dtype, "cuda"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_name)
@pytest.mark.parametrize("which", ["M=1", "M=3", "M=grid/2", "M=grid/2+1"])
def test_grid_split_limit_agrees_with_the_launcher(which, dtype):
    """Both sides of its register limit: the longest row runs and is right, one element more is refused by
    the launcher with a clear error, and the registry's rule skips it with the reason."""
    cuda_variants.load_extension()
    grid = grid_split_grid()
    m = {"M=1": 1, "M=3": 3, "M=grid/2": grid // 2, "M=grid/2+1": grid // 2 + 1}[which]
    limit = grid_split_max_n(m)
    v = grid_split()
    assert v.skip_reason(Shape(m, limit), dtype) is None
    assert "do not fit the registers" in v.skip_reason(Shape(m, limit + 1), dtype)
    x = inputs.make_input(Shape(m, limit + 1), dtype, "cuda")
    with pytest.raises(RuntimeError, match=f"lab::grid_split: rows of {limit + 1} elements are beyond this "
                                           "variant's limit"):
        torch.ops.lab.grid_split(x)
    check_grid_split(x[:, :limit])


@pytest.mark.parametrize("launches", [8, 40])
def test_grid_split_concurrent_streams(launches):
    """Launches on three streams that may overlap each get their own partial-state scratch. The launcher
    once cycled through 8 static buffers in launch order: launches i and i + 8 shared one, and with three
    streams (3 does not divide 8) they run on different streams, so a grid still draining on one could
    have its states overwritten from another. The overlap is a race with a narrow window: passing shows
    correct rows in these runs, not that no interleaving could break them (the stream-ordered scratch
    is what rules that out)."""
    v = grid_split()
    kernel = kernel_for(v, Shape(2, 2**18), torch.float32)
    xs = [inputs.make_input(Shape(2, 2**18), torch.float32, "cuda", seed) for seed in range(launches)]
    streams = [torch.cuda.Stream() for _ in range(3)]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    outs = []
    for i, x in enumerate(xs):
        with torch.cuda.stream(streams[i % len(streams)]):
            outs.append(kernel(x))
    for s in streams:
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for x, y in zip(xs, outs, strict=True):
        res = check.compare(y, SOFTMAX.reference(x), torch.float32)
        assert res.ok, res.summary()


# --- lab.softmax (lab.auto): the Triton entry or torch.ops.lab.softmax, as its table says ---------------


def test_lab_softmax_runs_what_its_table_names():
    """At every entry of this GPU model's committed lab_entries (rows capped to keep it quick), lab.softmax
    returns bitwise what the variant the entry names returns (both are deterministic: see trust.md)."""
    import lab
    from lab import dispatch
    from lab.registry import get

    cuda_variants.load_extension()
    path = dispatch.table_path(dispatch.current_gpu())
    if not path.exists():
        pytest.skip(f"no committed dispatch table for {dispatch.current_gpu()}")
    checked = 0
    for name, entries in dispatch.load(path).get("lab_entries", {}).items():
        dtype = getattr(torch, name)
        for n, m, variant, _ in entries:
            rows = min(m, max(1, 2**22 // n))
            # The committed table's choice (fewer rows than the entry's M may fall to an entry of smaller
            # M), and the installed table must make the same one.
            choice = dispatch.choose(entries, rows, n)
            assert choice == variant or rows < m, f"{m}x{n} {name}: the entry names {variant}, the rule {choice}"
            assert dispatch.lab_choice(rows, n, dtype) == choice, f"{rows}x{n} {name}: the installed table differs"
            x = torch.randn(rows, n, device="cuda", dtype=dtype)
            run = get("softmax", choice).kernel() if choice.startswith("triton.") else torch.ops.lab.softmax
            assert torch.equal(lab.softmax(x), run(x)), f"{rows}x{n} {name}: lab.softmax is not {choice}"
            checked += 1
    assert checked, "the committed table has no lab_entries"


def test_lab_softmax_asks_the_registry_once_per_kernel(monkeypatch):
    """After a shape's first call, lab.softmax finds its Triton kernel without the registry (whose lookup
    lists the backends' folder: tens of microseconds, more than a short row's kernel)."""
    import lab
    from lab import dispatch, registry

    cuda_variants.load_extension()
    shapes = [(m, n, dtype) for dtype in (torch.float32, torch.bfloat16) for m, n in ((4096, 128), (16384, 4096))
              if (dispatch.lab_choice(m, n, dtype) or "").startswith("triton.")]
    if not shapes:
        pytest.skip(f"lab.softmax routes none of these shapes to Triton on {dispatch.current_gpu()}")
    xs = [torch.randn(m, n, device="cuda", dtype=dtype) for m, n, dtype in shapes]
    for x in xs:
        lab.softmax(x)

    def refuse(*args, **kwargs):
        raise AssertionError("lab.softmax asked the registry again")

    monkeypatch.setattr(registry, "get", refuse)
    monkeypatch.setattr(registry, "load_backends", refuse)
    for x in xs:
        torch.testing.assert_close(lab.softmax(x), torch.softmax(x.float(), -1).to(x.dtype))


@pytest.mark.parametrize("name", ["lab.auto", *(v.name for v in OWN if v.backend == "triton")])
def test_compiles_fullgraph_as_the_rows_change(name):
    """torch.compile(fullgraph=True) of the fast entry and of each Triton entry, called with three row
    counts: the second call makes M symbolic (automatic dynamic shapes), which a Python choice on M or a
    functools cache on the wrapper's path would break."""
    from lab.registry import get

    v = get("softmax", name)
    if reason := v.availability():
        pytest.skip(reason)
    torch._dynamo.reset()
    f = torch.compile(v.kernel(), fullgraph=True)
    for m in (512, 1024, 2048):
        x = torch.randn(m, 1000, device="cuda")
        torch.testing.assert_close(f(x), torch.softmax(x, -1))
