"""softmax-lab: softmax and the operators built on it, in PyTorch, Triton and CUDA C++, checked against float64
and benchmarked side by side.

The product is `lab.softmax(x, dim=-1)`: for each shape, the fastest of the lab's CUDA and Triton kernels
measured on this GPU model (lab/tables/), on a tensor of any rank, differentiable and compilable. Its path is
this module, lab/ops.py and lab/dispatch.py, which import nothing of the harness. The harness (the registry,
the checks, the timing, the report) is `python -m lab.test`.
"""

from __future__ import annotations

import math

import torch

from lab import dispatch
from lab.losses import LinearCrossEntropyLoss, cross_entropy, linear_cross_entropy  # noqa: F401  the product's losses
from lab.ops import TRITON_SOFTMAX, ExtensionUnavailable, load_extension


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax along `dim`, computed by the lab's fastest kernel (CUDA or Triton) measured for the shape.

    The leading dimensions are viewed as rows: no copy when the softmax dimension is the last one and
    contiguous and the rows are evenly strided (any 2-D row stride works). Another `dim` is moved
    last first, which costs a copy in and a copy out. An empty x gives an empty result of its shape.
    Differentiable: the backward is the lab's own, chosen by row length (lab.ops.backward_choice), and
    compiles with the forward under torch.compile(fullgraph=True).
    float32, float16 and bfloat16 CUDA tensors; the lab's kernels accumulate in float32. Under
    torch.compile it calls torch.ops.lab.softmax (the fastest CUDA variant), whose choice is made in
    C++ at run time: a Triton choice would be a Python branch on the shape, which Dynamo may have made
    symbolic.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"lab.softmax: expected a tensor, got {type(x).__name__}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"lab.softmax: expected float32, float16 or bfloat16, got {x.dtype}")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"lab.softmax: dim must be an int, got {type(dim).__name__}")
    rank = max(x.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"lab.softmax: dim {dim} is out of range for a tensor of {x.dim()} dimensions "
                         f"(expected -{rank} to {rank - 1})")
    if x.device.type != "cuda":
        raise ValueError(f"lab.softmax: expected a CUDA tensor, got one on {x.device}")
    load_extension()
    if x.dim() == 2 and (dim == -1 or dim == 1) and (x.stride(1) == 1 or x.shape[1] <= 1):
        return _call(x)  # rows as they are: the common case, with the least host work
    return along_rows(x, dim, _call)


def along_rows(x: torch.Tensor, dim: int, rows_softmax) -> torch.Tensor:
    """rows_softmax (a softmax over each row of a 2-D tensor whose rows are contiguous) applied along `dim` of
    x, of any rank, empty ones included: `dim` is moved last (a copy in and out), the leading dimensions
    are viewed as rows."""
    if x.dim() == 0:
        return rows_softmax(x.reshape(1, 1)).reshape(())
    dim = dim % x.dim()
    if dim != x.dim() - 1:
        return along_rows(x.movedim(dim, -1).contiguous(), -1, rows_softmax).movedim(-1, dim)
    n = x.shape[-1]
    if n > 1 and x.stride(-1) != 1:
        x = x.contiguous()
    # The row count is given, not inferred (-1): an empty x of rows of 0 elements has no count to infer.
    rows = x if x.dim() == 2 else x.reshape(math.prod(x.shape[:-1]), n)
    return rows_softmax(rows).reshape(x.shape)


def _call(rows: torch.Tensor) -> torch.Tensor:
    """route(rows)(rows), on the rows' device: a Triton launch goes to the current device. Under
    torch.compile, torch.ops.lab.softmax(rows) and nothing else for Dynamo to trace.

    Host time matters here: a short row's kernel runs for a few microseconds, less than the Python
    around it (notebook/host-time-per-call/). So the route is remembered per (M, N, dtype, device), and where
    no gradient is to be recorded the op is called below autograd: its autograd kernel, which
    torch.library.register_autograd writes in Python, costs several microseconds a call for nothing."""
    if torch.compiler.is_compiling():
        return torch.ops.lab.softmax(rows)
    device = rows.get_device()
    key = (rows.shape[0], rows.shape[1], rows.dtype, device)
    kernel = _ROUTES.get(key)
    if kernel is None:
        if len(_ROUTES) >= 4096:
            _ROUTES.clear()
        kernel = _ROUTES[key] = route(rows)
    if kernel is torch.ops.lab.softmax:
        if rows.requires_grad and torch.is_grad_enabled():
            return kernel(rows)
        with torch._C._AutoDispatchBelowAutograd():
            return torch.ops.lab.softmax.default(rows)
    if device == torch.cuda.current_device():
        return kernel(rows)
    with torch.cuda.device(device):
        return kernel(rows)


# The function _call runs for each (M, N, dtype, device) it has seen; lab.dispatch.install() and
# uninstall() empty it, since a new table may route a shape elsewhere.
_ROUTES: dict = {}
dispatch.ROUTE_CACHES.append(_ROUTES)


def route(rows: torch.Tensor):
    """The function lab.softmax calls on a 2-D CUDA tensor: the Triton entry its table names for the
    shape and the rows' GPU model (lab/dispatch.py, lab_entries), else torch.ops.lab.softmax (which
    picks among the CUDA variants); torch.ops.lab.softmax under torch.compile. Both are differentiable.
    A table naming a Triton variant that cannot run here (not registered, Triton unavailable) warns
    once and falls back to torch.ops.lab.softmax."""
    if torch.compiler.is_compiling():
        return torch.ops.lab.softmax
    choice = dispatch.lab_choice(rows.shape[0], rows.shape[1], rows.dtype, rows.device.index or 0)
    if choice is not None and choice.startswith("triton."):
        kernel = _TRITON_KERNELS.get(choice)
        if kernel is None:
            kernel = _TRITON_KERNELS[choice] = _triton_kernel(choice)
        return kernel
    return torch.ops.lab.softmax


def _triton_kernel(choice: str):
    """The Triton entry of variant `choice` (lab.ops.TRITON_SOFTMAX), or torch.ops.lab.softmax with a warning if
    it cannot run here."""
    import importlib
    import warnings

    try:
        module, function = TRITON_SOFTMAX[choice]
        return getattr(importlib.import_module(module), function)
    except (KeyError, ImportError, AttributeError) as e:
        warnings.warn(f"lab.softmax: the dispatch table names {choice}, which cannot run here ({e}); "
                      "using torch.ops.lab.softmax for those shapes", RuntimeWarning, stacklevel=4)
        return torch.ops.lab.softmax


# The Triton kernels lab.softmax has called, by variant name: looked up once, not on every call (the lookup
# cost more than a short row's kernel).
_TRITON_KERNELS: dict = {}


def _register_extension() -> None:
    """Where lab._C is built, load it and register what its ops need in Python (lab.ops: shape functions for
    torch.compile and FakeTensor, autograd, auto's dispatch tables): so `import lab._C` (which imports
    this package, and torch, first) gives ops that are ready to use. Without it, nothing to do: the
    CUDA variants are listed with the reason."""
    import contextlib

    with contextlib.suppress(ExtensionUnavailable):
        load_extension()


_register_extension()
