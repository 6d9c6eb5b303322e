"""lab.cross_entropy: a language model's loss over given logits, computed with its gradient in one pass.

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
    A target out of range is an error here; under torch.compile, where nothing is checked on the host, it makes
    that row's loss and gradient NaN.
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
    if reduction not in REDUCTIONS:
        raise ValueError(f"lab.cross_entropy: reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0 or z_loss < 0 or (softcap is not None and not softcap > 0):
        raise ValueError(f"lab.cross_entropy: expected 0 <= label_smoothing <= 1, z_loss >= 0 and softcap > 0 or "
                         f"None, got {label_smoothing}, {z_loss}, {softcap}")
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
    flat = target.reshape(-1)
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


class _Eager(torch.autograd.Function):
    """Eagerly, the same kernels as the op torch.ops.lab_triton.cross_entropy, launched directly: the op's Python
    dispatch costs host time on every call, and a short call is host-bound."""

    @staticmethod
    def forward(ctx, rows, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap):
        dx = _ops().rows_like(rows)
        loss = _ops().loss_and_grad(rows, target, weight, ignore_index, reduction, label_smoothing, z_loss,
                                        softcap, dx, check=True)
        ctx.save_for_backward(dx)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        (dlogits,) = ctx.saved_tensors
        _ops().scale_rows(dlogits, grad_loss)
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
        (dlogits,) = ctx.saved_tensors
        torch.ops.lab_triton.scale_rows_(dlogits, grad_loss)
        return (dlogits,) + (None,) * 8

