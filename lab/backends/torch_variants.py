"""PyTorch variants: the reference op, the naive eager composition, TorchScript and torch.compile."""

from __future__ import annotations

import warnings

import torch

from lab.registry import Traffic, Unavailable, Variant, register


def torch_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """max, subtract, exp, sum, divide: five kernels, each a trip through memory (float32 math)."""
    xf = x.float()
    m = xf.amax(dim=-1, keepdim=True)
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


def build_compile():
    """A fresh torch.compile per shape. Dynamo caches per code object and, past its recompile limit,
    would fall back to eager without failing; resetting it and failing on the limit means every
    timing is of a compiled kernel."""
    import torch._dynamo

    # Inductor says, once per compiled shape, that it split a long row's reduction and so did not
    # use its online softmax: a note about its choice, not a problem of the run.
    warnings.filterwarnings("ignore", message="\\s*Online softmax is disabled", category=UserWarning)
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    torch._dynamo.reset()
    return torch.compile(torch_softmax, dynamic=False, fullgraph=True)


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
