"""Peers: softmax kernels of other projects, measured beside ours by the same checker and timer.

Both are optional packages. They are registered always, so `--list` says why one cannot run; `build`
imports the package only when the variant is used, never when the variants are listed (importing
the CuTe DSL takes seconds, and a machine without the packages must still list them).

- peer.quack: QuACK (`pip install quack-kernels`, tested with 0.6.5), a CuTe DSL kernel. A CTA takes
  a tile of rows into shared memory and registers, reduces (max, sum) in one online pass and writes
  once; on sm_90, rows longer than 32768 elements in float32 (16384 in 16-bit) are split over a
  cluster of up to 16 CTAs, which merge their partial reductions through distributed shared memory.
- peer.liger: Liger-Kernel (`pip install liger-kernel`, tested with 0.8.5), a Triton kernel with one
  program per row, the whole row in registers (block = next power of two of N).

Neither takes an `out` tensor: both allocate their output, as torch.softmax does.

QuACK compiles a kernel for each (dtype, N) on its first call, in about a second. The harness never
times a first call: the correctness suite, and again the check of each sweep point on that point's
own input, run the kernel before bench.time_rounds sees it (and it warms each call up as well).
"""

from __future__ import annotations

import importlib.util

import torch

from lab.inputs import Shape
from lab.registry import Kernel, Traffic, Unavailable, Variant, dtype_name, register

# QuACK loads and stores rows in 16-byte vectors (128 // dtype width elements): softmax.py calls
# _get_tiled_copy(vecsize=128 // largest_dtype_width), which asserts N % vecsize == 0
# (reduction_base.py), and Softmax.compile builds its tensors with a row stride divisible by
# gcd(vecsize, N) and 16-byte alignment (compile_utils.make_fake_tensor).
QUACK_VECTOR_BYTES = 16
# The longest row: on sm_90 a row is split over at most 16 CTAs (Softmax._set_cluster_n) and each
# holds its slice in shared memory (227 KB per block on H100 and H200). 220 KiB leaves room for the
# rounding of a slice up to whole vectors per thread and for the reduction buffer.
QUACK_MAX_CLUSTER = 16
QUACK_SLICE_BYTES = 220 * 1024
# Liger sizes its block as next_power_of_2(N) and raises past 65536 (calculate_settings in
# liger_kernel/ops/utils.py): the row must fit in one program's registers.
LIGER_MAX_N = 65536


def quack_shape_reason(shape: Shape, dtype: torch.dtype, tensors: int = 1) -> str | None:
    """Why QuACK cannot take this shape in this dtype, or None. tensors: the row tiles it holds in
    shared memory at once (the forward: x; the backward: y and dy)."""
    size = dtype.itemsize
    per_vector = QUACK_VECTOR_BYTES // size
    if shape.n % per_vector:
        return f"N % {per_vector} != 0: QuACK moves rows in 16-byte vectors (N * {size} bytes must be a multiple of 16)"
    if shape.stride % per_vector:
        return f"row stride % {per_vector} != 0: QuACK needs every row to start on a 16-byte boundary"
    if shape.n * size * tensors > QUACK_MAX_CLUSTER * QUACK_SLICE_BYTES:
        longest = QUACK_MAX_CLUSTER * QUACK_SLICE_BYTES // (size * tensors)
        return f"N > {longest}: the row must fit in the shared memory of a cluster of {QUACK_MAX_CLUSTER} CTAs"
    return None


def _import(package: str, module: str, *names: str) -> tuple:
    """`names` from `module` of the optional `package`, or Unavailable with the reason: not installed,
    no GPU (both checked without importing it, so a machine without a GPU does not pay for the
    import), or installed but failing to import (a missing dependency, a broken library: its own
    error is the reason, and the lab goes on without it)."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        raise Unavailable(f"{package} is not installed (pip install {package})")
    if not torch.cuda.is_available():
        raise Unavailable("needs a GPU")
    try:
        imported = importlib.import_module(module)
        return tuple(getattr(imported, name) for name in names)
    except Exception as e:  # any failure inside the optional package makes the peer unavailable
        first = f"{e}".splitlines()[0] if f"{e}" else ""
        raise Unavailable(f"{package} is installed but failed to import ({type(e).__name__}: {first})") from e


def build_quack() -> Kernel:
    # The forward function itself, for the benchmark; `quack.softmax`, its autograd Function (with
    # QuACK's backward), where a gradient is wanted, so that none is silently missing.
    softmax, softmax_fwd = _import("quack-kernels", "quack.softmax", "softmax", "softmax_fwd")

    def quack_softmax(x: torch.Tensor) -> torch.Tensor:
        return softmax(x) if torch.is_grad_enabled() and x.requires_grad else softmax_fwd(x)

    return quack_softmax


def build_liger() -> Kernel:
    # From the submodule, not `liger_kernel.ops`: the package may swap in another implementation for
    # the device (its LIGER_KERNEL_IMPL mechanism); the submodule is always the Triton kernel.
    (liger_function,) = _import("liger-kernel", "liger_kernel.ops.softmax", "LigerSoftmaxFunction")

    def liger_softmax(x: torch.Tensor) -> torch.Tensor:
        # Its forward copies a strided x to a contiguous one first (ensure_contiguous): correct for a
        # row stride larger than N, at the cost of that copy.
        return liger_function.apply(x)

    return liger_softmax


COMMON = dict(op="softmax", backend="peer", traffic=Traffic(1, 1), writes_out=False)
register(Variant(
    name="peer.quack",
    description="QuACK softmax_fwd: cluster-split CuTe DSL kernel (rows in shared memory, one online pass)",
    build=build_quack, shape_reason=quack_shape_reason, data_align=QUACK_VECTOR_BYTES, **COMMON,
))
register(Variant(
    name="peer.liger",
    description="Liger-Kernel softmax: Triton single-block kernel (one program per row, row in registers)",
    build=build_liger, max_n=LIGER_MAX_N,
    max_n_reason="Liger-Kernel raises past 65536: the row must fit in one program's registers", **COMMON,
))


# --- softmax_backward --------------------------------------------------------------------------------


def build_quack_backward() -> Kernel:
    (softmax_bwd,) = _import("quack-kernels", "quack.softmax", "softmax_bwd")

    def quack_softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
        return softmax_bwd(dy, y)  # QuACK takes (dy, y)

    return quack_softmax_backward


register(Variant(
    name="peer.quack", op="softmax_backward", backend="peer", traffic=Traffic(2, 1), writes_out=False,
    description="QuACK softmax_bwd: y and dy rows in shared memory (cluster-split past 8192 elements), one pass",
    build=build_quack_backward, shape_reason=lambda shape, dtype: quack_shape_reason(shape, dtype, tensors=2),
    data_align=QUACK_VECTOR_BYTES,
))


# --- cross_entropy -----------------------------------------------------------------------------------------------
# Both return (loss, dlogits) as a training step takes them: the loss, and the gradient of the loss (for
# reduction none, of the rows' sum) with respect to the logits, through the peer's own forward and backward.


def quack_cross_entropy_reason(logits: torch.Tensor, target: torch.Tensor, options) -> str | None:
    """QuACK's cross_entropy takes class weights, ignore_index and the reductions, no other option."""
    missing = options.extra_terms()
    return f"QuACK's cross_entropy has no {', '.join(missing)}" if missing else None


def quack_cross_entropy_shape_reason(shape: Shape, dtype: torch.dtype) -> str | None:
    """QuACK's softmax limits, and its backward's: it writes dlogits with the logits' row stride (an empty_like of
    them, which is contiguous) and refuses rows of a padded tensor."""
    if shape.stride != shape.n:
        return "row stride != V: QuACK's backward needs dlogits with the logits' strides (padded rows are refused)"
    return quack_shape_reason(shape, dtype)


def liger_cross_entropy_shape_reason(shape: Shape, dtype: torch.dtype) -> str | None:
    return "no rows: Liger raises on an empty batch (max() of an empty tensor)" if shape.m == 0 else None


def build_quack_cross_entropy() -> Kernel:
    (cross_entropy,) = _import("quack-kernels", "quack.cross_entropy", "cross_entropy")
    from lab.operators.cross_entropy import loss_and_grad

    def quack_loss(x: torch.Tensor, target: torch.Tensor, options) -> torch.Tensor:
        return cross_entropy(x, target, weight=options.weight, ignore_index=options.ignore_index,
                             reduction=options.reduction)

    def quack_cross_entropy(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor, torch.Tensor]:
        # Its autograd Function: the forward reads the logits for the loss and each row's lse, the backward reads
        # them again and writes dlogits.
        return loss_and_grad(quack_loss, logits, target, options)

    return quack_cross_entropy


def mean_of_nothing(target, options) -> bool:
    """A mean over no counted rows (every target ignored), which PyTorch gives as NaN and some peers do not."""
    return options.reduction == "mean" and target.numel() > 0 and bool((target == options.ignore_index).all())


def liger_cross_entropy_reason(logits: torch.Tensor, target: torch.Tensor, options) -> str | None:
    """Two conventions of Liger's that differ from PyTorch's: a mean over no counted rows is 0 (PyTorch: NaN), and a
    weighted mean's z-loss is divided by the counted rows (not by the class weights' sum)."""
    if mean_of_nothing(target, options):
        return "every row ignored: Liger's mean is 0 where PyTorch's is NaN (a mean over no rows)"
    if options.weight is not None and options.z_loss and options.reduction == "mean":
        return "Liger divides the z-loss by the row count, not by the class weights' sum (its mean with weights)"
    return None


def liger_loss(function, x: torch.Tensor, target: torch.Tensor, options) -> torch.Tensor:
    """The loss of Liger's autograd Function (liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction), as its
    functional entry (liger_kernel.transformers.functional.liger_cross_entropy) calls it; in the logits' dtype, as
    PyTorch's is (checked as such: lab/check.py, checked_as)."""
    return function.apply(x, target, options.weight, options.ignore_index, options.z_loss, options.label_smoothing,
                          options.reduction, options.softcap, False, False, False)[0]


def build_liger_cross_entropy() -> Kernel:
    # As a training step calls it, as the lab's entry and QuACK are timed: the forward of its autograd Function
    # computes the loss and writes the gradient over the logits in one kernel; its backward compares the upstream
    # gradient with 1 (torch.equal: the host waits for the GPU) and returns that tensor where it is 1.
    (function,) = _import("liger-kernel", "liger_kernel.ops.cross_entropy", "LigerCrossEntropyFunction")
    from lab.operators.cross_entropy import loss_and_grad

    def liger_cross_entropy(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = loss_and_grad(lambda x, t, o: liger_loss(function, x, t, o), logits, target, options)
        return loss.float(), grad

    liger_cross_entropy.overwrites_input = True  # lab/registry.py, overwrites_input
    return liger_cross_entropy


CROSS_ENTROPY = dict(op="cross_entropy", backend="peer", writes_out=False)
register(Variant(
    name="peer.quack", **CROSS_ENTROPY, traffic=Traffic(2, 1),
    description="QuACK cross_entropy: the forward (loss, lse; cluster-split rows in shared memory), then the "
                "backward (reads the logits again, writes dlogits)",
    build=build_quack_cross_entropy, shape_reason=quack_cross_entropy_shape_reason,
    case_reason=quack_cross_entropy_reason,
    data_align=QUACK_VECTOR_BYTES,
))
register(Variant(
    name="peer.liger", **CROSS_ENTROPY, traffic=Traffic(2, 1),
    description="Liger-Kernel cross_entropy and its backward, as a training step calls them: one program per row, "
                "an online (max, sum) loop, then a loop writing the gradient over the logits (2 reads, 1 write)",
    build=build_liger_cross_entropy, shape_reason=liger_cross_entropy_shape_reason,
    case_reason=liger_cross_entropy_reason,
))


# --- cross_entropy_loss: the peers' loss without grad --------------------------------------------------------------


def build_quack_cross_entropy_loss() -> Kernel:
    (cross_entropy,) = _import("quack-kernels", "quack.cross_entropy", "cross_entropy")

    def quack_cross_entropy_loss(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor]:
        with torch.no_grad():  # its forward alone: the loss (and each row's lse, which it keeps for a backward)
            return (cross_entropy(logits, target, weight=options.weight, ignore_index=options.ignore_index,
                                  reduction=options.reduction),)

    return quack_cross_entropy_loss


def build_liger_cross_entropy_loss() -> Kernel:
    (function,) = _import("liger-kernel", "liger_kernel.ops.cross_entropy", "LigerCrossEntropyFunction")

    def liger_cross_entropy_loss(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor]:
        # As evaluation calls it: logits that do not require grad (detached: its forward writes the gradient over an
        # input that requires grad, under no_grad too), its kernel computes the loss and writes no gradient.
        with torch.no_grad():
            return (liger_loss(function, logits.detach(), target, options).float(),)

    return liger_cross_entropy_loss


CROSS_ENTROPY_LOSS = dict(op="cross_entropy_loss", backend="peer", writes_out=False, traffic=Traffic(1, 0))
register(Variant(
    name="peer.quack", **CROSS_ENTROPY_LOSS,
    description="QuACK cross_entropy without grad: its forward (loss, lse; cluster-split rows in shared memory)",
    build=build_quack_cross_entropy_loss, shape_reason=quack_shape_reason, case_reason=quack_cross_entropy_reason,
    data_align=QUACK_VECTOR_BYTES,
))
register(Variant(
    name="peer.liger", **CROSS_ENTROPY_LOSS,
    description="Liger-Kernel cross_entropy of logits that do not require grad: one program per row, the loss alone",
    build=build_liger_cross_entropy_loss, shape_reason=liger_cross_entropy_shape_reason,
    case_reason=liger_cross_entropy_reason,
))


# --- linear_cross_entropy: the peers' fused heads, each through its own forward and backward ------------------------


def liger_linear_reason(x, weight, target, bias, options) -> str | None:
    """Liger's fused linear cross-entropy takes every option and a bias; its mean over no counted rows is 0 (PyTorch's
    is NaN)."""
    if mean_of_nothing(target, options):
        return "every row ignored: Liger's mean is 0 where PyTorch's is NaN (a mean over no rows)"
    return None


def build_liger_linear(with_grad: bool = True, accum_dtype: torch.dtype | None = None):
    """Liger's module as a user builds it; accum_dtype None (its default) adds dW and dbias up over its chunks in the
    weight's dtype."""
    (module,) = _import("liger-kernel", "liger_kernel.transformers.fused_linear_cross_entropy",
                        "LigerFusedLinearCrossEntropyLoss")
    from lab.operators.linear_cross_entropy import evaluation, train_step

    extra = {} if accum_dtype is None else {"accum_dtype": accum_dtype}  # older releases lack the argument

    def liger_loss(x, weight, target, bias, options):
        loss = module(ignore_index=options.ignore_index, lse_square_scale=options.z_loss,
                      label_smoothing=options.label_smoothing, reduction=options.reduction, softcap=options.softcap,
                      **extra)
        return loss(weight, x, target, bias)

    return train_step(liger_loss) if with_grad else evaluation(liger_loss)


def cce_shape_reason(shape: Shape, dtype: torch.dtype) -> str | None:
    if shape.n == 1:
        return ("a vocabulary of one class: Cut Cross-Entropy's bfloat16 loss came out 0.005 where it is exactly 0 "
                "(H100)")
    return no_tokens_reason(shape, dtype)


def cce_reason(x, weight, target, bias, options) -> str | None:
    from lab.operators.linear_cross_entropy import options_reason

    if mean_of_nothing(target, options):
        return "every row ignored: Cut Cross-Entropy's mean divides by the counted rows (ZeroDivisionError)"
    return options_reason(options, bias, {"softcap", "reduction none"}, "Cut Cross-Entropy")


def build_cce(filter_eps="high", with_grad: bool = True):
    (linear_cross_entropy,) = _import("cut-cross-entropy", "cut_cross_entropy", "linear_cross_entropy")
    from lab.operators.linear_cross_entropy import evaluation, train_step

    def cce_loss(x, weight, target, bias, options):
        return linear_cross_entropy(x, weight, target, ignore_index=options.ignore_index, softcap=options.softcap,
                                    reduction=options.reduction, filter_eps=filter_eps)

    return train_step(cce_loss) if with_grad else evaluation(cce_loss)


def quack_linear_reason(x, weight, target, bias, options) -> str | None:
    from lab.operators.linear_cross_entropy import options_reason

    if mean_of_nothing(target, options):
        return "every row ignored: QuACK's gradients are NaN (its mean's factor is 1 / 0) where PyTorch's are 0"
    return options_reason(options, bias, set(), "QuACK's chunked_linear_cross_entropy")


def quack_linear_shape_reason(shape: Shape, dtype: torch.dtype) -> str | None:
    """QuACK's chunked head asserts whole groups of 8 tokens; its CuTe DSL matmuls take rows of whole 16-byte packs."""
    per_pack = QUACK_VECTOR_BYTES // dtype.itemsize
    if shape.m % 8 or (shape.k or 1) % per_pack or shape.n % per_pack:
        return (f"QuACK's chunked head takes tokens in multiples of 8 (it asserts so) and K and N in multiples of "
                f"{per_pack} in {dtype_name(dtype)} (16-byte rows for its matmuls)")
    return no_tokens_reason(shape, dtype)


def build_quack_linear(with_grad: bool = True):
    (chunked,) = _import("quack-kernels", "quack.linear_cross_entropy", "chunked_linear_cross_entropy")
    from lab.operators.linear_cross_entropy import evaluation, train_step

    def quack_loss(x, weight, target, bias, options):
        return chunked(x, weight, target, ignore_index=options.ignore_index, reduction=options.reduction)

    return train_step(quack_loss) if with_grad else evaluation(quack_loss)


def no_tokens_reason(shape: Shape, dtype: torch.dtype) -> str | None:
    return "no tokens: it divides by the batch's size (ZeroDivisionError on an empty batch)" if shape.m == 0 else None


LINEAR_CROSS_ENTROPY = dict(op="linear_cross_entropy", backend="peer")
register(Variant(
    name="peer.liger", **LINEAR_CROSS_ENTROPY,
    description="Liger-Kernel LigerFusedLinearCrossEntropyLoss: chunks of tokens (as many as V / K), each a matmul "
                "and its Triton cross-entropy writing the gradient over the logits, dx and dW by matmuls in the "
                "forward, dW added up in the weight's dtype",
    build=build_liger_linear, case_reason=liger_linear_reason, shape_reason=no_tokens_reason,
))
register(Variant(
    name="peer.liger_accum32", **LINEAR_CROSS_ENTROPY,
    description="Liger-Kernel LigerFusedLinearCrossEntropyLoss with accum_dtype=torch.float32: the same chunks, dW "
                "and dbias added up in float32 and cast once",
    build=lambda: build_liger_linear(accum_dtype=torch.float32), case_reason=liger_linear_reason,
    shape_reason=no_tokens_reason,
))
# Its backward raises on float32 ("Backwards requires embeddings to be bf16 or fp16": GPU fuzz).
CCE_TRAINS = dict(dtypes=(torch.float16, torch.bfloat16),
                  dtype_reason="Cut Cross-Entropy's backward takes float16 and bfloat16 hidden states alone")
register(Variant(
    name="peer.cce", **LINEAR_CROSS_ENTROPY, **CCE_TRAINS,
    description="Cut Cross-Entropy linear_cross_entropy: Triton kernels that fuse the matmul with the log-sum-exp "
                "(the logits never written) and recompute them in the backward, skipping the gradient's small "
                "entries (its default filter_eps)",
    build=build_cce, case_reason=cce_reason, shape_reason=cce_shape_reason,
))
register(Variant(
    name="peer.cce_exact", **LINEAR_CROSS_ENTROPY, **CCE_TRAINS,
    description="Cut Cross-Entropy with filter_eps=None: the same kernels, no gradient entry skipped",
    build=lambda: build_cce(filter_eps=None), case_reason=cce_reason, shape_reason=cce_shape_reason,
))
register(Variant(
    name="peer.quack", **LINEAR_CROSS_ENTROPY,
    description="QuACK chunked_linear_cross_entropy: chunks of 4096 tokens, CuTe DSL matmuls with a cross-entropy "
                "epilogue",
    build=build_quack_linear, case_reason=quack_linear_reason, shape_reason=quack_linear_shape_reason,
))


# --- linear_cross_entropy_loss: the peers' heads without grad -------------------------------------------------------
register(Variant(
    name="peer.liger", op="linear_cross_entropy_loss", backend="peer",
    description="Liger-Kernel LigerFusedLinearCrossEntropyLoss without grad: its chunks' matmuls and cross-entropy, "
                "no gradient",
    build=lambda: build_liger_linear(with_grad=False), case_reason=liger_linear_reason, shape_reason=no_tokens_reason,
))
register(Variant(
    name="peer.quack", op="linear_cross_entropy_loss", backend="peer",
    description="QuACK chunked_linear_cross_entropy without grad: chunks of 4096 tokens, the loss alone (no dx or dW "
                "matmuls)",
    build=lambda: build_quack_linear(with_grad=False), case_reason=quack_linear_reason,
    shape_reason=quack_linear_shape_reason,
))
register(Variant(
    name="peer.cce", op="linear_cross_entropy_loss", backend="peer",
    description="Cut Cross-Entropy linear_cross_entropy without grad: the matmul fused with the log-sum-exp, the "
                "logits never written",
    build=lambda: build_cce(with_grad=False), case_reason=cce_reason, shape_reason=cce_shape_reason,
))
