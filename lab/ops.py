"""The extension's ops made ready for users: lab._C loaded, each torch.ops.lab op given a fake kernel (for
torch.compile and FakeTensor), the softmax ops a backward, every other overload a clear refusal of gradients,
and the dispatch tables of lab/tables/ installed. Part of the product (lab.softmax's path): it imports
nothing of the harness.

Which ops are softmax forwards is read from their schemas, as csrc/bindings.cpp declares them: a softmax op
is `lab::<name>(Tensor x) -> Tensor` (the other operators' ops take two tensors). Their backward is the lab's
own, the one measured fastest for the shape (the table's backward_entries, else backward_choice by row length),
each kernel an op with a fake kernel, so that a compiled backward runs the same kernels as an eager one.
"""

from __future__ import annotations

import sys

import torch

from lab import dispatch


class ExtensionUnavailable(ImportError):
    """lab._C cannot be loaded here (not built, or built for another torch)."""


_LOADED: list[str] = []
_AUTOGRAD_IMPLS = torch.library.Library("lab", "IMPL")  # the refusing Autograd kernels below live as long as this


def load_extension() -> None:
    """Import lab._C (registers torch.ops.lab.*) and make its ops ready, once; ExtensionUnavailable says why not."""
    if _LOADED:
        return
    try:
        import lab._C  # noqa: F401
    except ImportError as e:
        raise ExtensionUnavailable(f"lab._C is not built ({e}); run `bash build.sh`") from e
    softmax = set(softmax_ops())
    for name in op_names():
        if name.startswith("cross_entropy_"):
            _register_cross_entropy(name)
            continue
        # Every op returns a contiguous tensor shaped like its first input.
        torch.library.register_fake(f"lab::{name}")(
            lambda first, *rest: torch.empty_like(first, memory_format=torch.contiguous_format)
        )
        # The .out overload writes into `out` and returns nothing (opcheck's fake-tensor test needs it too).
        torch.library.register_fake(f"lab::{name}.out")(lambda *inputs, out: None)
        if name in softmax:
            torch.library.register_autograd(f"lab::{name}", _softmax_backward, setup_context=_save_output)
        # Every other overload (each .out, the other operators' ops) refuses a tensor that requires grad
        # instead of PyTorch's default, a warning and a result that silently has no gradient.
        for overload in ("out",) if name in softmax else ("default", "out"):
            _refuse_gradients(name, overload)
    dispatch.install_committed()  # auto's measured tables, each for its GPU model
    _LOADED.append("lab._C")


def _register_cross_entropy(name: str) -> None:
    """cross_entropy's ops: lab::cross_entropy_<variant>(logits, target, weight, scale, ignore_index, *, loss,
    dlogits) writes into loss and dlogits and returns nothing (lab.cross_entropy's autograd is its own), and
    lab::cross_entropy_cluster_max_cols(dtype, aligned) answers the kernel's longest row (no tensors)."""
    if name.endswith("_max_cols"):
        return
    torch.library.register_fake(f"lab::{name}")(lambda *args, **kwargs: None)
    _refuse_gradients(name, "default")


def op_names() -> list[str]:
    """The functional ops lab._C registered, torch.ops.lab.<name> (a build may hold some operators only)."""
    return sorted(n.removeprefix("lab::") for n in torch._C._dispatch_get_all_op_names()
                  if n.startswith("lab::") and "." not in n)


def softmax_ops() -> list[str]:
    """The softmax forward ops: lab::<name>(Tensor x) -> Tensor, torch.ops.lab.softmax (auto) among them."""
    ops = []
    for name in op_names():
        args = getattr(torch.ops.lab, name).default._schema.arguments
        if [a.name for a in args] == ["x"]:
            ops.append(name)
    return ops


def _refuse_gradients(name: str, overload: str) -> None:
    op = getattr(getattr(torch.ops.lab, name), overload)
    qualified = f"lab::{name}" + (f".{overload}" if overload != "default" else "")
    why = ("out= arguments do not take part in autograd; call it without out=" if overload == "out"
           else "it has no backward; detach the inputs or use a differentiable op")

    def autograd_kernel(*args, **kwargs):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in (*args, *kwargs.values())):
            raise RuntimeError(f"{qualified} cannot be differentiated: an input requires grad and {why}")
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)

    _AUTOGRAD_IMPLS.impl(name if overload == "default" else f"{name}.{overload}", autograd_kernel, "Autograd")


def _save_output(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)


def _softmax_backward(ctx, grad: torch.Tensor) -> torch.Tensor:
    (y,) = ctx.saved_tensors
    return fastest_backward(y, grad)


# The softmax backward where the GPU's table has no backward_entries (lab/dispatch.py): the lab's results on the
# H200 by row length: rows of up to 256 elements, cuda.register_cached (3244-4216 GB/s at M >= 262144, where
# triton.fused makes 317-4060); up to 16384, triton.fused (cuda.register_cached within 0-5% of it in float32, 20-50%
# behind in bfloat16); longer rows, cuda.cluster on GPUs with thread-block clusters (one read of y and dy, 98-103% of
# a copy from 32768 to 131072 elements), else cuda.two_pass (1-29% ahead of triton.looped, the only other variant
# there).
BACKWARD_SHORT_ROWS = 256
BACKWARD_TRITON_MAX_N = 16384
BACKWARD_CLUSTER_CAPABILITY = (9, 0)  # thread-block clusters


def backward_choice(n: int, on_cuda: bool, capability: tuple[int, int] = BACKWARD_CLUSTER_CAPABILITY) -> str:
    """The backward fastest_backward runs for rows of n on a GPU of that compute capability without a table entry:
    a torch.ops.lab op's name, or "triton" (the lab's Triton backward, which takes any N)."""
    if on_cuda and n <= BACKWARD_SHORT_ROWS and hasattr(torch.ops.lab, "softmax_backward_register_cached"):
        return "softmax_backward_register_cached"
    if on_cuda and n > BACKWARD_TRITON_MAX_N:
        if capability >= BACKWARD_CLUSTER_CAPABILITY and hasattr(torch.ops.lab, "softmax_backward_cluster"):
            return "softmax_backward_cluster"
        if hasattr(torch.ops.lab, "softmax_backward_two_pass"):
            return "softmax_backward_two_pass"
    return "triton"


def table_backward_choice(y: torch.Tensor) -> str | None:
    """The backward the GPU's table names for y's shape and dtype (backward_entries), as backward_choice names
    them, or None where it names none or one this build lacks. Under torch.compile with a symbolic number of rows,
    the entry of the most rows measured at y's row length (a branch on the rows would guard on them)."""
    m = y.shape[0] if isinstance(y.shape[0], int) else sys.maxsize
    variant = dispatch.backward_choice(m, y.shape[-1], y.dtype, y.device.index or 0)
    if variant is None:
        return None
    if variant.startswith("triton."):
        return "triton"
    op = "softmax_backward_" + variant.removeprefix("cuda.")
    return op if hasattr(torch.ops.lab, op) else None


def fastest_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx = y * (dy - sum(dy * y)) per row of the 2-D y, with the backward the lab measured fastest for its shape on
    this GPU (its table's backward_entries, else backward_choice's rule by row length); PyTorch's where neither
    lab._C nor Triton can run it. Each is an op with a fake kernel (torch.ops.lab.*, torch.ops.lab_triton.*), so a
    compiled backward runs them too."""
    dy = dy.contiguous()  # the gradient of a sum is an expanded tensor (strides 0); a no-op otherwise
    choice = table_backward_choice(y) if y.is_cuda and y.numel() else None
    if choice is None:
        capability = torch.cuda.get_device_capability(y.device) if y.is_cuda else (0, 0)
        choice = backward_choice(y.shape[-1], y.is_cuda, capability)
    if choice != "triton" and y.numel():
        return getattr(torch.ops.lab, choice)(y, dy)
    try:
        import triton_kernels.autograd  # noqa: F401  registers torch.ops.lab_triton.softmax_backward
    except ImportError:
        return torch._softmax_backward_data(dy, y, -1, y.dtype)
    return torch.ops.lab_triton.softmax_backward(y, dy)


# The Triton softmax entries lab.softmax may route to (a table's lab_entries name them), by variant name: module
# and function. The harness registers the same entries as variants (lab/backends/triton_variants.py).
TRITON_SOFTMAX = {
    "triton.fused": ("triton_kernels.fused", "softmax_fused"),
    "triton.persistent": ("triton_kernels.persistent", "softmax_persistent"),
    "triton.multirow": ("triton_kernels.multirow", "softmax_multirow"),
    "triton.looped": ("triton_kernels.looped", "softmax_looped"),
    "triton.looped_no_hints": ("triton_kernels.looped", "softmax_looped_no_hints"),
}
