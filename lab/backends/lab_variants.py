"""The lab's public fast entry as a variant, `lab.auto`: `lab.softmax` (lab/__init__.py) runs, for each (dtype, N, M),
the fastest of the lab's own CUDA and Triton variants measured on this GPU model (the dispatch table's
lab_entries, lab/dispatch.py), and torch.ops.lab.softmax (cuda.auto) where the table names a CUDA
variant or has no entry. cross_entropy's `lab.auto` is `lab.cross_entropy` with its backward (lab/losses.py);
softmax_backward's, the backward every softmax entry's gradient runs (lab.ops.fastest_backward).
Timed like the others, so that the lab's results show what its users get from the one call."""

from __future__ import annotations

import torch

from lab.backends import cuda_variants
from lab.registry import Traffic, Unavailable, Variant, register


def build():
    cuda_variants.AUTO.kernel()  # raises Unavailable where torch.ops.lab.softmax cannot run
    import lab

    return lab.softmax


def thresholds(dtype: torch.dtype) -> list[int]:
    """auto's row lengths, and those where lab.softmax's own entries change variant."""
    from lab import dispatch

    lab_lengths = {e[0] for e in dispatch.saved_entries("lab_entries", dtype)}
    return sorted(lab_lengths | set(cuda_variants.auto_thresholds(dtype)))


LAB_SOFTMAX = register(Variant(
    op="softmax", name="lab.auto", backend="lab",
    description="lab.softmax(x): each (dtype, N, M) to the fastest of the lab's CUDA and Triton variants measured "
                "on this GPU (dispatch table), else torch.ops.lab.softmax",
    build=build, traffic=Traffic(1, 1), prepare=cuda_variants.rebuild_auto_table, thresholds=thresholds,
))


def build_backward():
    if not torch.cuda.is_available():
        raise Unavailable("times the backward lab.softmax's gradient runs on a GPU (on the CPU it is the Triton one)")
    from lab import ops

    return ops.fastest_backward


def rebuild_backward_table(results: list) -> None:
    """The softmax backward's lab.auto `prepare`: the GPU's backward_entries from this run's results so far."""
    from lab import dispatch, tabulate

    dispatch.install_backward(dispatch.current_gpu(), tabulate.build_backward_entries(results))


register(Variant(
    op="softmax_backward", name="lab.auto", backend="lab",
    description="lab.ops.fastest_backward(y, dy), the gradient of every softmax entry: each (dtype, N, M) to the "
                "fastest of the lab's CUDA and Triton backwards measured on this GPU (backward_entries), else by row "
                "length (backward_choice)",
    build=build_backward, traffic=Traffic(2, 1), prepare=rebuild_backward_table,
))


def lab_loss(x: torch.Tensor, target: torch.Tensor, options) -> torch.Tensor:
    """lab.cross_entropy with the options' arguments."""
    import lab

    return lab.cross_entropy(x, target, ignore_index=options.ignore_index, reduction=options.reduction,
                             label_smoothing=options.label_smoothing, z_loss=options.z_loss, softcap=options.softcap,
                             weight=options.weight)


def build_cross_entropy():
    if not torch.cuda.is_available():
        raise Unavailable("needs a GPU (lab.cross_entropy takes CUDA tensors)")
    from lab.operators.cross_entropy import loss_and_grad

    def lab_cross_entropy(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor, torch.Tensor]:
        # As a training step calls it: the loss of logits that require grad (the forward writes dlogits), then the
        # backward (which leaves dlogits as written: its upstream gradient is 1).
        return loss_and_grad(lab_loss, logits, target, options)

    return lab_cross_entropy


LAB_CROSS_ENTROPY = register(Variant(
    op="cross_entropy", name="lab.auto", backend="lab",
    description="lab.cross_entropy(logits, target) and its backward, as a training step calls them: triton.fused "
                "where the row fits one program, else cuda.cluster where it takes the row and the options (1 read), "
                "else triton.looped (2 reads; the traffic model counts the one read of the others)",
    build=build_cross_entropy, traffic=Traffic(1, 1),
))


def build_cross_entropy_loss():
    if not torch.cuda.is_available():
        raise Unavailable("needs a GPU (lab.cross_entropy takes CUDA tensors)")

    def lab_cross_entropy_loss(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor]:
        with torch.no_grad():  # as evaluation calls it: no gradient wanted, none written
            return (lab_loss(logits, target, options),)

    return lab_cross_entropy_loss


register(Variant(
    op="cross_entropy_loss", name="lab.auto", backend="lab",
    description="lab.cross_entropy(logits, target) without grad: triton.fused where the row fits one program, else "
                "cuda.cluster where it takes the row and the options, else triton.looped (1 read each)",
    build=build_cross_entropy_loss, traffic=Traffic(1, 0),
))


# --- linear_cross_entropy -------------------------------------------------------------------------------------------


def lab_head(x, weight, target, bias, options, **chosen) -> torch.Tensor:
    """lab.linear_cross_entropy with the options' arguments (and `chosen`: chunk_tokens, accumulate)."""
    import lab

    return lab.linear_cross_entropy(x, weight, target, bias, ignore_index=options.ignore_index,
                                    reduction=options.reduction, label_smoothing=options.label_smoothing,
                                    z_loss=options.z_loss, softcap=options.softcap, **chosen)


def build_linear_cross_entropy(with_grad: bool = True):
    if not torch.cuda.is_available():
        raise Unavailable("needs a GPU (lab.linear_cross_entropy takes CUDA tensors)")
    from lab.operators.linear_cross_entropy import evaluation, train_step

    return train_step(lab_head) if with_grad else evaluation(lab_head)


register(Variant(
    op="linear_cross_entropy", name="lab.auto", backend="lab",
    description="lab.linear_cross_entropy and its backward: every token in one chunk where chunking saves no memory, "
                "else chunks of 1 GiB of logits; each chunk a matmul, the lab's cross-entropy kernel writing the "
                "gradient over the logits, the dx and dW matmuls (dW summed in float32 over several chunks)",
    build=build_linear_cross_entropy,
))
register(Variant(
    op="linear_cross_entropy_loss", name="lab.auto", backend="lab",
    description="lab.linear_cross_entropy without grad: chunks of up to 1 GiB of logits, each a matmul and the "
                "loss's kernel reading the chunk's logits once",
    build=lambda: build_linear_cross_entropy(with_grad=False),
))
