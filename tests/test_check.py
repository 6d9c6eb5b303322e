"""The checker (lab/check.py) must pass torch.softmax and catch every kind of wrong variant."""

import math

import pytest
import torch

from lab import check, inputs
from lab.inputs import Shape
from lab.operators.softmax import SOFTMAX

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["float32", "float16", "bfloat16"]
SHAPE = Shape(6, 100)


def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


@pytest.fixture
def x() -> torch.Tensor:
    return inputs.make_input(SHAPE, torch.float32, "cpu")


def assert_fails(res: check.CheckResult, *words: str) -> None:
    assert not res.ok, res.summary()
    assert res.summary().startswith("FAIL")
    for word in words:
        assert word in res.message, f"{word!r} not in {res.message!r}"


# --- planted wrong variants ---------------------------------------------------------------------


def test_catches_unwritten_element(x):
    def skips_last_column(x, out):
        out[:, :-1] = softmax(x)[:, :-1]
        return out

    assert_fails(check.check(skips_last_column, x, writes_out=True), "NaN", "unwritten", "col 99")


def test_catches_unwritten_row(x):
    def skips_last_row(x, out):
        out[:-1] = softmax(x[:-1])
        return out

    assert_fails(check.check(skips_last_row, x, writes_out=True), "NaN", f"row {SHAPE.m - 1}")


def test_catches_output_never_written(x):
    assert_fails(check.check(lambda x, out: out, x, writes_out=True), "unwritten")


@pytest.mark.parametrize("row", [0, 3, 5])
def test_catches_one_row_wrong_by_one_percent(x, row):
    def wrong_row(x):
        y = softmax(x)
        y[row] *= 1.01
        return y

    assert_fails(check.check(wrong_row, x, writes_out=False), f"row {row},")


def test_names_the_special_row_that_is_wrong():
    x, labels = inputs.special_input(33, torch.float32, "cpu")
    row = labels.index("1e4 magnitudes")

    def wrong_row(x):
        y = softmax(x)
        y[row] *= 0.99
        return y

    res = check.check(wrong_row, x, writes_out=False, row_labels=labels)
    assert_fails(res, f"row {row} (1e4 magnitudes)")


def test_catches_small_error_everywhere(x):
    """Every element off by three times the float32 rtol (the one for x's device) is caught: the
    tolerance is not loose."""
    rtol = SOFTMAX.tolerances_for(x.device)[torch.float32].rtol
    res = check.check(lambda x: softmax(x) * (1 + 3 * rtol), x, writes_out=False)
    assert_fails(res)
    assert 1 < res.worst_ratio < 5


def test_accepts_error_within_tolerance(x):
    res = check.check(lambda x: softmax(x) * (1 + 1e-6), x, writes_out=False)
    assert res.ok, res.summary()
    assert 0 < res.worst_ratio < 1


def test_catches_nan(x):
    def one_nan(x):
        y = softmax(x)
        y[2, 7] = math.nan
        return y

    assert_fails(check.check(one_nan, x, writes_out=False), "NaN", "row 2", "col 7")


def test_catches_inf(x):
    def one_inf(x):
        y = softmax(x)
        y[1, 3] = math.inf
        return y

    assert_fails(check.check(one_inf, x, writes_out=False), "row 1", "col 3")


def test_catches_zeros_for_an_all_minus_inf_row():
    """A 'safe' kernel that writes 0 for an all -inf row differs from torch (NaN): it fails."""
    x, labels = inputs.special_input(7, torch.float32, "cpu")
    row = labels.index("all -inf")

    def safe(x):
        return torch.where((x == -math.inf).all(dim=-1, keepdim=True), 0.0, softmax(x))

    assert_fails(check.check(safe, x, writes_out=False, row_labels=labels), f"row {row} (all -inf)", "NaN")


@pytest.mark.parametrize(
    ("wrong", "words"),
    [
        pytest.param(lambda x: softmax(x)[:, :-1], ("output shape", "(6, 99)", "(6, 100)"), id="narrow"),
        pytest.param(lambda x: softmax(x).t(), ("output shape", "(100, 6)"), id="transposed"),
        pytest.param(lambda x: softmax(x).reshape(-1), ("output shape",), id="flat"),
        pytest.param(lambda x: softmax(x.double()), ("output dtype", "torch.float64"), id="float64"),
        pytest.param(lambda x: softmax(x).half(), ("output dtype", "torch.float16"), id="float16"),
    ],
)
def test_catches_wrong_shape_or_dtype(x, wrong, words):
    assert_fails(check.check(wrong, x, writes_out=False), *words)


def test_catches_wrong_dtype_on_half_input():
    x = inputs.make_input(SHAPE, torch.float16, "cpu")
    res = check.check(lambda x: softmax(x.float()), x, writes_out=False)
    assert_fails(res, "output dtype", "torch.float32")


def test_catches_a_variant_that_raises(x):
    def raises(x):
        raise RuntimeError("boom: illegal memory access\nsecond line of the trace")

    res = check.check(raises, x, writes_out=False)
    assert_fails(res, "raised RuntimeError: boom: illegal memory access")
    assert "second line" not in res.message
    assert res.worst_ratio == math.inf


def test_catches_a_variant_that_raises_with_out(x):
    def raises(x, out):
        raise ValueError("rows too long")

    assert_fails(check.check(raises, x, writes_out=True), "raised ValueError: rows too long")


# --- the poisoned output ------------------------------------------------------------------------


def test_run_variant_passes_a_poisoned_out(x):
    seen = {}

    def kernel(x, out):
        seen["all_nan"] = bool(out.isnan().all())
        seen["like_x"] = (out.shape, out.dtype, out.device) == (x.shape, x.dtype, x.device)
        out.copy_(softmax(x))
        return out

    y = check.run_variant(kernel, x, writes_out=True)
    assert seen == {"all_nan": True, "like_x": True}
    torch.testing.assert_close(y, softmax(x))


def test_run_variant_rejects_another_tensor(x):
    def fresh_tensor(x, out):
        return softmax(x)

    with pytest.raises(RuntimeError, match="did not return the `out` tensor"):
        check.run_variant(fresh_tensor, x, writes_out=True)
    assert_fails(check.check(fresh_tensor, x, writes_out=True), "did not return the `out` tensor")


def test_run_variant_accepts_a_view_of_out(x):
    def returns_view(x, out):
        out.copy_(softmax(x))
        return out.view(out.shape)

    assert check.check(returns_view, x, writes_out=True).ok


def test_run_variant_without_out_calls_kernel_with_x_only(x):
    calls = []

    def kernel(*args):
        calls.append(len(args))
        return softmax(args[0])

    check.run_variant(kernel, x, writes_out=False)
    assert calls == [1]


# --- torch.softmax passes -----------------------------------------------------------------------

CPU_EDGE = [s for s in inputs.EDGE_SHAPES if s.n <= inputs.CPU_EDGE_MAX_N]


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", CPU_EDGE, ids=lambda s: s.label)
def test_torch_softmax_passes_edge_shapes(shape, dtype):
    x = inputs.make_input(shape, dtype, "cpu")
    res = check.check(softmax, x, writes_out=False)
    assert res.ok, res.summary()
    assert res.worst_ratio <= 1 and res.rel_norm <= SOFTMAX.tolerances[dtype].norm_tol


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("n", inputs.SPECIAL_NS, ids=lambda n: f"N={n}")
def test_torch_softmax_passes_special_rows(n, dtype):
    x, labels = inputs.special_input(n, dtype, "cpu")
    y = softmax(x)
    ref = SOFTMAX.reference(x)
    assert torch.equal(y.isnan(), ref.isnan()), "NaN exactly where torch's float64 softmax has NaN"
    res = check.compare(y, ref, dtype, labels)
    assert res.ok, res.summary()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_torch_softmax_passes_with_out(dtype):
    x = inputs.make_input(SHAPE, dtype, "cpu")
    res = check.check(lambda x, out: torch.softmax(x, dim=-1, out=out), x, writes_out=True)
    assert res.ok, res.summary()


# --- compare and the tolerance table ------------------------------------------------------------


def test_compare_empty_batch():
    x = torch.empty(0, 7)
    res = check.compare(x, SOFTMAX.reference(x), torch.float32)
    assert res.ok and res.worst_ratio == 0


def test_compare_uses_the_given_reference(x):
    wrong_ref = SOFTMAX.reference(x) * 1.5
    assert not check.check(softmax, x, writes_out=False, ref=wrong_ref).ok


def test_compare_rounding_to_dtype_passes():
    """The float64 reference rounded to each dtype is within tolerance (half an ulp)."""
    for dtype in DTYPES:
        x = inputs.make_input(Shape(8, 1000), dtype, "cpu")
        ref = SOFTMAX.reference(x)
        res = check.compare(ref.to(dtype), ref, dtype)
        assert res.ok and res.worst_ratio < 0.5, (dtype, res.summary())


def test_tolerances_cover_every_dtype():
    assert set(SOFTMAX.tolerances) == set(DTYPES)
    text = check.describe_tolerances(SOFTMAX.tolerances)
    for name in DTYPE_IDS:
        assert name in text


def test_summary():
    assert check.CheckResult(True, 0.25, 1e-7).summary().startswith("ok (worst 0.25 of tolerance")
    assert check.CheckResult(False, 3.0, 1e-2, ": details").summary().endswith(": details")


def test_float16_subnormal_probabilities_rounded_right_pass_and_one_step_off_fails():
    """Found by the randomized testing on the H200: a float16 row of 232737 equal values has
    probabilities of 72.09 subnormal steps; every variant (torch.softmax too) rounds them to 72, a
    norm error of 1.2e-3 that no kernel can avoid, above the flat norm tolerance 1e-3. The norm
    allowance includes that rounding; a result one step off is still caught."""
    n = 232737
    ref = torch.full((1, n), 1.0 / n, dtype=torch.float64)
    exact_rounding = ref.to(torch.float16)
    assert check.compare(exact_rounding, ref, torch.float16).ok
    step = torch.finfo(torch.float16).smallest_normal * torch.finfo(torch.float16).eps
    assert not check.compare((exact_rounding.double() + step).half(), ref, torch.float16).ok


def test_results_below_float32s_smallest_normal_may_be_flushed_in_float32_and_bfloat16_only():
    """Found by the randomized testing on the H100: the CUDA cross-entropy kernel's gradient of 2e-44 (float32) and
    6e-39 (bfloat16) came out 0, its exponential flushing denormals, in rows whose atol was 1.4e-45 and 9e-41. Such
    results may be 0; an error above float32's smallest normal in the same row is still caught, and float16's
    subnormals (from 6e-8) are held to their own grid."""
    tiny = torch.finfo(torch.float32).smallest_normal
    ref = torch.tensor([[0.5, 0.25, 0.25], [1.4e-38, 2.2e-44, 3e-39]], dtype=torch.float64)  # a row all but flushed
    for dtype in (torch.float32, torch.bfloat16):
        flushed = ref.clone()
        flushed[1, 1:] = 0.0
        assert check.compare(flushed.to(dtype), ref, dtype).ok, dtype
        off = ref.clone()
        off[1, 0] += 4 * tiny
        assert not check.compare(off.to(dtype), ref, dtype).ok, dtype
    step = torch.finfo(torch.float16).smallest_normal * torch.finfo(torch.float16).eps
    sub = torch.tensor([[1e-3, 40 * step]], dtype=torch.float64)
    assert not check.compare(torch.tensor([[1e-3, 0.0]], dtype=torch.float16), sub, torch.float16).ok


def test_float32_tolerance_grows_with_the_summed_row_length_only_for_row_sums():
    """A float32 sum of N terms errs by about 2^-24 * sqrt(N): at N = 2^20 a uniform 3e-5 relative error
    (torch.softmax itself showed 1.1e-5 in norm) passes, 2e-4 fails; vector add sums nothing and
    keeps its flat tolerance."""
    n = 2**20
    ref = torch.softmax(torch.randn(1, n, dtype=torch.float64), -1)
    assert check.compare((ref * (1 + 3e-5)).float(), ref, torch.float32).ok
    assert not check.compare((ref * (1 + 2e-4)).float(), ref, torch.float32).ok
    from lab.operators import get

    add = get("vector_add").tolerances
    assert add[torch.float32].for_row_length(n) == (add[torch.float32].rtol, add[torch.float32].norm_tol)
    assert SOFTMAX.tolerances[torch.float32].for_row_length(4) < SOFTMAX.tolerances[torch.float32].for_row_length(n)


def test_an_answer_the_dtype_cannot_hold_does_not_widen_the_norm_allowance():
    """The rounding allowance leaves out elements whose exact value overflows the dtype: an overflow
    there would be an infinite allowance, and the norm check would pass anything."""
    ref = torch.tensor([[1.0, 2.0, 1e6, 3.0]], dtype=torch.float64)  # 1e6 overflows float16
    y = torch.tensor([[1.0, 2.0, 65504.0, 3.5]], dtype=torch.float16)
    res = check.compare(y, ref, torch.float16, tolerances={torch.float16: check.Tolerance(1.0, 0.0, 1e-3)})
    assert not res.ok and math.isfinite(res.rel_norm)


def test_an_answer_beyond_the_dtype_is_the_infinity_it_rounds_to():
    """Where the exact answer lies beyond the output dtype's largest finite value (a float16 gradient summed over many
    tokens: -73062.8), the one answer the dtype holds is the infinity it rounds to: that infinity passes; the other
    one, a finite value (saturated at 65504) and NaN fail. A value that rounds down to the largest stays finite."""
    ref = torch.tensor([[1.0, 2.0, -73062.8, 65510.0]], dtype=torch.float64)
    tolerances = {torch.float16: check.Tolerance(4e-3, 1e-3, 1e-3)}

    def compare(third: float, fourth: float = 65504.0) -> bool:
        y = torch.tensor([[1.0, 2.0, third, fourth]], dtype=torch.float16)
        return check.compare(y, ref, torch.float16, tolerances=tolerances).ok

    assert compare(-math.inf)
    assert not compare(math.inf) and not compare(-65504.0) and not compare(math.nan)
    assert not compare(-math.inf, math.inf), "65510 rounds to 65504 in float16, not to infinity"


def _compare_cases():
    """Outputs that pass, fail by one element in a late row, fail by NaN/inf placement, and pass only
    through the norm's rounding allowance, with their references."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(9, 37, generator=gen)
    ref = SOFTMAX.reference(x)
    good = ref.float()
    late = good.clone()
    late[7, 30] *= 1.01
    late[8, 2] *= 1.001  # smaller, after the worst: the message must still name row 7
    holes = good.clone()
    holes[5, 3], holes[6, 0] = math.nan, math.inf
    specials, labels = inputs.special_input(41, torch.float32, "cpu")
    n = 232737  # float16 subnormal probabilities: passes only through the rounding allowance
    tiny = torch.full((3, n), 1.0 / n, dtype=torch.float64)
    return [(good, ref, torch.float32, None), (late, ref, torch.float32, None), (holes, ref, torch.float32, None),
            (softmax(specials), SOFTMAX.reference(specials), torch.float32, labels),
            (tiny.to(torch.float16), tiny, torch.float16, None)]


@pytest.mark.parametrize("block", [1, 37, 40, 100])
def test_compare_in_row_blocks_gives_the_verdict_of_one_block(monkeypatch, block):
    """compare() works through the output in row blocks of CHUNK_ELEMENTS (so that a check of 2^30
    elements fits an 80 GB GPU): the verdict, the worst ratio, the norm and the message are those of
    the whole output at once, whichever block holds the worst element."""
    whole = [check.compare(y, ref, dtype, labels) for y, ref, dtype, labels in _compare_cases()]
    assert [r.ok for r in whole] == [True, False, False, True, True]
    monkeypatch.setattr(check, "CHUNK_ELEMENTS", block)
    for (y, ref, dtype, labels), one in zip(_compare_cases(), whole, strict=True):
        res = check.compare(y, ref, dtype, labels)
        assert (res.ok, res.message) == (one.ok, one.message)
        assert res.worst_ratio == one.worst_ratio
        assert res.rel_norm == pytest.approx(one.rel_norm, rel=1e-12)
    assert "row 7, col 30" in whole[1].message and "2 element(s) NaN or infinite" in whole[2].message


# An operator of two outputs, as a loss and its gradient are: a float32 scalar (the mean log-sum-exp of the rows)
# and a tensor of the input's dtype (the softmax, its gradient), each checked against its own reference.
def _two_output_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x64 = x.double()
    return torch.logsumexp(x64, -1).mean(), torch.softmax(x64, -1)


def _two_output_operator():
    from dataclasses import replace

    return replace(SOFTMAX, name="lse_and_softmax", reference=_two_output_reference,
                   output_dtypes=lambda dtype: (torch.float32, dtype), output_names=("lse", "softmax"))


def _right(x, out=None):
    lse, y = torch.logsumexp(x.float(), -1).mean(), torch.softmax(x, -1)
    if out is None:
        return lse, y
    out[0].copy_(lse)
    out[1].copy_(y)
    return out


def test_an_operator_of_two_outputs_checks_each_against_its_own_reference():
    op = _two_output_operator()
    x = inputs.make_input(Shape(8, 100), torch.bfloat16, "cpu", 1)
    assert check.check(_right, x, False, op=op).ok
    assert check.check(_right, x, True, op=op).ok
    wrong_lse = check.check(lambda t: (_right(t)[0] * 1.01, _right(t)[1]), x, False, op=op)
    assert not wrong_lse.ok and "; lse: worst" in wrong_lse.message and "softmax" not in wrong_lse.message

    def softmax_unwritten(t, out):
        out[0].copy_(_right(t)[0])
        return out

    unwritten = check.check(softmax_unwritten, x, True, op=op)
    assert not unwritten.ok and "; softmax: worst" in unwritten.message
    lse_in_bf16 = check.check(lambda t: (_right(t)[0].bfloat16(), _right(t)[1]), x, False, op=op)
    assert not lse_in_bf16.ok and "output dtype torch.bfloat16, expected torch.float32" in lse_in_bf16.message
    one_output = check.check(lambda t: _right(t)[1], x, False, op=op)
    assert not one_output.ok and "1 output(s), expected 2" in one_output.message


def test_the_outputs_given_are_poisoned_and_of_the_operators_dtypes():
    op = _two_output_operator()
    x = inputs.make_input(Shape(4, 16), torch.float16, "cpu", 2)
    seen = []

    def record(t, out):
        seen.append([(o.dtype, tuple(o.shape), bool(o.isnan().all())) for o in out])
        return _right(t, out)

    check.check(record, x, True, op=op)
    assert seen == [[(torch.float32, (), True), (torch.float16, (4, 16), True)]]


def test_framework_bound_takes_twice_pytorchs_error():
    ref = torch.linspace(-1, 1, 101, dtype=torch.float64)
    tol = check.Tolerance(rtol=1e-2, atol_rel=1e-6, norm_tol=1e-2)
    framework = ref + 1e-4 * torch.sin(ref * 7)
    error = (framework - ref).abs().max()
    at = int((framework - ref).abs().argmax())
    for factor, ok in ((1.5, True), (2.5, False)):
        y = ref.clone()
        y[at] += factor * error
        assert check.framework_bound(y, framework, ref, tol).ok is ok, factor


def test_framework_bound_over_recipes_takes_the_larger_finite_error():
    """PyTorch's results by several recipes: twice the larger of their errors is the bar; a recipe whose result is NaN
    where the reference is finite does not set it (it is no error PyTorch's other recipe makes)."""
    ref = torch.linspace(-1, 1, 101, dtype=torch.float64)
    tol = check.Tolerance(rtol=1e-2, atol_rel=1e-6, norm_tol=1e-2)
    close, far = ref + 1e-4, ref + 3e-4
    y = ref + 5e-4  # 5x the closer recipe's error, under twice the farther's
    assert not check.framework_bound(y, close, ref, tol).ok
    assert check.framework_bound(y, [close, far], ref, tol).ok
    broken = far.clone()
    broken[3] = float("nan")
    assert not check.framework_bound(y, [close, broken], ref, tol).ok
    assert check.framework_bound(y, [broken], ref, tol).ok  # no recipe with a finite error: no bar, as before


def test_the_framework_bounds_floor_is_of_the_error_scale_where_the_operator_has_one():
    """A reference of zeros that PyTorch computes exactly (a soft-capped row of one logit: loss and gradient 0) and
    a result a float32 ulp of its scale off: the floor of |ref| is 0 and fails it, the floor of the scale passes it;
    an error of a hundredth of the scale still fails."""
    ref = torch.zeros(4, dtype=torch.float64)
    scale = torch.full((4,), 1.5, dtype=torch.float64)
    tol = check.Tolerance(rtol=1e-2, atol_rel=1e-5, norm_tol=1e-2)
    y = ref + 2.0**-23
    assert not check.framework_bound(y, ref.clone(), ref, tol).ok
    assert check.framework_bound(y, ref.clone(), ref, tol, scale).ok
    assert not check.framework_bound(ref + 1.5e-2, ref.clone(), ref, tol, scale).ok


def test_the_framework_bounds_floor_takes_one_rounding_of_a_16_bit_output():
    """PyTorch's bfloat16 result 0.01 from the exact 12.01, ours the other neighbour (0.0525 off, within an ulp: a
    result of sums in another order): it passes in bfloat16 (floor 2^-8 * 12.01 = 0.047, three quarters of an ulp
    there), where atol_rel's floor alone (0.012) would fail it; two neighbours off still fail, and a float32 output
    keeps atol_rel's."""
    ref = torch.tensor([12.01, -3.0, 0.5], dtype=torch.float64)
    tol = check.Tolerance(rtol=3e-2, atol_rel=1e-3, norm_tol=8e-3)
    theirs = ref.bfloat16()  # 12.0: 0.01 off
    ours = torch.tensor([12.0625, -3.0, 0.5], dtype=torch.bfloat16)  # the other neighbour (an ulp is 1/16 there)
    assert check.framework_bound(ours, theirs, ref, tol).ok  # 0.0525 <= 2 * 0.01 + 12.01 / 256
    assert not check.framework_bound(torch.tensor([12.125, -3.0, 0.5], dtype=torch.bfloat16), theirs, ref, tol).ok
    assert not check.framework_bound(ours.float(), theirs.float(), ref, tol).ok  # 0.0525 > 2 * 0.01 + 0.012


def test_a_low_precision_result_is_held_to_pytorchs_own_error():
    """In 16-bit dtypes a result within the tolerance still fails past twice PyTorch's own error (here PyTorch's
    stand-in is exact, so the bound is the floor, one rounding of the largest value: a result an ulp high fails it);
    in float32 the float64 tolerance alone decides."""
    from dataclasses import replace

    op = replace(_two_output_operator(), framework_result=lambda t: tuple(r.to(d) for r, d in zip(
        _two_output_reference(t), (torch.float64, torch.float64), strict=True)))
    x = inputs.make_input(Shape(8, 100), torch.bfloat16, "cpu", 5)

    def an_ulp_high(x):  # the largest value, positive, the next bfloat16 up
        lse, y = _right(x)
        y.view(torch.int16).view(-1)[int(y.float().argmax())] += 1
        return lse, y

    res = check.check(an_ulp_high, x, False, op=op)
    assert not res.ok and "more than 2x PyTorch's own" in res.message, res.summary()
    assert check.check(_right, x.float(), False, op=op).ok


def test_a_kernel_that_overwrites_its_input_gets_a_copy_to_overwrite(x):
    """A kernel that writes over its first input (Liger's cross-entropy) is checked on a copy, so the caller's input
    is still what the reference saw, and timed on one copy per point, made outside the timed calls."""
    from lab import bench

    def overwriting(x):
        y = softmax(x)
        x.copy_(y)
        return x

    overwriting.overwrites_input = True
    before = x.clone()
    assert check.check(overwriting, x, writes_out=False).ok
    assert torch.equal(x, before), "the checker's input is left as it was"
    call = bench.timed_call(overwriting, (x,), False, lambda: None)
    call()
    assert torch.equal(x, before), "the timed calls overwrite their own copy"


def test_a_points_memo_computes_the_scale_and_pytorchs_result_once_for_its_variants():
    """Variants checked at one point share a memo: the operator's error scale and PyTorch's own result are computed
    for the first and reused by the rest (the same bars)."""
    from dataclasses import replace

    calls = []
    base = _two_output_operator()

    def counted(name, f):
        def g(*a):
            calls.append(name)
            return f(*a)
        return g

    op = replace(base, error_scale=counted("scale", lambda t: tuple(r.abs() for r in _two_output_reference(t))),
                 framework_result=counted("framework", _right))
    x = inputs.make_input(Shape(8, 100), torch.bfloat16, "cpu", 5)
    memo = {}
    results = [check.check(_right, x, False, op=op, memo=memo) for _ in range(3)]
    assert all(r.ok for r in results) and sorted(calls) == ["framework", "scale"]
    check.check(_right, x, False, op=op)
    assert len(calls) == 4  # without a memo, each check computes its own


def test_a_reference_of_zeros_takes_the_floor_from_the_error_scale():
    """Gradients floored by |ref| (framework_floor_from_scale False) whose reference is 0 everywhere (a vocabulary
    of one class: every gradient exactly 0): a float32 rounding of the scale passes, where |ref|'s floor of 0 fails
    it; an error of a hundredth of the scale still fails; a reference not all 0 keeps |ref|'s floor."""
    ref = torch.zeros(4, dtype=torch.float64)
    scale = torch.full((4,), 1.5, dtype=torch.float64)
    tol = check.Tolerance(rtol=1e-2, atol_rel=1e-5, norm_tol=1e-2)
    y = ref + 2.0**-23
    assert not check.framework_bound(y, ref.clone(), ref, tol).ok
    assert check.framework_bound(y, ref.clone(), ref, tol, zero_ref_scale=scale).ok
    assert not check.framework_bound(ref + 1.5e-2, ref.clone(), ref, tol, zero_ref_scale=scale).ok
    nonzero = torch.tensor([1.0, 0, 0, 0], dtype=torch.float64)  # |ref|'s floor: 1e-5; the scale's would be 1.5e-5
    assert not check.framework_bound(nonzero + 1.2e-5, nonzero.clone(), nonzero, tol, zero_ref_scale=scale).ok
