"""lab.cross_entropy: a language model's loss over given logits, computed with its gradient in one pass; and
lab.linear_cross_entropy: the same loss of a classifier's output (hidden states times the output embedding), its
logits made and consumed a chunk of tokens at a time (below).

Part of the product (it imports nothing of the harness). The kernel is the lab's Triton cross-entropy
(triton_kernels/cross_entropy.py): where a gradient is wanted, the forward writes dlogits while the row is on chip
(one read of the logits, one write), and the backward only scales it by the upstream gradient, in place, and not at
all where that gradient is 1 (a loss at the end of the graph); where none is wanted (evaluation), the loss alone
(one read, nothing of the logits' size written). Rows of up to 16384 logits are held in one Triton
program; longer ones are split over a CUDA thread-block cluster (csrc/cross_entropy/cluster.cu) where it takes the
options and the length, else streamed twice by the Triton kernel (triton_kernels.cross_entropy.cuda_takes).
"""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import torch

REDUCTIONS = ("mean", "sum", "none")
_LOADED = []


def _ops():
    """Registers torch.ops.lab_triton's cross-entropy ops (importing Triton) on first use."""
    if not _LOADED:
        import triton_kernels.cross_entropy as kernels
        from lab.ops import ExtensionUnavailable, load_extension

        # The CUDA cluster kernel where the extension is built; else the Triton kernels alone
        # (triton_kernels.cross_entropy.cuda_takes says which runs).
        with contextlib.suppress(ExtensionUnavailable):
            load_extension()
        _LOADED.append(kernels)
    return _LOADED[0]


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, ignore_index: int = -100, reduction: str = "mean",
                  label_smoothing: float = 0.0, z_loss: float = 0.0, softcap: float | None = None,
                  weight: torch.Tensor | None = None, inplace: bool = False) -> torch.Tensor:
    """F.cross_entropy(logits, target, ...) over the last dimension of `logits` (..., V), with the lab's kernel.

    target: int64 of logits.shape[:-1], each in [0, V) or ignore_index. Options as F.cross_entropy's (weight,
    ignore_index, reduction, label_smoothing), and z_loss (lambda: lambda * logsumexp(z)^2 added to each counted
    row) and softcap (z = softcap * tanh(x / softcap) before the loss). The loss is float32 whatever the logits'
    dtype (float32, float16, bfloat16; CUDA tensors); reduction "none" gives one per target, of target's shape.
    A mean over no counted rows is NaN, as PyTorch's.
    Differentiable in the logits: the gradient is written by the forward when logits require grad.
    inplace=True writes that gradient over the logits (saving their memory, as Liger does): the logits are
    consumed, and the forward then needs them to require grad.
    A target out of range makes that row's loss and gradient NaN, and is a ValueError naming it: raised here where
    no gradient is wanted or inplace=True, and by the backward where one is (the forward then leaves the check to
    the backward, so as not to wait for the GPU); under torch.compile, where nothing is checked on the host, the NaN
    row alone.
    """
    if not isinstance(logits, torch.Tensor) or not isinstance(target, torch.Tensor):
        raise TypeError("lab.cross_entropy: logits and target must be tensors")
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"lab.cross_entropy: expected float32, float16 or bfloat16 logits, got {logits.dtype}")
    if target.dtype != torch.int64:
        raise TypeError(f"lab.cross_entropy: expected int64 targets (class indices), got {target.dtype}")
    if logits.dim() < 1 or target.shape != logits.shape[:-1]:
        raise ValueError(f"lab.cross_entropy: target's shape must be logits' without its last (vocabulary) "
                         f"dimension: logits {tuple(logits.shape)}, target {tuple(target.shape)}")
    if logits.device.type != "cuda" or target.device != logits.device:
        raise ValueError(f"lab.cross_entropy: expected logits and target on one CUDA device, got {logits.device} "
                         f"and {target.device}")
    _check_options("lab.cross_entropy", reduction, label_smoothing, z_loss, softcap)
    vocab = logits.shape[-1]
    if weight is not None and (weight.shape != (vocab,) or weight.device != logits.device
                               or not weight.is_floating_point()):
        raise ValueError(f"lab.cross_entropy: weight must be a floating-point tensor of shape ({vocab},) on "
                         f"{logits.device}")
    kernels = _ops()
    shape = (math.prod(logits.shape[:-1]), vocab)
    if inplace:
        if not (torch.is_grad_enabled() and logits.requires_grad):
            raise ValueError("lab.cross_entropy: inplace=True writes the gradient over the logits, so they must "
                             "require grad (with grad mode on)")
        if not logits.is_contiguous():
            raise ValueError("lab.cross_entropy: inplace=True needs contiguous logits (the gradient is written over "
                             "them as they lie)")
    rows = logits.reshape(shape)  # a view where the rows are evenly strided
    if vocab > 1 and rows.stride(1) != 1:
        rows = rows.contiguous()
    flat = target.reshape(-1).contiguous()  # the kernels read one target after another
    args = (ignore_index, reduction, float(label_smoothing), float(z_loss), softcap)
    wants_grad = torch.is_grad_enabled() and logits.requires_grad
    check = not torch.compiler.is_compiling()  # a target out of range: an error eagerly, a NaN row when compiled
    if inplace:
        loss = _InPlace.apply(rows, flat, weight, *args, check)
    elif torch.compiler.is_compiling():
        loss = torch.ops.lab_triton.cross_entropy(rows, flat, weight, *args, wants_grad)[0]
    elif wants_grad:
        loss = _Eager.apply(rows, flat, weight, *args)
    else:
        loss = kernels.loss_and_grad(rows, flat, weight, *args, None, check=True)
    return loss.reshape(target.shape) if reduction == "none" else loss


def _check_options(name: str, reduction: str, label_smoothing: float, z_loss: float, softcap: float | None) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{name}: reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0 or z_loss < 0 or (softcap is not None and not softcap > 0):
        raise ValueError(f"{name}: expected 0 <= label_smoothing <= 1, z_loss >= 0 and softcap > 0 or None, got "
                         f"{label_smoothing}, {z_loss}, {softcap}")


class _Eager(torch.autograd.Function):
    """Eagerly, the same kernels as the op torch.ops.lab_triton.cross_entropy, launched directly: the op's Python
    dispatch costs host time on every call, and a short call is host-bound. The check of the targets is launched by
    the forward and waited for by the backward (which raises for a bad target): a wait in the forward would hold the
    host until the GPU had done everything queued before the loss, and the backward's launches would then reach an
    idle GPU (notebook/cross-entropy-host-time/). The wait is for the targets' step alone, which runs before the
    loss's kernel (TargetCheck)."""

    @staticmethod
    def forward(ctx, rows, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap):
        dx = _ops().rows_like(rows)
        loss, ctx.targets = _ops().loss_and_grad_checked_later(rows, target, weight, ignore_index, reduction,
                                                                label_smoothing, z_loss, softcap, dx)
        ctx.save_for_backward(dx)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        _once(ctx, "lab.cross_entropy")
        if ctx.targets is not None:
            ctx.targets.wait()
        (dlogits,) = ctx.saved_tensors
        _scale_rows(dlogits, grad_loss)
        return (dlogits,) + (None,) * 7


class _InPlace(torch.autograd.Function):
    """The loss, its gradient written over the logits by the forward; the backward scales it in place and returns it
    (autograd, not this function, raises if anything saved the logits for its own backward)."""

    @staticmethod
    def forward(ctx, rows, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, check):
        loss = torch.ops.lab_triton.cross_entropy_(rows, target, weight, ignore_index, reduction, label_smoothing,
                                                   z_loss, softcap, check)
        ctx.save_for_backward(rows)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        _once(ctx, "lab.cross_entropy")
        (dlogits,) = ctx.saved_tensors
        _scale_rows(dlogits, grad_loss)
        return (dlogits,) + (None,) * 8


def _scale_rows(g: torch.Tensor, scale: torch.Tensor) -> None:
    """g (rows x columns) scaled in place, row i by scale (one float32, or one per row): the lab's kernel, which
    leaves rows whose scale is 1 unread (the traced op under torch.compile)."""
    if torch.compiler.is_compiling():
        torch.ops.lab_triton.scale_rows_(g, scale)
    else:
        _ops().scale_rows(g, scale)


def _once(ctx, name: str) -> None:
    """Eagerly, a backward that scales in place the gradient its forward computed runs once per forward: a second
    backward through the same graph (retain_graph) would scale it again, so it is an error, not a wrong gradient."""
    if torch.compiler.is_compiling():
        return
    if getattr(ctx, "spent", False):
        raise RuntimeError(f"{name}: its backward runs once (the forward computed the gradient, which the backward "
                           "scales in place); compute the loss again to go back through it again")
    ctx.spent = True

# --- lab.linear_cross_entropy: the classifier's matmul and the loss, the logits never whole in memory -------------

LOGITS_CHUNK_BYTES = 2**30
"""The default chunk of tokens, where there are several: as many as have this many bytes of logits (4096 tokens of
128256 bfloat16 logits), so that a chunk's buffer (its logits, then their gradient over them) takes 1 GiB up to
vocabularies of millions (256 tokens at least), and its matmuls are large enough to run at the matmul's speed."""


def chunk_tokens_for(tokens: int, vocab: int, hidden: int, itemsize: int, accumulate_itemsize: int) -> int:
    """The tokens of a chunk by default: every token in one chunk where that takes no more memory than chunking would;
    else LOGITS_CHUNK_BYTES of logits a chunk, a multiple of 256 (at least 256). One chunk holds every logit and
    dweight; chunks hold one chunk's logits beside dweight's sum in the accumulate dtype, then that sum beside dweight
    (the chunk's buffer freed; the mean's factor makes a new dweight whatever the accumulate dtype). One chunk is also
    the fastest (dweight from one matmul, nothing added up: as PyTorch computes it); at V = 128256 and K = 4096 in
    bfloat16 with float32 sums, chunks take less memory past 8192 tokens."""
    weights = vocab * hidden
    one_chunk = (tokens * vocab + weights) * itemsize
    chunked = max(LOGITS_CHUNK_BYTES + weights * accumulate_itemsize, weights * (accumulate_itemsize + itemsize))
    if one_chunk <= chunked:
        return max(1, tokens)
    return max(256, LOGITS_CHUNK_BYTES // (vocab * itemsize) // 256 * 256)


def linear_cross_entropy(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None = None,
                         *, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                         z_loss: float = 0.0, softcap: float | None = None, chunk_tokens: int | None = None,
                         accumulate: torch.dtype = torch.float32) -> torch.Tensor:
    """cross_entropy(x @ weight.T + bias, target) with lab.cross_entropy's options, the N x V logits never in memory at
    once: the tokens go through in chunks (chunk_tokens; default chunk_tokens_for), each chunk's logits made by one
    matmul, its loss and gradient by the lab's cross-entropy kernel (one read of the chunk's logits, their gradient
    written over them), then its share of the gradients by two more matmuls: dx of the chunk, and dweight (dbias),
    from one matmul where there is one chunk, else added up over the chunks in `accumulate` (float32, or the weight's
    dtype: less memory, rounded once a chunk).

    x: (..., H) hidden states; weight: (V, H) classifier; bias: (V,) or None; all of one float dtype (float32, float16,
    bfloat16) on one CUDA device (or on the CPU where the Triton kernels are interpreted, TRITON_INTERPRET=1: for
    tests); target: int64 of x.shape[:-1]. Returns the loss (float32), as lab.cross_entropy.
    Differentiable in x, weight and bias: with the mean or the sum, the forward computes their gradients (the logits
    are gone by the backward), which the backward scales by the loss's gradient, once (a second backward through the
    same graph is an error); with reduction "none" the backward computes them again, chunk by chunk, each row scaled
    by its own upstream gradient. A target out of range is an error (eagerly; under torch.compile its row is NaN).
    """
    name = "lab.linear_cross_entropy"
    tensors = {"x": x, "weight": weight, "target": target, **({"bias": bias} if bias is not None else {})}
    if not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        raise TypeError(f"{name}: x, weight, target and bias must be tensors")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16) or weight.dtype != x.dtype or (
            bias is not None and bias.dtype != x.dtype):
        raise TypeError(f"{name}: expected x, weight and bias of one dtype, float32, float16 or bfloat16, got "
                        + ", ".join(f"{k} {t.dtype}" for k, t in tensors.items() if k != "target"))
    if target.dtype != torch.int64:
        raise TypeError(f"{name}: expected int64 targets (class indices), got {target.dtype}")
    if x.dim() < 1 or weight.dim() != 2 or weight.shape[1] != x.shape[-1] or target.shape != x.shape[:-1] or (
            bias is not None and bias.shape != weight.shape[:1]):
        raise ValueError(f"{name}: expected x (..., H), weight (V, H), target of x's shape without H and bias (V,), "
                         "got " + ", ".join(f"{k} {tuple(t.shape)}" for k, t in tensors.items()))
    _check_options(name, reduction, label_smoothing, z_loss, softcap)
    if chunk_tokens is not None and (not isinstance(chunk_tokens, int) or chunk_tokens < 1):
        raise ValueError(f"{name}: chunk_tokens must be a positive int or None, got {chunk_tokens!r}")
    if accumulate not in (torch.float32, weight.dtype):
        raise ValueError(f"{name}: accumulate must be torch.float32 or the weight's dtype ({weight.dtype}), got "
                         f"{accumulate}")
    if any(t.device != x.device for t in tensors.values()) or not _runs_on(x.device):
        raise ValueError(f"{name}: expected every tensor on one CUDA device (or the CPU under TRITON_INTERPRET=1), got "
                         + ", ".join(f"{k} on {t.device}" for k, t in tensors.items()))
    rows, flat = x.reshape(-1, x.shape[-1]), target.reshape(-1).contiguous()
    vocab = weight.shape[0]
    # One check of every target (the chunks' kernels check none), eagerly: not traced, nor captured into a CUDA graph
    # (nothing may wait there), where a bad target's row is NaN.
    checking = not torch.compiler.is_compiling() and not (x.is_cuda and torch.cuda.is_current_stream_capturing())
    first_bad = _first_bad_target(flat, vocab, ignore_index) if checking else None
    wants_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (x, weight, bias) if t is not None)
    chunk = chunk_tokens or chunk_tokens_for(rows.shape[0], vocab, weight.shape[1], x.element_size(),
                                             accumulate.itemsize if wants_grad else x.element_size())
    spec = _LinearSpec(ignore_index, reduction, float(label_smoothing), float(z_loss), softcap, chunk, accumulate)
    loss = _linear_cross_entropy(rows, weight, bias, flat, spec)
    if first_bad is not None and (row := first_bad()) < flat.numel():
        raise _ops().out_of_range(name, int(flat[row]), row, vocab, ignore_index)
    return loss.reshape(target.shape) if reduction == "none" else loss


def _first_bad_target(flat: torch.Tensor, vocab: int, ignore_index: int):
    """Starts the check of every target on the device and returns a function that waits for it and gives the first
    row whose target is neither ignore_index nor in [0, vocab), or len(flat) where none is. On a GPU the answer comes
    to pinned host memory behind an event, so that the wait, after the loss's work is launched, is for the check
    alone and the GPU is never idle for it (a wait before the work left a 1024 x 256000 x 2304 call's GPU idle for
    1 ms); the rows whose targets are out of range meanwhile get a NaN loss and gradient from the kernels."""
    n = flat.numel()
    rows = torch.arange(n, device=flat.device)
    first = torch.where((flat != ignore_index) & ((flat < 0) | (flat >= vocab)), rows, n).amin() if n else None
    if first is None:
        return lambda: 0
    if not flat.is_cuda:
        return lambda: int(first)
    answer = torch.empty((), dtype=torch.int64, pin_memory=True)
    answer.copy_(first, non_blocking=True)
    done = torch.cuda.Event()
    done.record()

    def wait() -> int:
        done.synchronize()
        return int(answer)

    return wait


def _runs_on(device: torch.device) -> bool:
    """CUDA, or the CPU where the Triton kernels are interpreted (TRITON_INTERPRET=1 before they were imported)."""
    if device.type == "cuda":
        return True
    _ops()
    from triton_kernels.common import INTERPRETED

    return device.type == "cpu" and INTERPRETED


class LinearCrossEntropyLoss(torch.nn.Module):
    """lab.linear_cross_entropy as a module: the options fixed at construction, forward(x, weight, target, bias=None)
    (a language model's head: x the last hidden states, weight the output embedding)."""

    def __init__(self, *, ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0,
                 z_loss: float = 0.0, softcap: float | None = None, chunk_tokens: int | None = None,
                 accumulate: torch.dtype = torch.float32):
        super().__init__()
        _check_options("lab.LinearCrossEntropyLoss", reduction, label_smoothing, z_loss, softcap)
        self.options = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=label_smoothing,
                            z_loss=z_loss, softcap=softcap, chunk_tokens=chunk_tokens, accumulate=accumulate)

    def forward(self, x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None = None
                ) -> torch.Tensor:
        return linear_cross_entropy(x, weight, target, bias, **self.options)


class _LinearSpec(NamedTuple):
    ignore_index: int
    reduction: str
    label_smoothing: float
    z_loss: float
    softcap: float | None
    chunk: int  # tokens a chunk
    accumulate: torch.dtype  # dweight's and dbias's sums over the chunks


def _linear_cross_entropy(rows: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, target: torch.Tensor,
                          spec: _LinearSpec) -> torch.Tensor:
    """The loss of rows (N x H) and target (N), checked: the loss alone, the per-row loss with its recomputing
    backward, or the reduced loss with its gradients computed by the forward."""
    _ops()  # the kernels' ops registered (torch.ops.lab_triton), before anything traced names them
    if not (torch.is_grad_enabled() and any(t.requires_grad for t in (rows, weight, bias) if t is not None)):
        return _linear_loss(rows, weight, bias, target, spec)
    if spec.reduction == "none":
        return _LinearPerRow.apply(rows, weight, bias, target, spec)
    return _LinearPrecomputed.apply(rows, weight, bias, target, spec)


def _chunks(rows: torch.Tensor, spec: _LinearSpec):
    """(start, end) of each chunk of tokens."""
    n = rows.shape[0]
    return [(s, min(n, s + spec.chunk)) for s in range(0, n, spec.chunk)]


ROW_BYTES = 16
"""Each row of a chunk's logits starts on this boundary: a vocabulary whose rows would not (50257 in 16-bit) is padded
to the next one (the classifier gets zero rows, the logits zero columns that the loss never reads and that add nothing
to dx and dweight), so that the three matmuls take the tensor cores' aligned path: unpadded, at 50257 x 768 they alone
took 1.9-3.5x the time of torch.compile's whole call, which pads (H100)."""


def pad_vocabulary(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(weight, bias) padded with zero rows to whole ROW_BYTES rows of logits, or as they are where they are whole."""
    vocab, hidden = weight.shape
    per_row = ROW_BYTES // weight.element_size()
    padded = -(-vocab // per_row) * per_row
    if padded == vocab:
        return weight, bias
    weight = torch.cat([weight, weight.new_zeros(padded - vocab, hidden)])
    return weight, None if bias is None else torch.cat([bias, bias.new_zeros(padded - vocab)])


def _logits(xc: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
    """xc @ weight.T (+ bias) into `out` (a chunk's buffer)."""
    return torch.mm(xc, weight.t(), out=out) if bias is None else torch.addmm(bias, xc, weight.t(), out=out)


def _chunk_loss(logits: torch.Tensor, target: torch.Tensor, spec: _LinearSpec, reduction: str,
                with_grad: bool) -> torch.Tensor:
    """The chunk's loss (reduced as asked, or per row), with_grad its gradient (of the chunk's loss so reduced; the
    rows' sum for none) written over the logits: the lab's cross-entropy kernel (the traced op under torch.compile)."""
    args = (spec.ignore_index, reduction, spec.label_smoothing, spec.z_loss, spec.softcap)
    if torch.compiler.is_compiling():
        if with_grad:
            return torch.ops.lab_triton.cross_entropy_(logits, target, None, *args)
        return torch.ops.lab_triton.cross_entropy(logits, target, None, *args, False)[0]
    return _ops().loss_and_grad(logits, target, None, *args, logits if with_grad else None)


def _buffer(rows: torch.Tensor, weight: torch.Tensor, spec: _LinearSpec) -> torch.Tensor:
    """The chunks' buffer of logits (chunk x V, the weight's dtype), reused by every chunk."""
    return torch.empty(min(spec.chunk, rows.shape[0]), weight.shape[0], dtype=weight.dtype, device=weight.device)


def _linear_loss(rows, weight, bias, target, spec: _LinearSpec) -> torch.Tensor:
    """The loss alone (no gradient): each chunk's logits, then the loss's kernel reading them once."""
    vocab = weight.shape[0]
    weight, bias = pad_vocabulary(weight, bias)
    logits = _buffer(rows, weight, spec)
    per_row = spec.reduction == "none"
    parts = []
    for s, e in _chunks(rows, spec):
        lc = _logits(rows[s:e], weight, bias, logits[: e - s])[:, :vocab]
        parts.append(_chunk_loss(lc, target[s:e], spec, "none" if per_row else "sum", False))
    if per_row:
        return torch.cat(parts) if parts else rows.new_empty(0, dtype=torch.float32)
    total = _sum(parts, rows)
    return total / _denominator(target, spec) if spec.reduction == "mean" else total


def _denominator(target: torch.Tensor, spec: _LinearSpec) -> torch.Tensor:
    """The mean's: the rows whose target is not ignore_index (float32, on the device; 0 gives a NaN mean)."""
    return (target != spec.ignore_index).sum().float()


def _accumulate(total: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """total += a @ b, in total's dtype: a float32 total from 16-bit a and b straight out of the GPU's matmul
    (addmm's out_dtype: no product the size of total); traced, and on the CPU, through a float32 product (mm's
    out_dtype; torch 2.11 cannot trace addmm's), or one in a's dtype."""
    if total.dtype == a.dtype:
        total.addmm_(a, b)
    elif total.is_cuda and not torch.compiler.is_compiling():
        torch.addmm(total, a, b, out_dtype=total.dtype, out=total)
    elif total.is_cuda:
        total.add_(torch.mm(a, b, out_dtype=total.dtype))
    else:
        total.add_(torch.mm(a, b))


def _product(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """a @ b in `dtype`: the matmul's own output where that is a's dtype or on the GPU (mm's out_dtype: float32 sums
    of 16-bit operands, no product the size of the result besides it); on the CPU, a product in a's dtype, cast."""
    if dtype == a.dtype:
        return torch.mm(a, b)
    return torch.mm(a, b, out_dtype=dtype) if a.is_cuda else torch.mm(a, b).to(dtype)


def _gradients(rows, weight, bias, target, spec: _LinearSpec, needs: tuple[bool, bool, bool],
               row_scale: torch.Tensor | None = None):
    """(loss, dx, dweight, dbias): the loss as the spec reduces it and its gradients in x's and the weight's dtypes,
    chunk by chunk, each gradient None where `needs` (x's, weight's, bias's) says it is not wanted; row_scale: each
    row's gradient scaled by it first (reduction "none": the upstream gradient of each row's loss, whose sum the
    gradients are then of). Over one chunk (without row_scale) the kernel reduces the loss itself, so that its
    gradient is the loss's, and dweight and dbias come from one matmul and one sum in the weight's dtype, as PyTorch's.
    Over several, the kernel gives each chunk's loss sum and its gradient; dx of a chunk is that gradient's product
    times the mean's factor (1 / the counted rows; 0 where none is), rounded once, and dweight and dbias are added up
    in spec.accumulate and rounded once at the end, times that factor."""
    chunks = _chunks(rows, spec)
    in_kernel = len(chunks) == 1 and row_scale is None and spec.reduction != "none"
    sums = weight.dtype if len(chunks) <= 1 else spec.accumulate
    denominator = _denominator(target, spec) if spec.reduction == "mean" and not in_kernel else None
    factor = None if denominator is None else torch.where(denominator > 0, 1.0 / denominator, 0.0)
    vocab = weight.shape[0]
    weight, bias = pad_vocabulary(weight, bias)  # the products below run over whole rows, their zero columns included
    buffer = _buffer(rows, weight, spec)
    dx = torch.empty(rows.shape, dtype=rows.dtype, device=rows.device) if needs[0] else None  # rows contiguous
    dweight = torch.zeros(weight.shape, dtype=sums, device=weight.device) if needs[1] and not chunks else None
    dbias = torch.zeros(bias.shape, dtype=sums, device=bias.device) if needs[2] and not chunks else None
    parts = []
    for s, e in chunks:
        xc = rows[s:e]
        gc = _logits(xc, weight, bias, buffer[: e - s])
        loss_rows = gc[:, :vocab]  # the kernel writes their gradient over them: gc is then dlogits
        parts.append(_chunk_loss(loss_rows, target[s:e], spec, spec.reduction if in_kernel else "sum", True))
        if row_scale is not None:
            _scale_rows(loss_rows, row_scale[s:e])
        if gc.shape[1] > vocab:  # the padding's logits are 0, or NaN where a token's hidden state holds one
            gc[:, vocab:].zero_()
        if dx is not None:
            if factor is None:
                torch.mm(gc, weight, out=dx[s:e])
            else:
                _rounded(_product(gc, weight, torch.float32), factor, out=dx[s:e])
        if needs[1]:
            if dweight is None:  # the first chunk's product makes the total
                dweight = _product(gc.t(), xc, sums)
            else:
                _accumulate(dweight, gc.t(), xc)
        if needs[2]:
            part = gc.sum(0, dtype=sums)
            dbias = part if dbias is None else dbias.add_(part)
    buffer = gc = loss_rows = None  # freed before the sums' rounding allocates dweight and dbias
    dweight, dbias = (None if g is None else _rounded(g[:vocab], factor, dtype=weight.dtype) for g in (dweight, dbias))
    total = _sum(parts, rows)
    return (total if denominator is None else total / denominator), dx, dweight, dbias


def _rounded(g: torch.Tensor, factor: torch.Tensor | None, dtype: torch.dtype | None = None,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """g times factor (None: 1), rounded once to dtype or into `out`: g itself where nothing changes; eagerly one
    pass (a multiply into the result), traced the compiler's to fuse."""
    dtype = out.dtype if out is not None else dtype
    if factor is None and g.dtype == dtype and out is None:
        return g
    if torch.compiler.is_compiling():
        scaled = g if factor is None else g * factor
        return scaled.to(dtype) if out is None else out.copy_(scaled)
    if out is None:
        out = torch.empty(g.shape, dtype=dtype, device=g.device)
    return out.copy_(g) if factor is None else torch.mul(g, factor, out=out)


def _sum(parts: list[torch.Tensor], rows: torch.Tensor) -> torch.Tensor:
    """The chunks' loss sums added up, out of place (a forward's output changed in place after it was made loses its
    gradient under torch.compile), 0 for no chunks."""
    return torch.stack(parts).sum() if parts else rows.new_zeros((), dtype=torch.float32)


class _LinearPrecomputed(torch.autograd.Function):
    """The mean or the sum: the forward computes the loss's gradients while each chunk's logits exist, and the
    backward scales them by the loss's gradient, in place (not at all where it is 1: a loss at the end of the graph),
    once."""

    @staticmethod
    def forward(ctx, rows, weight, bias, target, spec: _LinearSpec):
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2])
        loss, dx, dweight, dbias = _gradients(rows, weight, bias, target, spec, needs)
        ctx.save_for_backward(dx, dweight, dbias)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grads = ctx.saved_tensors
        scale = grad_loss.float()
        if torch.compiler.is_compiling():  # traced: scaled copies, which the compiler plans
            return (*(None if g is None else (g * scale).to(g.dtype) for g in grads), None, None)
        _once(ctx, "lab.linear_cross_entropy")
        for g in grads:
            if g is not None and g.numel():
                _scale_rows(g if g.dim() == 2 else g.view(1, -1), scale)
        return (*grads, None, None)


class _LinearPerRow(torch.autograd.Function):
    """reduction "none": the forward computes the loss alone; the backward computes the gradients again, chunk by
    chunk, each row's scaled by its upstream gradient before the matmuls."""

    @staticmethod
    def forward(ctx, rows, weight, bias, target, spec: _LinearSpec):
        ctx.save_for_backward(rows, weight, bias, target)
        ctx.spec = spec
        return _linear_loss(rows, weight, bias, target, spec)

    @staticmethod
    def backward(ctx, grad_loss):
        rows, weight, bias, target = ctx.saved_tensors
        needs = (ctx.needs_input_grad[0], ctx.needs_input_grad[1], bias is not None and ctx.needs_input_grad[2])
        _, dx, dweight, dbias = _gradients(rows, weight, bias, target, ctx.spec, needs, grad_loss.float().contiguous())
        return dx, dweight, dbias, None, None
