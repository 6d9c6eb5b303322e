"""lab.linear_cross_entropy (lab/losses.py): the classifier's matmul and cross-entropy over chunks of tokens. On the
CPU the chunked forward and backward run with the Triton kernels interpreted, against float64 autograd through the
whole logits; on a GPU the entry itself, in three dtypes, compiled, and training a small head as PyTorch does."""

import math

import pytest
import torch
import torch.nn.functional as F

import lab
from lab import losses
from lab.operators.cross_entropy import CrossEntropyOptions, loss_of

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OPTIONS = [dict(), dict(label_smoothing=0.1, z_loss=1e-3, softcap=4.0), dict(ignore_index=3)]


def head(n: int, h: int, v: int, dtype: torch.dtype, device: str, seed: int = 0, bias: bool = True):
    """Hidden states, a classifier and targets (one in five ignored) of a small language-model head."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(n, h, generator=g)
    w = torch.randn(v, h, generator=g) / math.sqrt(h)
    b = torch.randn(v, generator=g) * 0.1 if bias else None
    t = torch.randint(0, v, (n,), generator=g)
    t[::5] = -100
    cast = lambda a: None if a is None else a.to(device, dtype)  # noqa: E731
    return cast(x), cast(w), cast(b), t.to(device)


def reference(x, w, b, t, reduction: str, upstream: torch.Tensor | None = None, **options):
    """(loss, dx, dw, db) in float64: autograd through the whole logits."""
    x64, w64 = x.double().requires_grad_(), w.double().requires_grad_()
    b64 = None if b is None else b.double().requires_grad_()
    opts = CrossEntropyOptions(reduction=reduction, **options)
    loss = loss_of(F.linear(x64, w64, b64), t, opts)
    wrt = [x64, w64] + ([b64] if b is not None else [])
    grads = torch.autograd.grad(loss if upstream is None else (loss * upstream.double()).sum(), wrt)
    return loss.detach(), *grads, *([None] if b is None else [])


def run(x, w, b, t, reduction: str, chunk: int, accumulate: torch.dtype, upstream=None, **options):
    """(loss, dx, dw, db) of the chunked entry's core (the public entry takes CUDA tensors only)."""
    xs, ws = x.detach().requires_grad_(), w.detach().requires_grad_()
    bs = None if b is None else b.detach().requires_grad_()
    opts = dict(ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None) | options
    spec = losses._LinearSpec(opts["ignore_index"], reduction, float(opts["label_smoothing"]), float(opts["z_loss"]),
                              opts["softcap"], chunk, accumulate)
    t = t.masked_fill(t == -100, opts["ignore_index"])
    loss = losses._linear_cross_entropy(xs, ws, bs, t, spec)
    loss.backward(upstream if upstream is not None else torch.ones_like(loss))
    return loss.detach(), xs.grad, ws.grad, None if b is None else bs.grad


@pytest.mark.parametrize("chunk", [16, 64], ids=["3 chunks", "one chunk"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("options", OPTIONS, ids=["plain", "smoothing-zloss-softcap", "ignore_index=3"])
@pytest.mark.parametrize("dtype, accumulate", [
    (torch.float32, torch.float32), (torch.float16, torch.float32), (torch.float16, torch.float16),
], ids=["fp32", "fp16-sum32", "fp16-sum16"])
def test_chunks_give_the_whole_logits_loss_and_gradients(chunk, reduction, options, dtype, accumulate):
    """37 tokens in chunks of 16 (the last one ragged) or in one, with a bias: the loss and the gradients of x, the
    weight and the bias as float64 autograd through the whole logits gives them (reduction none: each row's own
    upstream gradient), for each option set, with the gradients' sums over the chunks in float32 or in float16
    (float16 inputs held to float16's rounding of values up to a few units); one chunk reduces the loss in the kernel
    and makes dweight by one matmul."""
    x, w, b, t = head(37, 16, 50, dtype, DEVICE)
    upstream = torch.rand(37, device=DEVICE) + 0.5 if reduction == "none" else None
    t = t.masked_fill(t == -100, options.get("ignore_index", -100))
    want = reference(x, w, b, t, reduction, upstream, **options)
    got = run(x, w, b, t, reduction, chunk, accumulate, upstream, **options)
    tol = dict(rtol=2e-5, atol=2e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=2e-3)
    for name, g, r in zip(("loss", "dx", "dweight", "dbias"), got, want, strict=True):
        assert g.dtype == (torch.float32 if name == "loss" else dtype), name
        torch.testing.assert_close(g.double(), r, **tol, msg=lambda m, name=name: f"{name}: {m}")


def test_without_grad_the_loss_alone():
    x, w, b, t = head(21, 8, 30, torch.float32, DEVICE, seed=1)
    spec = losses._LinearSpec(-100, "mean", 0.0, 0.0, None, 8, torch.float32)
    with torch.no_grad():
        loss = losses._linear_cross_entropy(x, w, b, t, spec)
    assert loss.grad_fn is None
    torch.testing.assert_close(loss.double(), reference(x, w, b, t, "mean")[0], rtol=2e-5, atol=2e-6)


def test_only_the_wanted_gradients_are_computed(monkeypatch):
    """A frozen weight: x's gradient, and no weight's gradient computed (the chunks' dweight matmuls skipped)."""
    x, w, b, t = head(9, 8, 12, torch.float32, DEVICE, seed=2, bias=False)
    asked = []
    gradients = losses._gradients
    monkeypatch.setattr(losses, "_gradients", lambda *a, **k: asked.append(a[5]) or gradients(*a, **k))
    spec = losses._LinearSpec(-100, "sum", 0.0, 0.0, None, 4, torch.float32)
    xs = x.clone().requires_grad_()
    losses._linear_cross_entropy(xs, w, None, t, spec).backward()
    torch.testing.assert_close(xs.grad.double(), reference(x, w, None, t, "sum")[1], rtol=2e-5, atol=2e-6)
    assert asked == [(True, False, False)]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("batch", ["empty", "every row ignored"])
def test_no_counted_row_gives_pytorchs_loss_and_zero_gradients(reduction, batch):
    """No tokens, or every target ignored: the mean is NaN, the sum 0 (none: each row 0), and every gradient 0, never
    NaN (a NaN gradient would poison the weights), as PyTorch's."""
    x, w, b, t = head(9, 8, 12, torch.float32, DEVICE, seed=2)
    if batch == "empty":
        x, t = x[:0], t[:0]
    else:
        t = torch.full_like(t, -100)
    got = run(x, w, b, t, reduction, 4, torch.float32)
    want = reference(x, w, b, t, reduction, torch.ones(x.shape[0], device=DEVICE) if reduction == "none" else None)
    torch.testing.assert_close(got[0].double(), want[0], equal_nan=True)
    for g in got[1:]:
        assert torch.equal(g, torch.zeros_like(g)), g


def test_the_backward_runs_once():
    """The mean's gradients were computed by the forward and are scaled in place: a second backward through the
    same graph would scale them twice, so it is an error, not a wrong gradient."""
    x, w, b, t = head(9, 8, 12, torch.float32, DEVICE, seed=3)
    spec = losses._LinearSpec(-100, "mean", 0.0, 0.0, None, 4, torch.float32)
    loss = losses._linear_cross_entropy(x.requires_grad_(), w, b, t, spec) * 0.5
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="lab.linear_cross_entropy: its backward runs once"):
        loss.backward()


def test_lab_cross_entropys_backward_runs_once_too():
    """lab.cross_entropy's eager backward scales the gradient its forward wrote, in place: a second backward through
    the same graph is an error, where it would have scaled it again."""
    x, w, b, t = head(9, 8, 12, torch.float32, DEVICE, seed=3)
    logits = F.linear(x, w, b).detach().requires_grad_()
    loss = losses._Eager.apply(logits, t, None, -100, "mean", 0.0, 0.0, None) * 0.5
    loss.backward(retain_graph=True)
    l64 = logits.detach().double().requires_grad_()
    want = torch.autograd.grad(F.cross_entropy(l64, t) * 0.5, l64)[0]
    torch.testing.assert_close(logits.grad.double(), want, rtol=2e-5, atol=2e-7)
    with pytest.raises(RuntimeError, match="lab.cross_entropy: its backward runs once"):
        loss.backward()


def test_the_default_chunk():
    """Every token in one chunk where that takes no more memory than chunking would (every logit and dweight, against
    a chunk's 1 GiB of logits beside dweight's float32 sum, then that sum beside dweight); else 1 GiB of logits a
    chunk, a multiple of 256."""
    v, h = 128256, 4096
    assert losses.chunk_tokens_for(8192, v, h, 2, 4) == 8192  # 2.1 + 1.05 GB: less than 1 GiB + 2.1 GB
    assert losses.chunk_tokens_for(16384, v, h, 2, 4) == 4096  # 4.2 + 1.05 GB
    assert losses.chunk_tokens_for(65536, v, h, 2, 4) == 4096
    assert losses.chunk_tokens_for(8192, v, h, 2, 2) == 4096  # sums in the weight's dtype: 1 GiB + dweight
    assert losses.chunk_tokens_for(0, v, h, 2, 4) == 1
    for vocab, itemsize in ((32000, 4), (50257, 2), (151936, 2), (256000, 2), (10**7, 4)):
        c = losses.chunk_tokens_for(10**6, vocab, 64, itemsize, itemsize)
        assert c % 256 == 0 and c >= 256 and (c == 256 or c * vocab * itemsize <= losses.LOGITS_CHUNK_BYTES)


@pytest.mark.parametrize("bad, error, match", [
    (dict(x=torch.zeros(4, 8, dtype=torch.float64)), TypeError, "one dtype, float32, float16 or bfloat16"),
    (dict(weight=torch.zeros(12, 8, dtype=torch.float16)), TypeError, "one dtype"),
    (dict(target=torch.zeros(4, dtype=torch.int32)), TypeError, "int64 targets"),
    (dict(weight=torch.zeros(12, 7)), ValueError, "expected x \\(..., H\\), weight \\(V, H\\)"),
    (dict(target=torch.zeros(5, dtype=torch.int64)), ValueError, "target \\(5,\\)"),
    (dict(bias=torch.zeros(11)), ValueError, "bias \\(11,\\)"),
    (dict(reduction="avg"), ValueError, "reduction must be one of"),
    (dict(label_smoothing=1.5), ValueError, "label_smoothing"),
    (dict(chunk_tokens=0), ValueError, "chunk_tokens must be a positive int"),
    (dict(accumulate=torch.float16), ValueError, "accumulate must be torch.float32 or the weight's dtype"),
    (dict(x=torch.zeros(4, 8, device="meta")), ValueError,
     "on one CUDA device \\(or the CPU under TRITON_INTERPRET=1\\), got x on meta"),
])
def test_bad_input_is_a_clear_error(bad, error, match):
    args = dict(x=torch.zeros(4, 8), weight=torch.zeros(12, 8), target=torch.zeros(4, dtype=torch.int64),
                bias=torch.zeros(12)) | bad
    tensors = {k: args.pop(k) for k in ("x", "weight", "target", "bias")}
    with pytest.raises(error, match=f"lab.linear_cross_entropy: .*{match}"):
        lab.linear_cross_entropy(tensors["x"], tensors["weight"], tensors["target"], tensors["bias"], **args)


# --- on the GPU: the entry itself ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("vocab", [1000, 50257], ids=["triton", "cuda"])
def test_the_entry_matches_pytorch(dtype, vocab):
    """Chunks of 256 tokens over 600: against float64, and in 16-bit within twice PyTorch's own error in that dtype
    (F.linear then F.cross_entropy on the same inputs), for the loss and each gradient."""
    x, w, b, t = head(600, 64, vocab, dtype, "cuda", seed=4)
    want = reference(x, w, b, t, "mean")
    xs, ws, bs = (a.detach().requires_grad_() for a in (x, w, b))
    loss = lab.linear_cross_entropy(xs, ws, t, bs, chunk_tokens=256)
    loss.backward()
    got = (loss.detach(), xs.grad, ws.grad, bs.grad)
    xt, wt, bt = (a.detach().requires_grad_() for a in (x, w, b))
    torch_loss = F.cross_entropy(F.linear(xt, wt, bt).float(), t)
    torch_loss.backward()
    theirs = (torch_loss.detach(), xt.grad, wt.grad, bt.grad)
    for name, g, r, p in zip(("loss", "dx", "dweight", "dbias"), got, want, theirs, strict=True):
        err = (g.double() - r).abs().max().item()
        bar = 2 * (p.double() - r).abs().max().item() if dtype != torch.float32 else 0.0
        assert err <= max(bar, 1e-5 * r.abs().max().item()), (name, err, bar)


@pytest.mark.gpu
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_the_entry_compiles_fullgraph(reduction):
    """Forward and backward under torch.compile(fullgraph=True), bfloat16, three chunks, each reduction."""
    x, w, b, t = head(300, 64, 5000, torch.bfloat16, "cuda", seed=5)
    torch._dynamo.reset()
    step = torch.compile(lambda x, w, b, t: lab.linear_cross_entropy(x, w, t, b, reduction=reduction,
                                                                      chunk_tokens=128), fullgraph=True)
    xs, ws, bs = (a.detach().requires_grad_() for a in (x, w, b))
    upstream = torch.rand(300, device="cuda") + 0.5 if reduction == "none" else None
    loss = step(xs, ws, bs, t)
    loss.backward(upstream)
    want = reference(x, w, b, t, reduction, upstream)
    for name, g, r in zip(("loss", "dx", "dweight", "dbias"), (loss.detach(), xs.grad, ws.grad, bs.grad), want,
                          strict=True):
        assert (g.double() - r).abs().max().item() <= 2e-2 * r.abs().max().item(), name


@pytest.mark.gpu
def test_a_strided_target_is_read_as_its_values():
    x, w, b, t = head(64, 16, 40, torch.float32, "cuda", seed=9)
    strided = torch.stack([t, t], 1)[:, 0]  # every other element of a buffer
    assert strided.stride(0) == 2
    torch.testing.assert_close(lab.linear_cross_entropy(x, w, strided, b), lab.linear_cross_entropy(x, w, t, b))
    logits = F.linear(x, w, b)
    torch.testing.assert_close(lab.cross_entropy(logits, strided), lab.cross_entropy(logits, t))


@pytest.mark.parametrize("device", [pytest.param(DEVICE, id="here"),
                                    pytest.param("cuda", marks=pytest.mark.gpu, id="gpu")])
@pytest.mark.parametrize("grad", [True, False], ids=["training", "evaluation"])
def test_a_bad_target_is_a_clear_error(device, grad):
    """The first target out of range, by row, named (the check runs beside the loss's work, and is waited for after
    it is launched), with and without gradients."""
    x, w, b, t = head(8, 16, 40, torch.float32, device, seed=6)
    t[5], t[7] = 40, -3
    with pytest.raises(ValueError, match="lab.linear_cross_entropy: a target is out of range \\(40, row 5\\)"):
        lab.linear_cross_entropy(x.requires_grad_(grad), w, t, b)


@pytest.mark.gpu
def test_a_head_trains_with_it_as_with_pytorch():
    """Ten steps of SGD on a small language-model head (hidden states from an embedding): the losses and the
    classifier's weights follow PyTorch's, step for step, in float32."""
    torch.manual_seed(7)
    tokens = torch.randint(0, 300, (64, 9), device="cuda")
    models = []
    for _ in range(2):
        torch.manual_seed(8)
        models.append(torch.nn.ModuleDict(dict(emb=torch.nn.Embedding(300, 32), out=torch.nn.Linear(32, 300)))
                      .cuda())
    criterion = lab.LinearCrossEntropyLoss(chunk_tokens=100)
    opts = [torch.optim.SGD(m.parameters(), lr=0.5) for m in models]
    for _ in range(10):
        losses_ = []
        for i, (m, opt) in enumerate(zip(models, opts, strict=True)):
            h, target = m["emb"](tokens[:, :-1]).reshape(-1, 32), tokens[:, 1:].reshape(-1)
            loss = (criterion(h, m["out"].weight, target, m["out"].bias) if i == 0
                    else F.cross_entropy(m["out"](h), target))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses_.append(loss.item())
        assert losses_[0] == pytest.approx(losses_[1], rel=1e-5, abs=1e-6)
    torch.testing.assert_close(models[0]["out"].weight, models[1]["out"].weight, rtol=1e-4, atol=1e-5)


def test_dweights_bar_is_twice_pytorchs_error_not_a_share_of_its_magnitudes():
    """In 16-bit, each output is held to twice PyTorch's own error: dweight sums |dlogits| |x| over many tokens that
    cancel, so a floor taken from that magnitude would hide a drift of several times PyTorch's error (a dweight summed
    in bfloat16 over 16 chunks passed so); the floor is a share of its largest value."""
    from lab import check
    from lab.inputs import Shape
    from lab.operators import get

    op = get("linear_cross_entropy")
    case = op.make_inputs(Shape(512, 64, None, 16), torch.float16, "cpu", 0)
    ref, recipes = op.reference(*case), op.framework_result(*case)
    err = max((torchs[2].double() - ref[2]).abs().max().item() for torchs in recipes)  # the bar's: the larger

    def torch_with(drift):
        def kernel(*inputs):
            loss, dx, dw, db = op.framework_result(*inputs)[0]
            dw = dw.clone()
            at = dw.abs().argmax()
            away = 1.0 if dw.view(-1)[at].double() >= ref[2].view(-1)[at] else -1.0  # away from the exact value
            dw.view(-1)[at] += away * drift * err
            return loss.float(), dx, dw, db
        return kernel

    assert check.check(torch_with(0.0), case, False, op=op).ok
    drifted = check.check(torch_with(4.0), case, False, op=op)
    assert not drifted.ok and "dweight" in drifted.message and "PyTorch's own" in drifted.message


@pytest.mark.parametrize("sums, ok", [(torch.float32, True), (torch.bfloat16, False)], ids=["float32", "bfloat16"])
def test_the_check_sees_dweight_drift_where_16_bit_sums_add_up_many_chunks(sums, ok):
    """dW summed over 256 chunks of the operator's inputs, each chunk's sum rounded to bfloat16 (as Liger's default
    and the seed's design add them), lands past twice PyTorch's error; the same chunks summed in float32 and rounded
    once pass. (With 1000 classes every row of dW adds up every token's share, whatever the targets; at a real
    vocabulary it is the targets' repeats that add up, which zipf_targets draws.)"""
    from lab import check
    from lab.inputs import Shape
    from lab.operators import get
    from lab.operators.linear_cross_entropy import head_loss_and_grads

    op = get("linear_cross_entropy")
    case = op.make_inputs(Shape(8192, 1000, None, 32), torch.bfloat16, "cpu", 0)

    def chunked(x, weight, target, bias, options):  # 32 tokens a chunk
        loss, *grads = head_loss_and_grads(x, weight, target, bias, options, x.dtype, sums, chunk_elements=32 * 1000)
        return (loss.float(), *grads)

    result = check.check(chunked, case, False, op=op)
    assert result.ok is ok, result.summary()
    assert ok or "dweight: largest error" in result.message


def test_the_targets_are_drawn_as_words_are():
    """zipf_targets: every class in range, class r about 1 / ((r + 1) H_n) of them (H_n the harmonic number): at
    128256 classes class 0 is 8% of the tokens and class 1 half as many, so their rows of dW add up thousands of
    tokens."""
    from lab.operators.linear_cross_entropy import zipf_targets

    n = 128256
    t = zipf_targets(200_000, n, torch.Generator().manual_seed(0), "cpu")
    assert t.dtype == torch.int64 and int(t.min()) >= 0 and int(t.max()) < n
    counts = torch.bincount(t, minlength=n).double() / t.numel()
    harmonic = float((1.0 / torch.arange(1, n + 1, dtype=torch.float64)).sum())
    assert counts[0].item() == pytest.approx(1 / harmonic, rel=0.03)
    assert counts[1].item() == pytest.approx(1 / (2 * harmonic), rel=0.05)
    assert zipf_targets(5, 1, torch.Generator().manual_seed(0), "cpu").tolist() == [0] * 5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_an_ignored_tokens_nan_stays_in_its_row(dtype):
    """A vocabulary padded to whole 16-byte rows (13 classes), a token whose target is ignored and whose hidden state
    holds a NaN: its logits' row, padding included, is NaN, and its gradient row is 0 as the lab defines it (dx runs
    over the vocabulary alone); every other token's dx is finite. dweight's columns of that hidden unit are NaN, as
    float64's."""
    x, w, b, t = head(9, 8, 13, dtype, DEVICE, seed=4)
    t[2] = -100
    x[2, 5] = float("nan")
    _, dx, dw, _ = run(x, w, b, t, "mean", 16, torch.float32)
    assert torch.equal(dx[2], torch.zeros_like(dx[2])) and dx[torch.arange(9) != 2].isfinite().all()
    assert dw[:, 5].isnan().all() and dw[:, [c for c in range(8) if c != 5]].isfinite().all()
