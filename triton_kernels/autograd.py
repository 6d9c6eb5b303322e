"""Gradients for the Triton softmax entries (and the lab's CUDA ops): dx = y * (dy - sum(dy * y)).

`differentiable(forward)` wraps a softmax entry `forward(x, out=None)`: called on a tensor that
requires grad, with grad mode on, it records a backward that runs `softmax_backward` on the saved
output. An `out=` call cannot be recorded (autograd does not differentiate into a given buffer): it
raises instead of returning a result whose gradient would silently be missing.
"""

import functools

import torch

from triton_kernels.softmax_backward import MAX_N, softmax_backward_fused, softmax_backward_looped


def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The lab's softmax backward on 2-D rows: rows in registers up to MAX_N elements, looped beyond."""
    dy = dy.contiguous() if dy.dim() == 2 and dy.shape[1] > 1 and dy.stride(1) != 1 else dy
    return (softmax_backward_fused if y.shape[1] <= MAX_N else softmax_backward_looped)(y, dy)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, forward) -> torch.Tensor:
        y = forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        (y,) = ctx.saved_tensors
        return softmax_backward(y, dy), None


def differentiable(forward):
    name = forward.__name__

    @functools.wraps(forward)
    def entry(x: torch.Tensor, out: torch.Tensor | None = None, *args, **kwargs) -> torch.Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            if out is not None:
                raise RuntimeError(f"{name}: out= cannot be differentiated; call it without out on a tensor "
                                   "that requires grad")
            return _Softmax.apply(x, lambda t: forward(t, None, *args, **kwargs))
        return forward(x, out, *args, **kwargs)

    return entry
