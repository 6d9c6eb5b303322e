"""linear_cross_entropy: a language model's head and its loss, as a training step computes them: hidden states x
(M tokens x K) times the classifier W (N classes x K), plus an optional bias (N), then cross_entropy's loss over
those logits; and the gradients dx, dW and dbias.

Inputs (x, weight, target, bias, options): x and weight of one dtype (float32, float16, bfloat16), target int64 (M),
one row in eight ignore_index, bias None or (N,), and cross_entropy's CrossEntropyOptions without class weights. A
point's Shape is (M, N, K): tokens, vocabulary, hidden size. Outputs: (loss, dx, dweight, dbias): the loss float32
(as cross_entropy's, held to the inputs' dtype's tolerance), the gradients in the inputs' dtype, dbias of shape (0,)
where there is no bias (so that every case has the same outputs). For reduction none, the gradients of the rows' sum.

The loss is cross_entropy's of the logits x @ W^T + bias (lab/operators/cross_entropy.py, loss_of). The reference
computes it in float64 a chunk of tokens at a time (REFERENCE_CHUNK_ELEMENTS of logits), the gradients of the whole
loss added up over the chunks; PyTorch's own result in the inputs' dtype (the 2x bar of 16-bit gradients,
lab/check.py) the same way, its dweight and dbias summed in float32 over the chunks and rounded once, and, where the
logits are one chunk, as autograd computes them: dweight from one matmul in that dtype (framework_result).

An operator built on matmuls (lab/operators/__init__.py, flops): its figures are the time of a call, TFLOP/s =
6*M*N*K / time (the three matmuls: logits, dx, dweight), the time of those three matmuls alone on the point's inputs
timed in the same rounds (`ceiling`), and the peak memory a call allocates above its inputs, its outputs included.

linear_cross_entropy_loss: the loss alone, as evaluation computes it (no gradient): the same inputs, cases and sweeps;
TFLOP/s = 2*M*N*K / time, against the logits' matmul alone.
"""

from __future__ import annotations

import dataclasses

import torch

from lab.inputs import Shape
from lab.operators import Operator, cross_entropy, register_operator
from lab.operators.cross_entropy import DEFAULT, CrossEntropyOptions
from lab.registry import Traffic
from lab.tolerance import Tolerance

REFERENCE_CHUNK_ELEMENTS = 2**26
"""The float64 reference's logits a chunk (512 MB, a few times that with autograd's temporaries)."""
CEILING_CHUNK_BYTES = 2**32
"""The ceiling's logits a chunk (4 GiB): beyond, its three matmuls go a chunk of tokens at a time."""


def case_shape(x: torch.Tensor, weight: torch.Tensor, *_) -> Shape:
    return Shape(x.shape[0], weight.shape[0], None, x.shape[1])


def _chunks(m: int, n: int, elements: int) -> list[tuple[int, int]]:
    step = max(1, elements // max(1, n))
    return [(s, min(m, s + step)) for s in range(0, m, step)]


def _per_chunk(options: CrossEntropyOptions) -> CrossEntropyOptions:
    """A chunk's options: its rows' losses, one each (the whole loss is reduced over the chunks)."""
    return CrossEntropyOptions(ignore_index=options.ignore_index, reduction="none",
                               label_smoothing=options.label_smoothing, z_loss=options.z_loss, softcap=options.softcap)


def _counted(target: torch.Tensor, options: CrossEntropyOptions) -> int:
    """The rows whose target is not ignore_index (the mean's denominator)."""
    return int((target != options.ignore_index).sum())


def _upstream(counted: int, options: CrossEntropyOptions) -> float:
    """Each row's loss's weight in the whole loss: 1 for sum and none; 1 / the counted rows for the mean (0 where
    none is counted: the mean is NaN and its gradients 0, as PyTorch's)."""
    if options.reduction != "mean":
        return 1.0
    return 1.0 / counted if counted else 0.0


def _product(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """a @ b summed and given in `dtype` (float32 sums of 16-bit operands: mm's out_dtype on the GPU, float32 operands
    on the CPU), not rounded to a's dtype first."""
    if a.dtype == dtype:
        return a @ b
    return torch.mm(a, b, out_dtype=dtype) if a.is_cuda else a.to(dtype) @ b.to(dtype)


def head_loss_and_grads(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
                        options: CrossEntropyOptions, dtype: torch.dtype, sum_dtype: torch.dtype,
                        chunk_elements: int = REFERENCE_CHUNK_ELEMENTS, with_grad: bool = True,
                        upcast: bool = False) -> tuple[torch.Tensor, ...]:
    """(loss, dx, dweight, dbias) of the head in `dtype`, a chunk of tokens at a time: each chunk's logits by one
    matmul in `dtype`, its rows' losses and their gradient by autograd through cross_entropy.loss_of in `dtype` (with
    upcast, on the logits upcast to float32, the gradient rounded back to `dtype`, as autograd does through .float(),
    and the loss float32, as F.cross_entropy gives it there) (ignored rows' gradient zero), each row's upstream
    gradient its weight in the whole loss; dx of the chunk by a matmul; dweight and dbias, and the loss's sum, added up
    over the chunks in `sum_dtype`. Without with_grad, (loss,) alone."""
    m, k = x.shape
    n = weight.shape[0]
    xs, w = x.to(dtype), weight.to(dtype)
    b = None if bias is None else bias.to(dtype)
    chunk_options = _per_chunk(options)
    counted = _counted(target, options)
    scale = _upstream(counted, options)
    dx = torch.empty(m, k, dtype=dtype, device=x.device)
    dweight = torch.zeros(n, k, dtype=sum_dtype, device=x.device)
    dbias = torch.zeros(n if bias is not None else 0, dtype=sum_dtype, device=x.device)
    rows = []
    for s, e in _chunks(m, n, chunk_elements):
        logits = torch.nn.functional.linear(xs[s:e], w, b).detach()  # as PyTorch's users make them
        if upcast:
            logits = logits.float()
        if not with_grad:
            rows.append(cross_entropy.loss_of(logits, target[s:e], chunk_options))
            continue
        logits.requires_grad_()
        with torch.enable_grad():
            loss = cross_entropy.loss_of(logits, target[s:e], chunk_options)
            (dl,) = torch.autograd.grad(loss, logits, torch.full_like(loss, scale))
        dl = dl.to(dtype).masked_fill((target[s:e] == options.ignore_index).unsqueeze(-1), 0.0)
        rows.append(loss.detach())
        dx[s:e] = dl @ w
        dweight += _product(dl.t(), xs[s:e], sum_dtype)
        if bias is not None:
            dbias += dl.to(sum_dtype).sum(0)
    loss_dtype = torch.float32 if upcast else dtype
    per_row = torch.cat(rows) if rows else torch.zeros(0, dtype=loss_dtype, device=x.device)
    if options.reduction == "none":
        loss = per_row
    else:
        loss = per_row.to(sum_dtype).sum()
        if options.reduction == "mean":
            loss = loss / counted if counted else torch.full_like(loss, float("nan"))
    if not with_grad:
        return (loss.to(loss_dtype),)
    return loss.to(loss_dtype), dx, dweight.to(dtype), dbias.to(dtype)


def train_step(loss_fn):
    """A kernel of this operator from loss_fn(x, weight, target, bias, options) -> loss: the loss and, by autograd, its
    gradients in x, weight and bias (of the rows' sum for reduction none), as a training step takes them; the loss in
    float32, dbias empty without a bias."""
    def step(x, weight, target, bias, options):
        leaves = [t.detach().requires_grad_() for t in (x, weight, bias) if t is not None]
        with torch.enable_grad():
            loss = loss_fn(*leaves[:2], target, leaves[2] if bias is not None else None, options)
            grads = torch.autograd.grad(loss, leaves, torch.ones_like(loss))
        dbias = grads[2] if bias is not None else x.new_empty(0)
        return loss.detach().float(), grads[0], grads[1], dbias

    return step


def evaluation(loss_fn):
    """A kernel of linear_cross_entropy_loss from loss_fn(x, weight, target, bias, options) -> loss: the loss without
    grad, as evaluation computes it, in float32."""
    def step(x, weight, target, bias, options):
        with torch.no_grad():
            return (loss_fn(x, weight, target, bias, options).float(),)

    return step


def options_reason(options: CrossEntropyOptions, bias: torch.Tensor | None, takes: set[str], who: str) -> str | None:
    """Why a peer cannot take a case: the options set beyond the defaults (and a bias) that it lacks, of
    label_smoothing, z_loss, softcap, reduction (none) and bias; None if it takes them all."""
    wanted = set(options.extra_terms()) | ({"reduction none"} if options.reduction == "none" else set()) | (
        {"bias"} if bias is not None else set())
    missing = sorted(wanted - takes)
    return f"{who} has no {', '.join(missing)}" if missing else None


def reference(x, weight, target, bias=None, options: CrossEntropyOptions = DEFAULT) -> tuple[torch.Tensor, ...]:
    """(loss, dx, dweight, dbias) in float64."""
    return head_loss_and_grads(x, weight, target, bias, options, torch.float64, torch.float64)


def framework_result(x, weight, target, bias=None, options: CrossEntropyOptions = DEFAULT
                     ) -> list[tuple[torch.Tensor, ...]]:
    """PyTorch's own results in the inputs' dtype, by its two recipes: its matmuls and F.cross_entropy in that dtype,
    and F.cross_entropy on the logits upcast to float32 (torch.eager's, as language models call it); dweight and
    dbias summed in float32 over the chunks and rounded once. The bar takes the larger of their errors: where dlogits
    are float16 subnormals, either recipe can land twice as close as the other by chance (the GPU fuzz's case 181,
    where torch.eager's own result missed the bar that the first recipe alone set). In 16 bits, where the logits are
    one chunk, the second recipe also as autograd runs it, dweight and dbias each from one operation in that dtype:
    on the GPU, PyTorch lets cuBLAS reduce a 16-bit matmul in that dtype
    (torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction, on by default), several float16 subnormal
    steps off where the hidden states are tiny (GPU fuzz, case 70521: torch.eager 7.8x the bar of the float32 sums,
    and within it with that setting off)."""
    recipes = pytorch_recipes(x, weight, target, bias, options, with_grad=True)
    if x.dtype != torch.float32 and len(_chunks(x.shape[0], weight.shape[0], REFERENCE_CHUNK_ELEMENTS)) == 1:
        _, *grads = head_loss_and_grads(x, weight, target, bias, options, x.dtype, x.dtype, upcast=True)
        recipes.append((recipes[1][0], *grads))  # the loss as the second's: float32, not a float16 sum
    return recipes


def pytorch_recipes(x, weight, target, bias, options: CrossEntropyOptions, with_grad: bool) -> list[tuple]:
    """head_loss_and_grads in the inputs' dtype (dweight, dbias and the loss summed in float32) by PyTorch's two
    recipes: cross-entropy in that dtype, and on the logits upcast to float32."""
    return [head_loss_and_grads(x, weight, target, bias, options, x.dtype, torch.float32, with_grad=with_grad,
                                upcast=upcast) for upcast in (False, True)]


def error_scale(x, weight, target, bias=None, options: CrossEntropyOptions = DEFAULT, with_grad: bool = True
                ) -> tuple[torch.Tensor, ...]:
    """What each output's rounding error grows with. The logits' own rounding grows with E_i, row i's largest
    |x_i| . |w_j| (+ |b_j|), and moves each probability by p_ij times that; the gradient of the logits' scale is
    cross_entropy's (its terms' size, as error_scale there says) plus p_ij E_i, times the row's weight in the loss:
    call it S (plus the dtype's subnormal step, over rtol: a rounded dlogits' absolute error). Then dx's scale is
    S |W|, dweight's S^T |x| (each plus float32's subnormal step for each product they add up), dbias's S summed over
    the tokens, and the loss's is
    cross_entropy's plus E_i, reduced as the loss is. In float64, chunk by chunk (hidden states of 1e-38 make
    products that float32 flushes to 0). Without with_grad, (the loss's,)."""
    m, k = x.shape
    n = weight.shape[0]
    ax, aw = x.abs().double(), weight.abs().double()
    # A -inf bias masks its class (probability 0): no rounding to carry.
    ab = None if bias is None else torch.where(bias.isfinite(), bias.abs(), 0.0).double()
    chunk_options = _per_chunk(options)
    scale = _upstream(_counted(target, options), options)
    counted = target != options.ignore_index
    # Absolute roundings, as shares of the scale (compare's rtol * scale): a dlogits element, scaled by its row's
    # weight, rounds to the dtype's subnormal step at worst (probabilities of 1e-7 are 0 or 2^-24 in float16; every
    # token's alike where their hidden states are, and the M of them add up in dW); and each product that dx and dW
    # add up (N and M of them) to float32's (hidden states of 1e-38: products of 1e-41).
    rtol = TOLERANCES[x.dtype].rtol
    subnormal = _subnormal_step(x.dtype) / rtol
    product = _subnormal_step(torch.float32) / rtol
    if with_grad:
        dx = torch.empty(m, k, dtype=torch.float64, device=x.device)
        dweight = torch.zeros(n, k, dtype=torch.float64, device=x.device)
        dbias = torch.zeros(n if bias is not None else 0, dtype=torch.float64, device=x.device)
    rows = torch.zeros(m, dtype=torch.float64, device=x.device)
    for s, e in _chunks(m, n, REFERENCE_CHUNK_ELEMENTS):
        logits = x[s:e].double() @ weight.double().t()
        if bias is not None:
            logits += bias.double()
        magnitude = ax[s:e] @ aw.t() + (ab if ab is not None else 0.0)
        biggest = magnitude.amax(-1, keepdim=True)
        loss_scale, *grad_scale = cross_entropy.error_scale(logits, target[s:e], chunk_options, with_grad=with_grad)
        rows[s:e] = torch.where(counted[s:e], loss_scale.double() + biggest.squeeze(-1).double(), 0.0)
        if not with_grad:
            continue
        z = options.softcap * torch.tanh(logits / options.softcap) if options.softcap is not None else logits
        p = torch.softmax(z, -1).nan_to_num_(nan=0.0)
        # An ignored row carries nothing (0 where a NaN in its hidden state made its terms NaN: a product with 0
        # would spread it to every class's scale; in dW it stays where its hidden state is NaN, as in the reference).
        rows_counted = counted[s:e].unsqueeze(-1)
        s_chunk = torch.where(rows_counted, (grad_scale[0] + p * biggest) * scale + subnormal, 0.0)
        dx[s:e] = s_chunk @ aw + rows_counted.double() * (n * product)
        dweight += s_chunk.t() @ ax[s:e] + rows_counted.double().sum() * product
        if bias is not None:
            dbias += s_chunk.sum(0)
    loss = (rows if options.reduction == "none" else rows.sum() * scale).nan_to_num(nan=0.0, posinf=0.0)
    return (loss, dx, dweight, dbias) if with_grad else (loss,)


def _subnormal_step(dtype: torch.dtype) -> float:
    """The spacing of the dtype's subnormal numbers (2^-24 in float16, 2^-149 in float32)."""
    return torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device | str, seed: int = 0,
                options: CrossEntropyOptions = DEFAULT, bias: bool = False) -> tuple:
    """Hidden states of irregular size (each token's scaled by 0.5 to 2), a classifier whose logits spread over a few
    units (W ~ N(0, 2 / K)), targets drawn as a text's words are (zipf_targets), one row in eight ignored; a bias of
    N(0, 1) where asked."""
    m, n, k = shape.m, shape.n, shape.k or 1
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(m, k, generator=g, device=device) * torch.rand(m, 1, generator=g, device=device).mul(1.5).add(0.5)
    weight = torch.randn(n, k, generator=g, device=device) * (2.0 / k) ** 0.5
    b = torch.randn(n, generator=g, device=device).to(dtype) if bias else None
    target = zipf_targets(m, n, g, device)
    target[torch.rand(m, generator=g, device=device) < 0.125] = options.ignore_index
    return x.to(dtype), weight.to(dtype), target, b, options


def zipf_targets(m: int, n: int, generator: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """m classes of n drawn by Zipf's law, as a text's words are: class r (from 0) with probability proportional to
    1 / (r + 1). A frequent class's row of dW then adds up the hidden states of many tokens, in every chunk of them
    (with a Llama 3 vocabulary, class 0 is 8% of the tokens): where the chunks' sums are rounded to 16 bits one at a
    time, that row drifts, which the check sees (uniform targets leave most rows a token or none)."""
    cumulative = torch.arange(1, max(1, n) + 1, dtype=torch.float64, device=device).reciprocal_().cumsum_(0)
    draw = torch.rand(m, generator=generator, device=device, dtype=torch.float64) * cumulative[-1]
    return torch.searchsorted(cumulative, draw).clamp_(max=max(1, n) - 1)


def special_cases(dtype: torch.dtype, device: torch.device | str, seed: int):
    """The options alone and together (reductions, label smoothing, z-loss, soft-capping, another ignore_index), a
    bias (with a masked part of the vocabulary: -inf), every row ignored (a NaN mean, gradients zero), a token whose
    hidden state holds a NaN (its loss NaN, and every dweight with it, as PyTorch's), peaked logits (one class far
    ahead)."""
    shape = Shape(16, 64, None, 32)
    x, w, target, _, _ = make_inputs(shape, dtype, device, seed)
    for options in (CrossEntropyOptions(reduction="sum"), CrossEntropyOptions(reduction="none"),
                    CrossEntropyOptions(label_smoothing=0.1), CrossEntropyOptions(z_loss=1e-4),
                    CrossEntropyOptions(softcap=3.0), CrossEntropyOptions(ignore_index=3),
                    CrossEntropyOptions(reduction="none", label_smoothing=0.1, z_loss=1e-4, softcap=2.0)):
        t = target.masked_fill(target == DEFAULT.ignore_index, options.ignore_index)
        yield options.label, (x, w, t, None, options), None
    _, _, _, bias, _ = make_inputs(shape, dtype, device, seed + 1, bias=True)
    yield "bias", (x, w, target, bias, DEFAULT), None
    masked = bias.clone()
    masked[: shape.n // 4] = -float("inf")
    yield "bias masking a quarter of the vocabulary (-inf)", (x, w, target.clamp(min=shape.n // 4), masked,
                                                               DEFAULT), None
    yield "every row ignored", (x, w, torch.full_like(target, DEFAULT.ignore_index), None, DEFAULT), None
    nan = x.clone()
    nan[1, 3] = float("nan")
    counted = target.clone()
    counted[1] = 5
    yield "a NaN in a counted token's hidden state", (nan, w, counted, None, DEFAULT), None
    peaked = w.clone()
    peaked[7] = x[0] * 4.0 / x[0].norm().clamp_min(1e-3)  # class 7 far ahead for token 0
    yield "peaked logits", (x, peaked, target, None, DEFAULT), None


def flops(shape: Shape) -> int:
    """The three matmuls: the logits, dx, dweight: 2MNK each."""
    return 6 * shape.m * shape.n * (shape.k or 0)


def ceiling(x, weight, target, bias=None, options=DEFAULT, with_grad: bool = True):
    """The three matmuls alone on the point's inputs (the logits standing in for their gradient): the logits, dx,
    dweight, a chunk of tokens at a time past CEILING_CHUNK_BYTES of logits (dweight added up in its dtype), the
    vocabulary padded to whole 16-byte rows of logits beforehand (lab.losses.ROW_BYTES: the layout they run fastest
    in; an odd vocabulary's rows, unpadded, take them off the tensor cores' aligned path). Without with_grad, the
    logits' matmul alone (the forward's)."""
    from lab.losses import pad_vocabulary

    weight, _ = pad_vocabulary(weight, None)
    m, n = x.shape[0], weight.shape[0]
    chunks = _chunks(m, n, CEILING_CHUNK_BYTES // x.element_size())

    def matmuls():
        dweight = torch.zeros_like(weight) if len(chunks) > 1 else None
        for s, e in chunks:
            logits = x[s:e] @ weight.t()
            if not with_grad:
                continue
            dx = logits @ weight
            if dweight is None:
                dweight = logits.t() @ x[s:e]
            else:
                dweight.addmm_(logits.t(), x[s:e])
        return (dx, dweight) if with_grad else logits

    return matmuls


# Elementwise against error_scale's magnitudes: a 16-bit logit rounds to 2^-9 (bfloat16) or 2^-12 (float16) of its
# size, which the scale's p E carries; float32 matmuls sum K products (u sqrt(K) of the magnitude). PyTorch's own
# error is the bar that binds in 16-bit (lab/check.py, framework_bound).
TOLERANCES = {
    torch.float32: Tolerance(rtol=1e-4, atol_rel=1e-6, norm_tol=2.5e-5),
    torch.float16: Tolerance(rtol=4e-3, atol_rel=1e-4, norm_tol=1e-3),
    torch.bfloat16: Tolerance(rtol=3e-2, atol_rel=1e-3, norm_tol=8e-3),
}
# The heads of real models, (K, N) = (hidden size, vocabulary): GPT-2, Gemma 2 2B, Llama 3 8B, Qwen 2 7B; Llama 3's
# also at 8192 tokens (the targets' first point) and at 65536, where dW adds up 16 chunks. One run of the sweep fits in
# ten minutes of an H100 with the peers (the float64 reference of a 65536-token point alone takes seconds).
HEADS = ((768, 50257), (2304, 256000), (4096, 128256), (3584, 152064))
LLAMA3 = (4096, 128256)
SWEEPS: dict[str, tuple[Shape, ...]] = {
    "heads": tuple(Shape(m, n, None, k) for k, n in HEADS
                   for m in (1024, 4096, 16384) + ((8192, 65536) if (k, n) == LLAMA3 else ())),
    "quick": (Shape(4096, 128256, None, 4096), Shape(8192, 128256, None, 4096)),
    "cpu": (Shape(16, 96, None, 24), Shape(33, 300, None, 40), Shape(64, 1000, None, 64)),
}
# M = 0 and 1, N = 1 and 2, odd K and N.
EDGE_SHAPES = (Shape(0, 7, None, 8), Shape(1, 1, None, 4), Shape(3, 2, None, 5), Shape(5, 31, None, 17),
               Shape(9, 257, None, 33))

LINEAR_CROSS_ENTROPY = register_operator(Operator(
    name="linear_cross_entropy",
    description="loss = cross_entropy(x @ W^T + b, target) and dx, dW, db (x: M tokens x K, W: N classes x K)",
    make_inputs=make_inputs,
    special_cases=special_cases,
    reference=reference,
    tolerances=TOLERANCES,
    min_traffic=Traffic(1, 1),  # unused: its figures are FLOP/s and memory (flops, ceiling)
    bytes_formula="6*M*N*K",
    baseline="torch.eager",
    sweeps=SWEEPS,
    gpu_sweeps=("heads",),
    edge_shapes=EDGE_SHAPES,
    cpu_edge_max_n=1024,
    error_scale=error_scale,
    framework_result=framework_result,
    # The gradients' error scales sum magnitudes over terms that cancel (dweight's over the tokens: up to sqrt(M) times
    # its size): a floor of atol_rel times them (1/4 of dweight's largest value at 65536 tokens) would hide any drift
    # short of that, so theirs is a share of their largest value. The loss's scale is the logits' size, which its
    # rounding grows with: PyTorch's own 16-bit loss of one token may land within 0.0014 of the exact one by chance,
    # where the logits' rounding alone moves a float32 loss of them by 0.014 (bfloat16, CPU fuzz).
    framework_floor_from_scale=(True, False, False, False),
    output_dtypes=lambda dtype: (torch.float32, dtype, dtype, dtype),
    checked_as=lambda dtype: (dtype, dtype, dtype, dtype),
    output_names=("loss", "dx", "dweight", "dbias"),
    shape_label=lambda s: f"M={s.m} K={s.k} N={s.n}",
    x_label="M (tokens)",
    flops=flops,
    ceiling=ceiling,
    ceiling_label="3 matmuls",
    case_shape=case_shape,
    default_metrics=("latency", "pct_ceiling", "memory"),
))


def loss_reference(x, weight, target, bias=None, options: CrossEntropyOptions = DEFAULT) -> tuple[torch.Tensor]:
    """(loss,) in float64."""
    return head_loss_and_grads(x, weight, target, bias, options, torch.float64, torch.float64, with_grad=False)


def loss_framework_result(x, weight, target, bias=None, options: CrossEntropyOptions = DEFAULT
                          ) -> list[tuple[torch.Tensor]]:
    """PyTorch's own loss in the inputs' dtype by its two recipes (framework_result's, without the gradients)."""
    return pytorch_recipes(x, weight, target, bias, options, with_grad=False)


# The forward alone, as evaluation computes it: the same inputs, cases and sweeps; one matmul's FLOP, and that matmul
# alone as the ceiling.
LINEAR_CROSS_ENTROPY_LOSS = register_operator(dataclasses.replace(
    LINEAR_CROSS_ENTROPY,
    name="linear_cross_entropy_loss",
    description="loss = cross_entropy(x @ W^T + b, target) alone, as evaluation computes it (no gradient; x: M tokens "
                "x K, W: N classes x K)",
    reference=loss_reference,
    bytes_formula="2*M*N*K",
    error_scale=lambda *inputs: error_scale(*inputs, with_grad=False),
    framework_floor_from_scale=(True,),
    framework_result=loss_framework_result,
    output_dtypes=lambda dtype: (torch.float32,),
    checked_as=lambda dtype: (dtype,),
    output_names=("loss",),
    flops=lambda shape: flops(shape) // 3,
    ceiling=lambda *inputs: ceiling(*inputs, with_grad=False),
    ceiling_label="logits' matmul",
))
