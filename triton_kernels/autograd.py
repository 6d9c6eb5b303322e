"""Gradients for the Triton softmax entries (and the lab's CUDA ops): dx = y * (dy - sum(dy * y)).

`softmax_backward(y, dy)` is the op torch.ops.lab_triton.softmax_backward, a torch.library.triton_op:
torch.compile sees its kernels through wrap_triton and traces them (AOTAutograd traces a backward with
fake tensors, which a raw Triton launch cannot take), so a compiled backward runs the same kernels as an
eager one. Every autograd formula of the lab that runs the Triton backward calls this op.

`differentiable(forward)` wraps a softmax entry `forward(x, out=None)`: called on a tensor that
requires grad, with grad mode on, it records a backward that runs `softmax_backward` on the saved
output. An `out=` call cannot be recorded (autograd does not differentiate into a given buffer): it
raises instead of returning a result whose gradient would silently be missing.
"""

import functools

import torch
from torch.library import triton_op

from triton_kernels.common import traceable
from triton_kernels.softmax_backward import _prepare, launch


@triton_op("lab_triton::softmax_backward", mutates_args=())
def softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """The lab's Triton softmax backward on 2-D rows: rows in registers up to MAX_N elements, looped beyond."""
    dy = dy.contiguous()  # the gradient of a sum is an expanded tensor (strides 0); a no-op otherwise
    out = _prepare(y, dy, None, "lab_triton::softmax_backward")
    return launch(y, dy, out, traceable)


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, forward) -> torch.Tensor:
        y = forward(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        (y,) = ctx.saved_tensors
        return torch.ops.lab_triton.softmax_backward(y, dy), None


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
