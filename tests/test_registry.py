"""The variant registry: what is registered, filters, the contract's checks and its skip reasons.

Nothing here lists variant names: variants are being added all the time, so every expectation is
derived from the registry itself (its order, its backends, the first variant of a backend).
"""

import pytest
import torch

from lab import registry
from lab.backends import torch_variants
from lab.inputs import Shape
from lab.registry import BACKENDS, Traffic, Unavailable, Variant, register, variants

SCRATCH_OP = "test_op_xyz"


@pytest.fixture
def scratch():
    """Registers test variants under an op of their own and removes them afterwards."""
    yield SCRATCH_OP
    for key in [k for k in registry._REGISTRY if k[0] == SCRATCH_OP]:
        del registry._REGISTRY[key]


def make_variant(name: str = "torch.scratch", **kw) -> Variant:
    fields = dict(op=SCRATCH_OP, name=name, backend="torch", description="a test variant",
                  build=lambda: torch.softmax, traffic=Traffic(1, 1))
    return Variant(**(fields | kw))


def names(vs: list[Variant]) -> list[str]:
    return [v.name for v in vs]


def by_backend() -> dict[str, list[str]]:
    """The registered softmax variants' names, per backend, in registry order."""
    return {b: names(variants(backends=[b])) for b in BACKENDS}


def suffix(name: str) -> str:
    return name.split(".", 1)[1]


def test_variants_in_backend_order():
    """Backends in BACKENDS order, then registration order within a backend."""
    vs = variants()
    ranks = [BACKENDS.index(v.backend) for v in vs]
    assert ranks == sorted(ranks)
    in_registration = [v for v in registry._REGISTRY.values() if v.op == "softmax"]
    for b in BACKENDS:
        assert [v for v in vs if v.backend == b] == [v for v in in_registration if v.backend == b]
    assert len(set(names(vs))) == len(vs), "names are unique"


def test_every_backend_has_variants():
    assert BACKENDS[-1] == "peer", "the peers come last, after the lab's own kernels"
    for b, vs in by_backend().items():
        assert vs, f"no variant registered for backend {b!r}"


def test_every_variant_is_described():
    for v in variants():
        assert v.op == "softmax"
        assert v.backend in registry.BACKENDS and v.name.startswith(f"{v.backend}."), v.name
        assert suffix(v.name) and suffix(v.name) == suffix(v.name).lower(), v.name
        assert v.description.strip(), v.name
        assert v.dtypes and set(v.dtypes) <= set(registry.ALL_DTYPES), v.name
        for dtype in registry.ALL_DTYPES:
            t = v.traffic_for(dtype)
            assert t.reads >= 1 and t.writes >= 1, (v.name, dtype, t)


# Each case builds (patterns, backends, expected names) from the registered names per backend.
FILTERS = {
    "glob-backend": lambda b: (["cuda.*"], None, b["cuda"]),
    "glob-suffix": lambda b: (
        [f"*.{suffix(b['torch'][1])}"], None,
        [n for names in b.values() for n in names if suffix(n) == suffix(b["torch"][1])],
    ),
    "two-names-in-backend-order": lambda b: ([b["triton"][0], b["torch"][0]], None, [b["torch"][0], b["triton"][0]]),
    "overlapping-globs-once": lambda b: (["torch.*", b["torch"][0]], None, b["torch"]),
    "backend-triton": lambda b: (None, ["triton"], b["triton"]),
    "two-backends-in-backend-order": lambda b: (None, ["cuda", "torch"], [*b["torch"], *b["cuda"]]),
    "glob-and-backend": lambda b: (
        [f"*.{suffix(b['cuda'][-1])}", f"*.{suffix(b['triton'][0])}"], ["cuda"],
        [n for n in b["cuda"] if suffix(n) in (suffix(b["cuda"][-1]), suffix(b["triton"][0]))],
    ),
    "peer-backend": lambda b: (None, ["peer"], b["peer"]),
    "no-match": lambda b: (["nothing.*"], None, []),
    "case-sensitive": lambda b: ([b["torch"][0].upper()], None, []),
}


@pytest.mark.parametrize("case", FILTERS.values(), ids=FILTERS.keys())
def test_filters(case):
    patterns, backends, expected = case(by_backend())
    assert names(variants(patterns=patterns, backends=backends)) == expected


def test_every_name_is_its_own_filter():
    for name in names(variants()):
        assert names(variants(patterns=[name])) == [name]


def test_other_ops_are_separate(scratch):
    register(make_variant())
    assert names(variants(op=scratch)) == ["torch.scratch"]
    assert "torch.scratch" not in names(variants())


def test_duplicate_registration_raises(scratch):
    register(make_variant())
    with pytest.raises(ValueError, match="registered twice"):
        register(make_variant(description="another one, same name"))


def test_unknown_backend_raises(scratch):
    with pytest.raises(ValueError, match="unknown backend 'opencl'"):
        register(make_variant(name="opencl.scratch", backend="opencl"))
    assert (scratch, "opencl.scratch") not in registry._REGISTRY


def test_skip_reason_dtype():
    v = make_variant(dtypes=(torch.float32,))
    assert v.skip_reason(Shape(4, 10), torch.float32) is None
    assert v.skip_reason(Shape(4, 10), torch.float16) == "float16 not supported"
    explained = make_variant(dtypes=(torch.float32,), dtype_reason="no 16-bit path yet")
    assert explained.skip_reason(Shape(4, 10), torch.bfloat16) == "bfloat16 not supported: no 16-bit path yet"


def test_skip_reason_data_alignment():
    """A view that starts mid-vector is skipped for a variant that needs aligned data, with the reason."""
    v = make_variant(data_align=16)
    assert v.skip_reason(Shape(4, 10), torch.float32, start=32) is None
    assert v.skip_reason(Shape(4, 10), torch.float32, start=8) == (
        "x starts 8 bytes past a 16-byte boundary (a view's offset): torch.scratch needs its data 16-byte aligned")
    assert make_variant().skip_reason(Shape(4, 10), torch.float32, start=2) is None


def test_skip_reason_max_n():
    v = make_variant(max_n=1024)
    assert v.skip_reason(Shape(4, 1024), torch.float32) is None
    assert v.skip_reason(Shape(4, 1025), torch.float32) == "N > 1024"
    assert v.skip_reason(Shape(4, 1000, 1100), torch.float32) is None, "the limit is on N, not on the row stride"
    explained = make_variant(max_n=1024, max_n_reason="the row must fit in registers")
    assert explained.skip_reason(Shape(4, 1025), torch.float32) == "N > 1024: the row must fit in registers"
    assert make_variant().skip_reason(Shape(1, 2**31), torch.float32) is None


def aligned_rows(shape: Shape, dtype: torch.dtype) -> str | None:
    """A scratch per-shape limit: rows of 16 bytes and 16-byte aligned row starts."""
    if shape.n * dtype.itemsize % 16:
        return f"N * {dtype.itemsize} bytes is not a multiple of 16"
    if shape.stride * dtype.itemsize % 16:
        return "rows must start on 16-byte boundaries"
    return None


@pytest.mark.parametrize(
    ("shape", "dtype", "reason"),
    [
        pytest.param(Shape(4, 100), torch.float32, None, id="100-float32"),
        pytest.param(Shape(4, 100), torch.bfloat16, "N * 2 bytes is not a multiple of 16", id="100-bfloat16"),
        pytest.param(Shape(4, 104), torch.bfloat16, None, id="104-bfloat16"),
        pytest.param(Shape(4, 100, 132), torch.float32, None, id="stride-132-float32"),
        pytest.param(Shape(4, 100, 133), torch.float32, "rows must start on 16-byte boundaries", id="stride-133"),
        pytest.param(Shape(0, 100, 133), torch.float32, "rows must start on 16-byte boundaries", id="m-0"),
    ],
)
def test_skip_reason_per_shape(shape, dtype, reason):
    """A variant skipped on one shape in one dtype keeps every other shape and dtype."""
    v = make_variant(shape_reason=aligned_rows)
    assert v.skip_reason(shape, dtype) == reason


def test_shape_reason_sees_the_whole_shape_after_dtype_and_max_n():
    calls: list[tuple[Shape, torch.dtype]] = []

    def reason(shape: Shape, dtype: torch.dtype) -> str | None:
        calls.append((shape, dtype))
        return "odd M" if shape.m % 2 else None

    v = make_variant(dtypes=(torch.float32, torch.float16), max_n=1024, shape_reason=reason)
    assert v.skip_reason(Shape(3, 64, 80), torch.float16) == "odd M"
    assert v.skip_reason(Shape(2, 64, 80), torch.float16) is None
    assert calls == [(Shape(3, 64, 80), torch.float16), (Shape(2, 64, 80), torch.float16)]
    calls.clear()
    # The dtype and the row length are checked first, with their own reasons.
    assert v.skip_reason(Shape(3, 64), torch.bfloat16) == "bfloat16 not supported"
    assert v.skip_reason(Shape(3, 2048), torch.float32) == "N > 1024"
    assert calls == []
    assert make_variant().shape_reason is None, "no per-shape limit unless a variant declares one"


def test_skip_reason_at_every_registered_row_limit():
    """Every variant with a row-length limit takes N = max_n and skips N = max_n + 1, naming the limit."""
    limited = [v for v in variants() if v.max_n is not None]
    assert limited
    for v in limited:
        dtype = v.dtypes[0]
        assert v.skip_reason(Shape(2, v.max_n), dtype) is None, v.name
        reason = v.skip_reason(Shape(2, v.max_n + 1), dtype)
        assert reason is not None and str(v.max_n) in reason and v.max_n_reason in reason, (v.name, reason)


@pytest.mark.parametrize(
    ("reads", "writes", "fraction"),
    [(1, 1, 1.0), (3, 1, 0.5), (2, 1, 2 / 3), (5, 3, 0.25)],
    ids=["1R+1W", "3R+1W", "2R+1W", "5R+3W"],
)
def test_ceiling_fraction(reads, writes, fraction):
    assert Traffic(reads, writes).ceiling_fraction() == pytest.approx(fraction)


def test_naive_traffic_per_dtype():
    assert torch_variants.naive_traffic(torch.float32) == Traffic(5, 3)
    # 16-bit x: float32 temporaries weigh 2, plus the casts in and out.
    assert torch_variants.naive_traffic(torch.bfloat16) == Traffic(5 * 2 + 1 + 2, 3 * 2 + 2 + 1)
    assert any(v.traffic is torch_variants.naive_traffic for v in variants())


def test_fixed_traffic_is_the_same_in_every_dtype():
    for v in variants():
        if isinstance(v.traffic, Traffic):
            assert all(v.traffic_for(d) == v.traffic for d in registry.ALL_DTYPES), v.name


def test_unavailable_variant_reports_its_reason_and_is_asked_again():
    installed = []

    def build():
        if not installed:
            raise Unavailable("the widget library is missing")
        return torch.softmax

    v = make_variant(build=build)
    assert v.availability() == "the widget library is missing"
    with pytest.raises(Unavailable, match="widget library is missing"):
        v.kernel()
    installed.append(1)  # the environment changed: the variant is asked again, not its old answer kept
    assert v.availability() is None and v.kernel() is torch.softmax


@pytest.mark.parametrize(("pattern", "short_names"), [
    ("fused", ["fused"]), ("*fused*", ["fused"]), ("triton.*", ["fused", "persistent"]),
    ("fused,persistent", ["fused", "persistent"]), ("nothing", []),
])
def test_names_match_with_or_without_the_backend(scratch, pattern, short_names):
    for name in ("triton.fused", "triton.persistent", "torch.fusedish"):
        register(make_variant(name=name, backend=name.split(".")[0]))
    got = [v.name for v in variants(scratch, patterns=[pattern]) if v.backend == "triton"]
    assert got == [f"triton.{n}" for n in short_names]


def test_skip_removes_matching_variants(scratch):
    for name in ("triton.fused", "triton.persistent"):
        register(make_variant(name=name, backend="triton"))
    assert [v.name for v in variants(scratch, skip=["persistent"])] == ["triton.fused"]


def test_kernel_is_built_once_unless_per_shape():
    calls = []

    def build():
        calls.append(1)
        return torch.softmax

    cached = make_variant(build=build)
    assert cached.kernel() is cached.kernel() is torch.softmax
    assert len(calls) == 1
    calls.clear()
    per_shape = make_variant(build=build, per_shape=True)
    per_shape.kernel()
    per_shape.kernel()
    assert len(calls) == 2


def test_build_errors_other_than_unavailable_propagate():
    def build():
        raise RuntimeError("a bug in the build")

    with pytest.raises(RuntimeError, match="a bug in the build"):
        make_variant(build=build).availability()


@pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")
def test_torch_variants_run_here():
    for v in variants(backends=["torch"]):
        assert v.runs_on_cpu
        reason = v.availability()
        # Only a feature that this torch build lacks (TorchScript) may keep one from running.
        assert reason is None or f"is not available in torch {torch.__version__}" in reason, (v.name, reason)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
def test_cuda_variants_without_gpu_say_why():
    for v in variants(backends=["cuda"]):
        assert not v.runs_on_cpu
        reason = v.availability()
        assert reason is not None and ("needs a GPU" in reason or "not built" in reason), reason
        with pytest.raises(Unavailable):
            v.kernel()


def test_dtype_name():
    assert [registry.dtype_name(d) for d in registry.ALL_DTYPES] == ["float32", "float16", "bfloat16"]
