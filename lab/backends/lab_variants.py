"""The lab's public fast entry as a variant, `lab.auto`: `lab.softmax` (lab/__init__.py) runs, for each (dtype, N, M),
the fastest of the lab's own CUDA and Triton variants measured on this GPU model (the dispatch table's
lab_entries, lab/dispatch.py), and torch.ops.lab.softmax (cuda.auto) where the table names a CUDA
variant or has no entry. Timed like the others, so that the lab's results show what its users get from
the one call."""

from __future__ import annotations

import torch

from lab.backends import cuda_variants
from lab.registry import Traffic, Variant, register


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
