"""Gradients through the lab's softmax: every Triton entry (under the interpreter here), every CUDA op
and lab.softmax (on a GPU) give torch's gradient, out= calls refuse to hide a missing gradient, and a
small attention block trains step for step like the same block with torch.softmax."""

import pytest
import torch

from lab import check, operators, ops
from lab.backends import cuda_variants
from lab.inputs import Shape, make_input, special_input
from lab.registry import variants

BACKWARD = operators.get("softmax_backward")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def own_softmax_entries():
    """The lab's differentiable forward entries that can run here: Triton (interpreted without a GPU),
    CUDA ops with a GPU."""
    return [v for v in variants("softmax", backends=["triton", "cuda"])
            if v.unavailable_on(DEVICE) is None]


def grad_of(forward, x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    x = x.detach().clone().requires_grad_()
    y = forward(x)
    assert y.grad_fn is not None, "no gradient recorded"
    y.backward(dy)
    return x.grad


def cases(dtype):
    yield "3x37", make_input(Shape(3, 37), dtype, DEVICE, 1)
    yield "2x1000/1040", make_input(Shape(2, 1000, 1040), dtype, DEVICE, 2)
    x, labels = special_input(33, dtype, DEVICE, 3)
    yield "special rows", x


@pytest.mark.parametrize("v", own_softmax_entries(), ids=lambda v: v.name)
def test_gradient_matches_torch(v):
    dtype = torch.float32
    kernel = v.kernel()
    for label, x in cases(dtype):
        if v.skip_reason(Shape.of(x), dtype):
            continue
        dy = torch.randn(x.shape, dtype=dtype, device=DEVICE)
        y64 = torch.softmax(x.double(), -1)
        ref = BACKWARD.reference(y64, dy)
        got = grad_of(lambda t: kernel(t), x, dy)
        res = check.compare(got, ref, dtype, None, BACKWARD.tolerances, BACKWARD.error_scale(y64, dy))
        assert res.ok, f"{v.name} {label}: {res.summary()}"


@pytest.mark.parametrize("v", own_softmax_entries(), ids=lambda v: v.name)
def test_out_call_on_a_tensor_that_requires_grad_raises(v):
    x = make_input(Shape(2, 16), torch.float32, DEVICE).requires_grad_()
    with pytest.raises(RuntimeError, match="cannot be differentiated|out="):
        v.kernel()(x, torch.empty(2, 16, device=DEVICE))


def compiled_ops():
    """(operator, torch.ops.lab name) of every op the built extension registers (none without lab._C)."""
    try:
        cuda_variants.load_extension()
    except Exception:
        return []
    pairs = [(op, cuda_variants.torch_op(op, v)) for op, vs in cuda_variants.CUDA_OPS.items() for v in vs
             if op != "cross_entropy"]  # out-only ops of their own schema: tests/test_cuda_compile.py
    return [(op, name) for op, name in [*pairs, ("softmax", cuda_variants.AUTO_OP)] if hasattr(torch.ops.lab, name)]


@pytest.mark.parametrize(("operator", "name"), compiled_ops(), ids=[name for _, name in compiled_ops()])
def test_every_op_without_a_backward_refuses_a_tensor_that_requires_grad(operator, name):
    """Each .out overload, and each op that has no backward (the other operators'), raises a clear error
    on an input that requires grad, CPU or GPU (the refusal comes before the device check); a
    differentiable functional op records a gradient instead (the GPU tests above)."""
    op = getattr(torch.ops.lab, name)
    xs = list(operators.get(operator).make_inputs(Shape(1, 16), torch.float32, DEVICE, 0))
    xs[0].requires_grad_()
    with pytest.raises(RuntimeError, match=f"lab::{name}.out cannot be differentiated.*out="):
        op.out(*xs, out=torch.empty_like(xs[0]))
    if name not in (*cuda_variants.CUDA_VARIANTS, cuda_variants.AUTO_OP):
        with pytest.raises(RuntimeError, match=f"lab::{name} cannot be differentiated.*no backward"):
            op(*xs)
    with torch.no_grad():  # without grad mode the refusal steps aside: the op runs (or says why it cannot)
        try:
            y = torch.empty_like(xs[0])
            assert op.out(*xs, out=y) is None and not y.requires_grad
        except RuntimeError as e:
            assert DEVICE == "cpu" and "expected a CUDA tensor" in str(e), e


class TinyAttention(torch.nn.Module):
    """One self-attention block (a single head) and a linear read-out, with a pluggable softmax."""

    def __init__(self, softmax, d: int = 16):
        super().__init__()
        self.softmax = softmax
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
        attn = self.softmax(scores.reshape(-1, scores.shape[-1])).reshape(scores.shape)
        return self.out(attn @ v).mean()


def train(softmax, steps: int = 5, tokens: int = 8, compiled: bool = False) -> list[float]:
    """The losses of `steps` SGD steps of TinyAttention over `tokens` tokens (the softmax's row length);
    compiled: the model under torch.compile(fullgraph=True), forward and backward."""
    torch.manual_seed(0)
    model = TinyAttention(softmax).to(DEVICE)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(2, tokens, 16, device=DEVICE)
    run = torch.compile(model, fullgraph=True) if compiled else model
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = (run(x) - 1.0) ** 2
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_small_model_trains_like_torch():
    """The Triton fused entry (interpreted here; compiled on a GPU) in place of torch.softmax."""
    from triton_kernels.fused import softmax_fused

    expected = train(lambda s: torch.softmax(s, -1))
    got = train(softmax_fused)
    assert got == pytest.approx(expected, rel=1e-4, abs=1e-7)
    assert expected[-1] < expected[0], "the block should learn something in five steps"


@pytest.mark.gpu
def test_small_model_trains_with_lab_softmax_like_torch():
    import lab

    expected = train(lambda s: torch.softmax(s, -1))
    assert train(lab.softmax) == pytest.approx(expected, rel=1e-4, abs=1e-7)


def test_naive_composition_gradient_on_a_long_row_of_near_equal_values():
    """Found by the randomized testing (case 5240 of seed 0, 3 x 32767 float32 of tiny values): autograd
    through the max of the naive composition put the rounding of the row's gradient sum on the max
    element (2.7x the tolerance there, up to 120x on longer rows); the max is detached, as its
    derivative is zero."""
    from lab import fuzz

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 32767, generator=g) * torch.finfo(torch.float32).tiny
    for v in variants("softmax", patterns=["torch.naive", "torch.jit_naive"]):
        assert fuzz.gradient_mismatch(v.kernel(), x, seed=5) is None, v.name


def test_the_cuda_ops_backward_is_the_one_measured_fastest_for_the_row_length():
    """Short rows to cuda.register_cached, medium ones to the Triton backward, long ones to cuda.cluster where
    the GPU has thread-block clusters, else to cuda.two_pass (on a GPU with lab._C built); the Triton backward on
    the CPU."""
    if not compiled_ops():
        pytest.skip("lab._C is not built")
    choice = ops.backward_choice
    assert [choice(n, True, (9, 0)) for n in (1, 256, 257, 16384, 16385, 2**20)] == [
        "softmax_backward_register_cached", "softmax_backward_register_cached", "triton", "triton",
        "softmax_backward_cluster", "softmax_backward_cluster"]
    assert [choice(n, True, (8, 0)) for n in (16384, 16385, 2**20)] == [
        "triton", "softmax_backward_two_pass", "softmax_backward_two_pass"]
    assert {choice(n, False) for n in (1, 300, 2**20)} == {"triton"}
    y = torch.softmax(torch.randn(3, 40, dtype=torch.float64), -1).to(DEVICE, torch.float32)
    dy = torch.randn(3, 1, device=DEVICE).expand(3, 40)  # strides (1, 0): made contiguous first
    got = ops.fastest_backward(y, dy)
    torch.testing.assert_close(got, torch._softmax_backward_data(dy, y, -1, y.dtype), rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens", [8, 300, 20000], ids=lambda t: f"{t}-tokens")
def test_compiled_attention_block_trains_like_eager(tokens):
    """A small attention block that uses lab.softmax, under torch.compile(fullgraph=True), trains step for step
    as the same block run eagerly: the compiled backward runs the lab's kernels (rows of 8 take the CUDA
    short-row backward, 300 the Triton one, 20000 the CUDA long-row one)."""
    import lab

    torch._dynamo.reset()
    eager = train(lab.softmax, tokens=tokens)
    assert train(lab.softmax, tokens=tokens, compiled=True) == pytest.approx(eager, rel=1e-4, abs=1e-7)
    assert eager[-1] < eager[0], "the block should learn something in five steps"


@pytest.mark.gpu
def test_compiled_backward_where_the_tables_backward_changes_kernel():
    """lab.softmax compiled with fullgraph=True, forward and backward, on both sides of every row length where this
    GPU model's table (backward_entries) changes the backward's kernel for a few rows: the gradient against
    float64. (trust's compiled-backward cell takes the thresholds of the rule without a table, for every variant.)"""
    from lab import dispatch, fuzz
    from lab.registry import get

    switches = dispatch.backward_switch_lengths(fuzz.BACKWARD_ROWS)
    if not switches:
        pytest.skip(f"no dispatch table with backward entries for {dispatch.current_gpu()}")
    v = get("softmax", "lab.auto")
    cases = [(d, n + side) for d in v.dtypes for n in switches for side in (0, 1)]
    assert fuzz.compiled_backward_mismatches(v, cases) == []


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", ["lab.auto", "cuda.auto"])
def test_compiled_backward_at_every_backward_threshold(name, dtype):
    """lab.softmax and torch.ops.lab.softmax compiled with fullgraph=True, forward and backward, on both sides of
    every row length where the lab's backward changes kernel: the gradient against float64 (the Triton backward,
    launched raw, once crashed AOTAutograd's fake-tensor trace from N = 257 to 16384)."""
    from lab import fuzz
    from lab.registry import get

    v = get("softmax", name)
    cases = [(d, n) for d, n in fuzz.backward_cases(v) if d == dtype]
    assert {n for _, n in cases} == set(fuzz.backward_row_lengths()), "the entry takes every row length"
    assert fuzz.compiled_backward_mismatches(v, cases) == []


@pytest.mark.gpu
def test_triton_backward_op_passes_opcheck():
    import triton_kernels.autograd  # noqa: F401  registers the op

    for n in (300, 16385):
        y = torch.softmax(torch.randn(3, n, device="cuda"), -1)
        torch.library.opcheck(torch.ops.lab_triton.softmax_backward.default, (y, torch.randn_like(y)))


def test_triton_backward_op_on_both_sides_of_its_fused_limit():
    """torch.ops.lab_triton.softmax_backward (interpreted here): the fused kernel up to MAX_N, the looped one
    beyond, an upstream gradient of strides 0 (a sum's), and empty rows."""
    from triton_kernels.autograd import softmax_backward
    from triton_kernels.softmax_backward import MAX_N

    for n in (MAX_N, MAX_N + 1):
        y = torch.softmax(torch.randn(2, n, dtype=torch.float64, device=DEVICE), -1)
        dy = torch.randn(2, n, dtype=torch.float64, device=DEVICE)
        got = softmax_backward(y.float(), dy.float())
        res = check.compare(got, BACKWARD.reference(y, dy), torch.float32, None, BACKWARD.tolerances_for(got.device),
                            BACKWARD.error_scale(y, dy))
        assert res.ok, f"N = {n}: {res.summary()}"
    y = torch.softmax(torch.randn(3, 40, device=DEVICE), -1)
    dy = torch.randn(3, 1, device=DEVICE).expand(3, 40)
    torch.testing.assert_close(softmax_backward(y, dy), torch._softmax_backward_data(dy, y, -1, y.dtype))
    assert softmax_backward(y[:0], y[:0]).shape == (0, 40)


EMPTY_SHAPES = [(0,), (5, 0), (0, 5), (5, 0, 0), (2, 0, 3), (0, 3, 4), (2, 3, 0, 4)]


def test_lab_softmax_views_any_rank_and_empty_tensors_as_rows():
    """lab.softmax's view of a tensor as rows (lab.along_rows), with torch's softmax of each 2-D block of rows in
    place of the GPU kernel: every rank and dim, empty tensors included, give torch.softmax's result and shape,
    and the kernel always sees 2-D rows of contiguous elements."""
    import lab

    def rows_softmax(rows):
        assert rows.dim() == 2 and (rows.shape[1] <= 1 or rows.stride(1) == 1), (rows.shape, rows.stride())
        return torch.softmax(rows, -1)

    for shape in [*EMPTY_SHAPES, (), (7,), (3, 5), (2, 3, 4), (2, 3, 4, 5)]:
        x = torch.randn(shape, dtype=torch.float64)
        for dim in range(-max(x.dim(), 1), max(x.dim(), 1)):
            got = lab.along_rows(x, dim, rows_softmax)
            assert got.shape == x.shape and got.dtype == x.dtype, (shape, dim)
            torch.testing.assert_close(got, torch.softmax(x, dim), msg=f"{shape} dim {dim}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_lab_softmax_of_empty_tensors(dtype):
    """Every empty shape, any rank, any dim: an empty result of the input's shape and dtype, and an empty gradient."""
    import lab

    for shape in EMPTY_SHAPES:
        for dim in range(-len(shape), len(shape)):
            x = torch.empty(shape, dtype=dtype, device="cuda", requires_grad=True)
            y = lab.softmax(x, dim)
            assert y.shape == x.shape and y.dtype == dtype and y.device == x.device, (shape, dim)
            (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
            assert g.shape == x.shape, (shape, dim)
