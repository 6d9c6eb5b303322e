"""PyTorch variants: the reference op, the naive eager composition, TorchScript and torch.compile."""

from __future__ import annotations

import itertools
import types

import torch

from lab.registry import Traffic, Unavailable, Variant, register


def torch_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """max, subtract, exp, sum, divide: five kernels, each a trip through memory (float32 math)."""
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"torch.naive: expected float32, float16 or bfloat16, got {x.dtype}")
    xf = x.float()
    # The shift leaves softmax unchanged, so its derivative is zero: detached, autograd does not send
    # the row's gradient sum (0, up to its float32 rounding) to the max element. Not detached, that
    # rounding lands on one element, up to 100x the tolerance on long rows of near-equal values.
    m = xf.amax(dim=-1, keepdim=True).detach()
    e = torch.exp(xf - m)
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def naive_traffic(dtype: torch.dtype) -> Traffic:
    """Each eager kernel reads and writes its whole operand; float32 temporaries weigh 4/itemsize."""
    w = 4 / torch.empty((), dtype=dtype).element_size()
    # amax: read; sub: read + write; exp: read + write; sum: read; div: read + write
    reads, writes = 5 * w, 3 * w
    if w != 1:  # 16-bit x: x.float() (read x, write a float32 copy) and .to(dtype) (read it, write y)
        reads, writes = reads + 1 + w, writes + w + 1
    return Traffic(reads, writes)


def build_jit():
    try:
        return torch.jit.script(naive_softmax)
    except Exception as e:  # TorchScript is deprecated; some builds reject or lack it
        raise Unavailable(f"torch.jit.script is not available in torch {torch.__version__}: {e}") from e


_COMPILED = itertools.count()


def build_compile():
    """A fresh torch.compile for one shape, changing nothing of the process's settings. Dynamo keeps
    its compiled graphs per code object: each build compiles a copy of torch_softmax's code of its
    own, so the graph of this shape is the only one its guards check (the lab's timings carry no guard
    checks of other shapes, and no recompile limit is reached), and the copy is dropped with the
    kernel."""
    code = torch_softmax.__code__.replace(co_name=f"torch_softmax_compiled_{next(_COMPILED)}")
    fresh = types.FunctionType(code, torch_softmax.__globals__, code.co_name)
    compiled = torch.compile(fresh, dynamic=False, fullgraph=True)

    def kernel(x: torch.Tensor) -> torch.Tensor:
        # Inductor would compile an integer softmax that eager PyTorch refuses: refuse it as eager does.
        if not x.is_floating_point():
            raise TypeError(f"torch.compile: softmax expects a floating-point tensor, got {x.dtype}")
        return compiled(x)

    return kernel


COMMON = dict(op="softmax", backend="torch", runs_on_cpu=True)
register(Variant(
    name="torch.softmax", description="torch.softmax: PyTorch's own kernel (the baseline)",
    build=lambda: torch_softmax, traffic=Traffic(1, 1), **COMMON,
))
register(Variant(
    name="torch.naive", description="eager max, sub, exp, sum, div: one kernel and one HBM trip each",
    build=lambda: naive_softmax, traffic=naive_traffic, **COMMON,
))
register(Variant(
    name="torch.jit_naive", description="the naive composition under torch.jit.script (fuses the pointwise ops)",
    build=build_jit, traffic=naive_traffic, **COMMON,
))
register(Variant(
    name="torch.compile", description="torch.compile(torch.softmax), compiled for each shape (Inductor)",
    build=build_compile, traffic=Traffic(1, 1), per_shape=True, **COMMON,
))

# --- vector_add -------------------------------------------------------------------------------------


def torch_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return torch.add(a, b, out=out)


register(Variant(
    name="torch.add", op="vector_add", backend="torch", runs_on_cpu=True, writes_out=True,
    description="torch.add(a, b): PyTorch's elementwise kernel (the baseline)",
    build=lambda: torch_add, traffic=Traffic(2, 1),
))

# --- softmax_backward ---------------------------------------------------------------------------------


def torch_softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return torch._softmax_backward_data(dy, y, -1, y.dtype)


register(Variant(
    name="torch.softmax_backward", op="softmax_backward", backend="torch", runs_on_cpu=True,
    description="torch._softmax_backward_data: PyTorch's softmax backward kernel (the baseline)",
    build=lambda: torch_softmax_backward, traffic=Traffic(2, 1),
))
