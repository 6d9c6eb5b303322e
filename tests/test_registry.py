"""The variant registry: what is registered, filters, the contract's checks and its skip reasons."""

import pytest
import torch

from lab import registry
from lab.registry import Traffic, Unavailable, Variant, register, variants

EXPECTED = (
    "torch.softmax", "torch.naive", "torch.jit_naive", "torch.compile",
    "triton.fused", "triton.persistent",
    "cuda.three_pass", "cuda.warp_shuffle", "cuda.online", "cuda.register_cached",
)
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


def test_all_variants_registered_in_backend_order():
    assert names(variants()) == list(EXPECTED)


def test_every_variant_is_described():
    for v in variants():
        assert v.op == "softmax"
        assert v.backend in registry.BACKENDS and v.name.startswith(f"{v.backend}.")
        assert v.description.strip(), v.name
        assert v.dtypes and set(v.dtypes) <= set(registry.ALL_DTYPES), v.name
        for dtype in registry.ALL_DTYPES:
            t = v.traffic_for(dtype)
            assert t.reads >= 1 and t.writes >= 1, (v.name, dtype, t)


@pytest.mark.parametrize(
    ("patterns", "backends", "expected"),
    [
        pytest.param(["cuda.*"], None, list(EXPECTED[6:]), id="glob-cuda"),
        pytest.param(["*.naive"], None, ["torch.naive"], id="glob-suffix"),
        pytest.param(["triton.fused", "torch.softmax"], None, ["torch.softmax", "triton.fused"],
                     id="two-names-in-backend-order"),
        pytest.param(["torch.soft*", "torch.softmax"], None, ["torch.softmax"], id="overlapping-globs-once"),
        pytest.param(None, ["triton"], ["triton.fused", "triton.persistent"], id="backend-triton"),
        pytest.param(None, ["cuda", "torch"], [*EXPECTED[:4], *EXPECTED[6:]], id="two-backends"),
        pytest.param(["*.online", "*.fused"], ["cuda"], ["cuda.online"], id="glob-and-backend"),
        pytest.param(["nothing.*"], None, [], id="no-match"),
        pytest.param(["TORCH.softmax"], None, [], id="case-sensitive"),
    ],
)
def test_filters(patterns, backends, expected):
    assert names(variants(patterns=patterns, backends=backends)) == expected


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
    assert v.skip_reason(10, torch.float32) is None
    assert v.skip_reason(10, torch.float16) == "float16 not supported"
    explained = make_variant(dtypes=(torch.float32,), dtype_reason="no 16-bit path yet")
    assert explained.skip_reason(10, torch.bfloat16) == "bfloat16 not supported: no 16-bit path yet"


def test_skip_reason_max_n():
    v = make_variant(max_n=1024)
    assert v.skip_reason(1024, torch.float32) is None
    assert v.skip_reason(1025, torch.float32) == "N > 1024"
    explained = make_variant(max_n=1024, max_n_reason="the row must fit in registers")
    assert explained.skip_reason(1025, torch.float32) == "N > 1024: the row must fit in registers"
    assert make_variant().skip_reason(2**31, torch.float32) is None


def test_skip_reason_of_registered_triton_variants():
    for v in variants(backends=["triton"]):
        assert v.skip_reason(65536, torch.float32) is None
        reason = v.skip_reason(65537, torch.float32)
        assert reason is not None and "65536" in reason and "registers" in reason


@pytest.mark.parametrize(
    ("reads", "writes", "fraction"),
    [(1, 1, 1.0), (3, 1, 0.5), (2, 1, 2 / 3), (5, 3, 0.25)],
    ids=["1R+1W", "3R+1W", "2R+1W", "5R+3W"],
)
def test_ceiling_fraction(reads, writes, fraction):
    assert Traffic(reads, writes).ceiling_fraction() == pytest.approx(fraction)


def test_traffic_per_dtype():
    naive = variants(patterns=["torch.naive"])[0]
    assert naive.traffic_for(torch.float32) == Traffic(5, 3)
    # 16-bit x: float32 temporaries weigh 2, plus the casts in and out.
    assert naive.traffic_for(torch.bfloat16) == Traffic(5 * 2 + 1 + 2, 3 * 2 + 2 + 1)
    assert variants(patterns=["cuda.online"])[0].traffic_for(torch.float16) == Traffic(2, 1)


def test_unavailable_variant_reports_its_reason():
    calls = []

    def build():
        calls.append(1)
        raise Unavailable("the widget library is missing")

    v = make_variant(build=build)
    assert v.availability() == "the widget library is missing"
    with pytest.raises(Unavailable, match="widget library is missing"):
        v.kernel()
    assert len(calls) == 1, "build is called once; the Unavailable is cached"


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


def test_torch_variants_run_here():
    for v in variants(backends=["torch"]):
        assert v.runs_on_cpu
        if v.name != "torch.jit_naive":  # TorchScript may be missing from a torch build
            assert v.availability() is None, v.name


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
