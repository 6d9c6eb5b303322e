"""The cross_entropy operator (lab/operators/cross_entropy.py) and its own kernels: the float64 reference is
PyTorch's semantics, the lab's kernels agree with it on the cases PyTorch's own float32 result gets right (and
where the lab defines what PyTorch leaves undefined), and bad input is a clear error naming the problem. The
Triton kernels run under the interpreter here, on a GPU there."""

import math

import pytest
import torch
import torch.nn.functional as F

from lab import check, operators, registry
from lab.inputs import Shape
from lab.operators.cross_entropy import DEFAULT, CrossEntropyOptions, reference
from lab.registry import variants

OP = operators.get("cross_entropy")
LOSS_OP = operators.get("cross_entropy_loss")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OWN = [v for v in variants("cross_entropy", backends=["triton", "cuda", "lab"]) if v.unavailable_on(DEVICE) is None]
KERNELS = [v for v in OWN if v.backend != "lab"]  # the kernels' own entries (lab.cross_entropy's errors: below)


def test_the_reference_is_pytorchs_loss_and_gradient():
    logits, target, _ = OP.make_inputs(Shape(6, 11), torch.float32, "cpu", 0)
    weight = torch.rand(11) + 0.5
    for options in (DEFAULT, CrossEntropyOptions(reduction="sum", label_smoothing=0.2, weight=weight),
                    CrossEntropyOptions(reduction="none")):
        z = logits.double().requires_grad_()
        w = None if options.weight is None else options.weight.double()
        loss = F.cross_entropy(z, target, weight=w, reduction=options.reduction,
                               label_smoothing=options.label_smoothing)
        (grad,) = torch.autograd.grad(loss.sum(), z)
        ref_loss, ref_grad = reference(logits, target, options)
        torch.testing.assert_close(ref_loss, loss.detach())
        torch.testing.assert_close(ref_grad, grad)


def test_z_loss_and_softcap_as_defined():
    """z-loss adds lambda * lse^2 per counted row; soft-capping takes the loss of cap * tanh(x / cap)."""
    logits, target, _ = OP.make_inputs(Shape(5, 9), torch.float32, "cpu", 1)
    counted = target != DEFAULT.ignore_index
    x = logits.double()
    plain, _ = reference(logits, target, CrossEntropyOptions(reduction="none"))
    zl, _ = reference(logits, target, CrossEntropyOptions(reduction="none", z_loss=0.01))
    torch.testing.assert_close(zl - plain, torch.where(counted, 0.01 * torch.logsumexp(x, -1) ** 2, 0.0))
    capped, _ = reference(logits, target, CrossEntropyOptions(reduction="none", softcap=2.0))
    expected = F.cross_entropy(2.0 * torch.tanh(x / 2.0), target, reduction="none")
    torch.testing.assert_close(capped, expected)


def test_a_logit_far_past_the_soft_cap_is_held_to_float32s_rounding_of_its_derivative():
    """Found by the randomized testing on the GPU: at x = -267 with a cap of 30, 1 - tanh^2(x / cap) is 7e-8, which
    float32 leaves a multiple of 2^-24; in a row whose every logit is that far past the cap, PyTorch's own gradient
    was 67% off and failed, as every kernel did.
    The error scale takes the derivative's terms (1 + tanh^2): PyTorch passes, and a gradient off by 1e-3 of the
    softmax's share, where it is not capped away, still fails."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 64, generator=g) * 3
    logits[0] = torch.rand(64, generator=g) * 1000 - 500  # every logit of row 0 far past the cap: all capped away
    logits[0, 5] = -267.0
    target = torch.tensor([5, 7, 9])
    options = CrossEntropyOptions(softcap=30.0)
    ref = reference(logits, target, options)[1]
    scale = OP.error_scale(logits, target, options)[1]
    tolerances = OP.tolerances_for("cpu")
    pytorchs = OP.framework_result(logits, target, options)[1]
    assert check.compare(pytorchs, ref, torch.float32, tolerances=tolerances, scale=scale).ok
    off = pytorchs.clone()
    off[1, 7] += 1e-3 * pytorchs[1].abs().max()
    assert not check.compare(off, ref, torch.float32, tolerances=tolerances, scale=scale).ok


def test_every_row_ignored_gives_a_nan_mean_and_a_zero_gradient_as_pytorch():
    logits = torch.randn(4, 7)
    target = torch.full((4,), -100)
    loss, grad = reference(logits, target)
    assert math.isnan(loss.item()) and not grad.any()


def test_options_are_validated():
    for bad in (dict(reduction="avg"), dict(label_smoothing=1.5), dict(z_loss=-1.0), dict(softcap=0.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CrossEntropyOptions(**bad)


@pytest.mark.parametrize("v", OWN, ids=lambda v: v.name)
def test_an_ignored_row_has_a_zero_gradient_whatever_it_holds(v):
    """PyTorch's autograd gives NaN for an ignored row that holds a NaN; the lab defines zero (the row takes no
    part), and its kernels never read an ignored row."""
    logits, target, options = OP.make_inputs(Shape(4, 33), torch.float32, DEVICE, 2)
    logits, target = logits.clone(), target.clone()
    logits[1, 5] = math.nan
    target[1] = options.ignore_index
    target[0] = 3
    loss, grad = v.kernel()(logits, target, options)
    ref_loss, ref_grad = reference(logits, target, options)
    assert not grad[1].any() and math.isfinite(loss.item())
    assert check.compare(grad, ref_grad, torch.float32, tolerances=OP.tolerances_for(DEVICE),
                         scale=OP.error_scale(logits, target, options)[1]).ok


@pytest.mark.parametrize("v", KERNELS, ids=lambda v: v.name)
def test_bad_input_is_a_clear_error(v):
    logits, target, options = OP.make_inputs(Shape(4, 33), torch.float32, DEVICE, 3)
    kernel = v.kernel()
    out_of_range = target.clone()
    out_of_range[2] = 33
    with pytest.raises(ValueError, match="target is out of range"):
        kernel(logits, out_of_range, options)
    with pytest.raises(ValueError, match="target must be int64"):
        kernel(logits, target.int(), options)
    with pytest.raises(ValueError, match="target must be int64 of shape \\(4,\\)"):
        kernel(logits, target[:3], options)
    with pytest.raises(ValueError, match="target must be contiguous"):  # else read as if it were
        kernel(logits, torch.stack([target, target], 1)[:, 0], options)
    with pytest.raises(TypeError, match="expected float32, float16 or bfloat16 logits"):
        kernel(logits.double(), target, options)
    with pytest.raises(ValueError, match="weight must be"):
        kernel(logits, target, CrossEntropyOptions(weight=torch.ones(5, device=DEVICE)))
    wrong_device = "cpu" if DEVICE == "cuda" else "meta"
    with pytest.raises(ValueError, match="target must be int64 of shape \\(4,\\) on"):
        kernel(logits, target.to(wrong_device), options)


def test_the_backward_raises_for_the_target_out_of_range_that_the_forward_launched_the_check_of():
    """lab.cross_entropy's autograd function (its Triton kernels, interpreted on the CPU): the forward leaves the
    check of the targets to the backward, which names the first bad row; its loss is NaN until then."""
    from lab import losses

    logits = torch.randn(5, 40, device=DEVICE, requires_grad=True)
    target = torch.tensor([3, 40, -1, -100, 7], device=DEVICE)
    loss = losses._Eager.apply(logits, target, None, -100, "mean", 0.0, 0.0, None)
    assert loss.isnan()
    with pytest.raises(ValueError, match="lab.cross_entropy: a target is out of range \\(40, row 1\\)"):
        loss.backward()
    assert logits.grad is None


@pytest.mark.parametrize("v", KERNELS, ids=lambda v: v.name)
def test_an_option_a_kernel_lacks_is_refused_not_ignored(v):
    """A kernel that lacks an option (the CUDA kernel: label smoothing, z-loss, soft-capping) says so and refuses
    the call; it never returns the loss without it."""
    logits, target, _ = OP.make_inputs(Shape(4, 33), torch.float32, DEVICE, 3)
    for options in (CrossEntropyOptions(label_smoothing=0.1), CrossEntropyOptions(z_loss=1e-4),
                    CrossEntropyOptions(softcap=5.0)):
        if v.case_skip_reason(logits, target, options):
            with pytest.raises(ValueError, match="has no label smoothing, z-loss or soft-capping"):
                v.kernel()(logits, target, options)
        else:
            assert check.check(v.kernel(), (logits, target, options), False, op=OP).ok


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("v", KERNELS, ids=lambda v: v.name)
def test_the_targets_gradient_where_p_is_one_is_the_extra_terms_own(v, dtype):
    """Where the target's probability is 1 (a vocabulary of one class) its gradient is z-loss's 2 z_loss lse alone,
    and label smoothing's terms, which cancel there: the kernel gives it to float32's rounding of those terms, as
    PyTorch's autograd does, not as the small difference of two numbers near 1 (found by the randomized testing of
    the linear cross-entropy: 1 - 1.46e-4 - 1 in float32 was 4e-4 of the gradient off, a float16 ulp). In float32
    within 1e-6 of float64's; in float16 (whose logits take the other form of the Triton kernel's gradient) float64's
    rounded to float16, exactly."""
    logits = torch.tensor([[-0.72998046875], [3.5], [-20.0]], device=DEVICE, dtype=dtype)
    target = torch.zeros(3, dtype=torch.long, device=DEVICE)
    for options in (CrossEntropyOptions(z_loss=1e-4), CrossEntropyOptions(z_loss=1e-4, label_smoothing=0.1)):
        if v.case_skip_reason(logits, target, options):
            continue
        _, grad = v.kernel()(logits, target, options)
        _, ref = reference(logits.cpu(), target.cpu(), options)
        assert (ref != 0).all()
        if dtype == torch.float32:
            torch.testing.assert_close(grad.double().cpu(), ref, rtol=1e-6, atol=0.0)
        else:
            assert torch.equal(grad.cpu(), ref.to(dtype)), (grad.cpu(), ref)


@pytest.mark.parametrize("v", KERNELS, ids=lambda v: v.name)
def test_the_gradient_written_into_out(v):
    """With an `out` pair the kernel writes the loss and dlogits there (the checker poisons them first)."""
    case = OP.make_inputs(Shape(5, 100), torch.float16, DEVICE, 4)
    assert v.writes_out
    assert check.check(v.kernel(), case, True, op=OP).ok


# --- the CUDA kernel at each launch of its tables (on the GPU) --------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("aligned", [True, False], ids=["on-boundaries", "off-boundaries"])
def test_the_cuda_kernel_at_every_launch_of_its_tables(dtype, aligned):
    """cuda.cluster against float64 at the longest row of every launch its tables give (one per shape, cluster size
    and grid: softmax's cluster plans with the gradient, the loss alone's own without), rows on 16-byte boundaries (a
    padded row stride) and off them (odd lengths or a start one element in), each with special rows (-inf entries, a
    row of -inf, +inf, NaN, 1e4), ignored rows, and the mean, then class weights with the sum. The plans of 16 rows,
    then those that only many rows take (4096, the sweep's; random rows)."""
    from lab.backends.cuda_variants import cross_entropy_cluster_launches
    from lab.dispatch import pack_elements
    from lab.inputs import pack_stride, special_input

    (v,) = [v for v in KERNELS if v.name == "cuda.cluster"] or [None]
    if v is None:
        pytest.skip("cuda.cluster is not available here")
    loss_alone = registry.get("cross_entropy_loss", "cuda.cluster").kernel()
    pack = pack_elements(dtype)
    for kernel, op, writes_out, loss_only in ((v.kernel(), OP, True, False), (loss_alone, LOSS_OP, False, True)):
        seen = set()
        for rows in (16, 4096):
            for launch, n in cross_entropy_cluster_launches(dtype, aligned, rows, loss_only).items():
                if launch in seen:
                    continue
                seen.add(launch)
                x, labels = (special_input(n, dtype, "cuda", n) if rows == 16
                             else (OP.make_inputs(Shape(rows, n), dtype, "cuda", n)[0], None))
                stride = pack_stride(n, dtype, aligned)
                start = 0 if aligned or n % pack else 1
                buf = torch.full((x.shape[0] * stride + start,), math.nan, dtype=dtype, device="cuda")
                logits = buf[start:start + x.shape[0] * stride].view(x.shape[0], stride)[:, :n]
                logits.copy_(x)
                target = torch.randint(0, n, (x.shape[0],), device="cuda")
                target[::5] = DEFAULT.ignore_index
                weight = torch.rand(n, device="cuda") + 0.5
                for options in (DEFAULT, CrossEntropyOptions(reduction="sum", weight=weight)):
                    res = check.check(kernel, (logits, target, options), writes_out, row_labels=labels, op=op)
                    assert res.ok, (f"{op.name}, launch {launch}: {x.shape[0]}x{n} (row stride {stride}, start "
                                    f"{start}): {res.summary()}")


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [1000, 50257], ids=["triton", "cuda"])
def test_the_kernels_capture_into_a_cuda_graph(vocab):
    """The kernels' entries in a CUDA graph (the check of the targets, which waits, is left out of a capture): a
    replay on new logits gives what a call gives."""
    from triton_kernels.cross_entropy import cross_entropy_fwd_bwd

    x = torch.randn(64, vocab, device="cuda", dtype=torch.bfloat16)
    t = torch.randint(0, vocab, (64,), device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the warm-up (Triton's compilation) outside the capture
        cross_entropy_fwd_bwd(x, t, DEFAULT, cuda=vocab > 16384)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = cross_entropy_fwd_bwd(x, t, DEFAULT, cuda=vocab > 16384)
    x.copy_(torch.randn_like(x))
    graph.replay()
    want = cross_entropy_fwd_bwd(x, t, DEFAULT, cuda=vocab > 16384)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


# --- lab.cross_entropy, the product's entry (CUDA tensors: on the GPU) ---------------------------------------------


def torch_loss_and_grad(logits, target, upstream=None, **options):
    """PyTorch's loss (on float32 logits) and the logits' gradient, in the logits' dtype."""
    x = logits.detach().requires_grad_()
    loss = loss_of_options(x.float(), target, **options)
    loss.backward(upstream if upstream is not None else torch.ones_like(loss))
    return loss.detach(), x.grad


def loss_of_options(x, target, z_loss=0.0, softcap=None, **options):
    from lab.operators.cross_entropy import loss_of

    return loss_of(x, target, CrossEntropyOptions(z_loss=z_loss, softcap=softcap, **options))


def lab_loss_and_grad(logits, target, upstream=None, inplace=False, **options):
    import lab

    x = logits.detach().clone().requires_grad_()
    loss = lab.cross_entropy(x if not inplace else x * 1, target, inplace=inplace, **options)
    loss.backward(upstream if upstream is not None else torch.ones_like(loss))
    return loss.detach(), x.grad


OPTION_SETS = [dict(), dict(reduction="sum"), dict(reduction="none"), dict(label_smoothing=0.1, z_loss=1e-4),
               dict(softcap=30.0, ignore_index=5)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("vocab", [1000, 16384, 16385, 50257])
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
def test_lab_cross_entropy_matches_pytorch(dtype, vocab, inplace):
    """lab.cross_entropy's loss and gradient against PyTorch's (float32 logits, the gradient cast to the dtype),
    with each option set, on both sides of the fused kernel's limit, out of place and in place, with an upstream
    gradient that is not 1 (the backward's scaling)."""
    logits, target, _ = OP.make_inputs(Shape(64, vocab), dtype, "cuda", 5)
    for options in OPTION_SETS:
        t = target.masked_fill(target == DEFAULT.ignore_index, options.get("ignore_index", DEFAULT.ignore_index))
        for upstream in (None, "random"):
            shape = (64,) if options.get("reduction") == "none" else ()
            up = None if upstream is None else torch.rand(shape, device="cuda") + 0.5
            want_loss, want_grad = torch_loss_and_grad(logits, t, up, **options)
            loss, grad = lab_loss_and_grad(logits, t, up, inplace=inplace, **options)
            assert loss.dtype == torch.float32 and loss.shape == want_loss.shape
            torch.testing.assert_close(loss, want_loss, rtol=2e-5, atol=2e-5, msg=lambda m, o=options: f"{o}: {m}")
            assert grad.dtype == dtype
            tol = dict(rtol=1e-4, atol=1e-7) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-5)
            torch.testing.assert_close(grad.float(), want_grad.float(), **tol, msg=lambda m, o=options: f"{o}: {m}")


@pytest.mark.gpu
@pytest.mark.parametrize(("vocab", "options"), [(16000, {}), (32000, {"label_smoothing": 0.1}), (128256, {})],
                         ids=["triton.fused", "triton.looped", "cuda.cluster"])
def test_64bit_indexing_of_lab_cross_entropy(vocab, options):
    """lab.cross_entropy over more than 2^31 bfloat16 logits (4 GiB, and as much for the gradient), through each of
    its three kernels: the loss and gradient of rows at the start, the middle and the end (the last row holds element
    2^31) against float64, and the loss alone (without grad) of the same rows."""
    import lab

    rows = 2**31 // vocab + 1
    logits = torch.randn(rows, vocab, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, vocab, (rows,), device="cuda")
    picked = [0, rows // 2, rows - 2, rows - 1]
    opts = CrossEntropyOptions(reduction="none", **options)
    with torch.no_grad():
        alone = lab.cross_entropy(logits, target, reduction="none", **options)[picked]
    x = logits.requires_grad_()
    loss = lab.cross_entropy(x, target, reduction="none", **options)
    loss.backward(torch.ones_like(loss))
    got = (loss.detach()[picked], x.grad[picked])
    x.grad = None
    case = (logits.detach()[picked], target[picked], opts)
    labels = [f"row {r}" for r in picked]
    for name, outputs, op in (("loss and gradient", got, OP), ("the loss alone", (alone,), LOSS_OP)):
        spec = check.output_spec(op, op.reference(*case), torch.bfloat16)
        for y, ref, d, scale in zip(outputs, op.reference(*case), spec.dtypes, op.error_scale(*case), strict=True):
            res = check.compare(y, ref, d, labels if y.dim() == 2 else None, {d: op.tolerances[torch.bfloat16]},
                                scale)
            assert res.ok, f"{name}, {rows}x{vocab}: {res.summary()}"


@pytest.mark.gpu
def test_lab_cross_entropy_of_any_rank_and_without_grad():
    import lab

    logits = torch.randn(2, 3, 7, 300, device="cuda")
    target = torch.randint(0, 300, (2, 3, 7), device="cuda")
    flat = F.cross_entropy(logits.reshape(-1, 300), target.reshape(-1), reduction="none")
    torch.testing.assert_close(lab.cross_entropy(logits, target, reduction="none"), flat.reshape(2, 3, 7))
    with torch.no_grad():
        torch.testing.assert_close(lab.cross_entropy(logits, target), flat.mean())
    assert lab.cross_entropy(logits[:0], target[:0]).isnan(), "a mean over no rows is NaN, as PyTorch's"


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [33, 50257], ids=["triton", "cuda"])
def test_a_target_out_of_range_is_raised_by_the_call_or_by_its_backward(vocab):
    """Without a gradient (evaluation) and in place, lab.cross_entropy raises; with one, its forward leaves the check
    to the backward, which raises (the row's loss is NaN until then)."""
    import lab

    logits = torch.randn(4, vocab, device="cuda", requires_grad=True)
    target = torch.tensor([1, 2, vocab, -100], device="cuda")
    named = f"lab.cross_entropy: a target is out of range \\({vocab}, row 2\\)"
    loss = lab.cross_entropy(logits, target)
    assert loss.isnan()
    with pytest.raises(ValueError, match=named):
        loss.backward()
    with torch.no_grad(), pytest.raises(ValueError, match=named):
        lab.cross_entropy(logits, target)
    with pytest.raises(ValueError, match=named):
        lab.cross_entropy(logits.detach().clone().requires_grad_(), target, inplace=True)
    rows = lab.cross_entropy(logits, target.clamp(max=vocab - 1), reduction="none")
    rows.sum().backward()  # a good batch after a bad one: nothing left over
    assert rows.isfinite().all() and logits.grad.isfinite().all()


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [1000, 50257], ids=["triton", "cuda"])
def test_lab_cross_entropy_waits_for_the_check_of_its_targets_alone(vocab, monkeypatch):
    """With a gradient wanted, the forward returns while the GPU is still busy with what was queued before it, and
    the backward waits for the targets' step alone, not for the loss's kernel queued after it (here held back by a
    sleep queued before it): the host runs ahead of the GPU, as with PyTorch's own loss."""
    import lab
    from lab import losses

    logits = torch.randn(64, vocab, device="cuda", requires_grad=True)
    target = torch.randint(0, vocab, (64,), device="cuda")
    lab.cross_entropy(logits, target).backward()  # compiled and warm
    torch.cuda.synchronize()
    torch.cuda._sleep(2**31 - 1)  # about a second of the GPU's time
    queued = torch.cuda.Event()
    queued.record()
    loss = lab.cross_entropy(logits, target)
    assert not queued.query(), "the forward waited for the work queued before it"
    loss.backward()
    assert queued.query()

    kernels = losses._ops()
    launch, slept = kernels.cross_entropy_kernel, torch.cuda.Event()
    cluster = torch.ops.lab.cross_entropy_cluster

    class Held:  # the loss's kernel, a sleep queued before it
        def __getitem__(self, grid):
            def run(*args, **kwargs):
                torch.cuda._sleep(2**31 - 1)
                slept.record()
                return launch[grid](*args, **kwargs)
            return run

    def held_cluster(*args, **kwargs):
        torch.cuda._sleep(2**31 - 1)
        slept.record()
        return cluster(*args, **kwargs)

    monkeypatch.setattr(kernels, "cross_entropy_kernel", Held())
    monkeypatch.setattr(torch.ops.lab, "cross_entropy_cluster", held_cluster)
    torch.cuda.synchronize()
    loss = lab.cross_entropy(logits, target)
    loss.backward()
    assert not slept.query(), "the backward waited for the loss's kernel, not for the targets' step alone"
    torch.cuda.synchronize()
    assert slept.query()


@pytest.mark.gpu
def test_lab_cross_entropy_bad_input_is_a_clear_error():
    import lab

    logits = torch.randn(4, 33, device="cuda", requires_grad=True)
    target = torch.tensor([1, 2, 33, -100], device="cuda")
    with pytest.raises(TypeError, match="int64 targets"):
        lab.cross_entropy(logits, target.int())
    with pytest.raises(ValueError, match="target's shape"):
        lab.cross_entropy(logits, target[:3])
    with pytest.raises(ValueError, match="one CUDA device"):
        lab.cross_entropy(logits.cpu(), target.cpu())
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):
        lab.cross_entropy(logits.double(), target)
    with pytest.raises(ValueError, match="reduction"):
        lab.cross_entropy(logits, target.clamp(0, 32), reduction="avg")
    with pytest.raises(ValueError, match="must require grad"):
        lab.cross_entropy(logits.detach(), target.clamp(0, 32), inplace=True)


@pytest.mark.gpu
@pytest.mark.parametrize("vocab", [1000, 50257])
@pytest.mark.parametrize("smoothing", [0.05, 0.0])
def test_lab_cross_entropy_compiles_fullgraph(vocab, smoothing):
    """torch.compile(fullgraph=True) of a loss through lab.cross_entropy, forward and backward, as eager (Triton's
    kernels; without label smoothing at 50257, the CUDA kernel); a target out of range, which nothing checks on the
    host there, makes its row NaN and reads nothing out of bounds."""
    import lab

    torch._dynamo.reset()
    logits = torch.randn(48, vocab, device="cuda", dtype=torch.bfloat16)
    target = torch.randint(0, vocab, (48,), device="cuda")

    def step(x, t):
        return lab.cross_entropy(x * 2.0, t, label_smoothing=smoothing) * 3.0

    eager_loss, eager_grad = lab_step(step, logits, target)
    compiled = torch.compile(step, fullgraph=True)
    loss, grad = lab_step(compiled, logits, target)
    torch.testing.assert_close(loss, eager_loss)
    torch.testing.assert_close(grad, eager_grad)
    bad = target.clone()
    bad[3] = vocab + 5
    rows = torch.compile(lambda x, t: lab.cross_entropy(x, t, reduction="none"), fullgraph=True)(logits, bad)
    assert rows[3].isnan() and rows[torch.arange(48, device="cuda") != 3].isfinite().all()
    x = logits.detach().clone().requires_grad_()  # with the gradient: the CUDA kernel at 50257
    rows = torch.compile(lambda x, t: lab.cross_entropy(x, t, reduction="none"), fullgraph=True)(x, bad)
    rows.sum().backward()
    assert rows[3].isnan() and x.grad[3].isnan().all() and x.grad[torch.arange(48, device="cuda") != 3].isfinite().all()


@pytest.mark.gpu
@pytest.mark.parametrize(("vocab", "smoothing"), [(257, 0.0), (257, 0.1), (1000, 0.0), (20000, 0.1)])
def test_the_gradient_written_over_the_logits_leaves_each_rows_loss_as_it_is(vocab, smoothing):
    """The Triton kernels' loss with the gradient written over the logits (inplace=True: what lab.linear_cross_entropy
    does with each chunk) is bitwise the loss without the gradient, every row, every run: the target's logit is
    taken as the row is read, never read again from memory that other warps are overwriting with the gradient
    (the fused kernel at 257 and 1000, the looped one at 20000 with label smoothing; float32, many rows, twenty runs,
    so that a race would show)."""
    import lab

    g = torch.Generator(device="cuda").manual_seed(3)
    logits = torch.randn(8192, vocab, device="cuda", generator=g) * 4.0
    target = torch.randint(0, vocab, (8192,), device="cuda", generator=g)
    target[::8] = -100
    alone = lab.cross_entropy(logits, target, reduction="none", label_smoothing=smoothing)
    for _ in range(20):
        x = logits.clone().requires_grad_()
        rows = lab.cross_entropy(x, target, reduction="none", label_smoothing=smoothing, inplace=True)
        assert torch.equal(rows, alone), f"{int((rows != alone).sum())} rows differ"


def lab_step(fn, logits, target):
    x = logits.detach().clone().requires_grad_()
    loss = fn(x, target)
    loss.backward()
    return loss.detach(), x.grad


@pytest.mark.gpu
@pytest.mark.parametrize("inplace", [False, True], ids=["out-of-place", "in-place"])
def test_a_classifier_trains_with_lab_cross_entropy_as_with_pytorchs(inplace):
    """A small classifier (a linear head over features, bfloat16 logits as a language model's) trained ten steps
    with lab.cross_entropy and with F.cross_entropy from the same start: the same losses, step for step."""
    import lab

    def train(loss_fn):
        torch.manual_seed(0)
        head = torch.nn.Linear(64, 5000, device="cuda")
        opt = torch.optim.SGD(head.parameters(), lr=0.5)
        features = torch.randn(256, 64, device="cuda")
        labels = torch.randint(0, 5000, (256,), device="cuda")
        labels[::7] = -100
        losses = []
        for _ in range(10):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = head(features)
            loss = loss_fn(logits, labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    theirs = train(lambda x, t: F.cross_entropy(x.float(), t))
    ours = train(lambda x, t: lab.cross_entropy(x, t, inplace=inplace))
    assert ours == pytest.approx(theirs, rel=2e-3)
    assert ours[-1] < ours[0], "the head should learn something in ten steps"
