"""Triton variants (triton_kernels/). Without a GPU they run on CPU tensors under TRITON_INTERPRET=1."""

from __future__ import annotations

import importlib
import os
import warnings

import torch

from lab.ops import TRITON_SOFTMAX
from lab.registry import Traffic, Unavailable, Variant, register

# Each module's MAX_N, repeated so that listing variants does not import triton (a test keeps them equal).
FUSED_MAX_N = 65536  # triton_kernels.fused.MAX_N
MULTIROW_MAX_N = 32768  # triton_kernels.multirow.MAX_N
CROSS_ENTROPY_FUSED_MAX_V = 16384  # triton_kernels.cross_entropy.FUSED_MAX_V
FUSED_LIMIT = "the whole row must fit in one program's registers"
MULTIROW_LIMIT = "the whole row must fit in one program's registers (at N = 65536 they spill on sm_90)"


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def loader(module: str, function: str):
    def build():
        try:
            import triton  # noqa: F401
        except ImportError as e:
            raise Unavailable(f"triton is not installed ({e})") from e
        if not torch.cuda.is_available() and not interpreted():
            raise Unavailable("no GPU, and TRITON_INTERPRET=1 is not set (set it before importing triton_kernels)")
        kernels = importlib.import_module(module)
        from triton_kernels.common import INTERPRETED

        if interpreted() != INTERPRETED:
            now = os.environ.get("TRITON_INTERPRET", "")
            raise Unavailable(f"TRITON_INTERPRET={now!r} now, but the Triton kernels were imported "
                              f"{'with' if INTERPRETED else 'without'} the interpreter: set it before importing "
                              "triton_kernels (a new process)")
        return getattr(kernels, function)

    return build


if interpreted():
    # -inf rows make numpy warn about inf - inf inside the interpreter; the NaN it gives is intended.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")
    # triton 3.6's interpreter converts float32 to bfloat16 by truncation (numpy has no bfloat16),
    # one ulp off what the GPU's round-to-nearest gives: bfloat16 is checked on the GPU only.
    DTYPES = (torch.float32, torch.float16)
    DTYPE_REASON = "the Triton interpreter rounds float32 to bfloat16 toward zero (the GPU rounds to nearest)"
else:
    DTYPES, DTYPE_REASON = (torch.float32, torch.float16, torch.bfloat16), ""

BASE = dict(
    dtypes=DTYPES, dtype_reason=DTYPE_REASON, op="softmax", backend="triton", writes_out=True,
    runs_on_cpu=interpreted(),
)
COMMON = dict(BASE, traffic=Traffic(1, 1), max_n=FUSED_MAX_N, max_n_reason=FUSED_LIMIT)
register(Variant(
    name="triton.fused",
    description="one program per row, the whole row in registers (block = next_power_of_2(N)): Triton's tutorial",
    build=loader(*TRITON_SOFTMAX["triton.fused"]), **COMMON,
))
register(Variant(
    name="triton.persistent",
    description="fused, with a grid of SMs x occupancy (from the compiled kernel) looping over rows",
    build=loader(*TRITON_SOFTMAX["triton.persistent"]), **COMMON,
))
register(Variant(
    name="triton.multirow",
    description="several short rows per program: a ROWS x next_power_of_2(N) block of ~16 KB, reduced along rows",
    build=loader(*TRITON_SOFTMAX["triton.multirow"]),
    traffic=Traffic(1, 1), max_n=MULTIROW_MAX_N, max_n_reason=MULTIROW_LIMIT, **BASE,
))
register(Variant(
    name="triton.looped",
    description="program per row: online (max, sum) over 16 KB chunks, then a write sweep; any N; L2 eviction hints",
    build=loader(*TRITON_SOFTMAX["triton.looped"]), traffic=Traffic(2, 1), **BASE,
))
register(Variant(
    name="triton.looped_no_hints",
    description="triton.looped with the L2 eviction hints off: what the hints are worth",
    build=loader(*TRITON_SOFTMAX["triton.looped_no_hints"]), traffic=Traffic(2, 1), **BASE,
))

# --- vector_add -------------------------------------------------------------------------------------
register(Variant(
    name="triton.tutorial", op="vector_add",
    description="one program per 1024-element block, masked tail: the Triton tutorial's kernel",
    build=loader("triton_kernels.vector_add", "vector_add"), traffic=Traffic(2, 1),
    **{k: v for k, v in BASE.items() if k != "op"},
))

# --- softmax_backward ------------------------------------------------------------------------------
BACKWARD = {k: v for k, v in BASE.items() if k != "op"}
register(Variant(
    name="triton.fused", op="softmax_backward",
    description="one program per row, y and dy rows in registers: read each once, write dx once",
    build=loader("triton_kernels.softmax_backward", "softmax_backward_fused"), traffic=Traffic(2, 1),
    max_n=16384, max_n_reason="two whole rows must fit in one program's registers", **BACKWARD,
))
register(Variant(
    name="triton.looped", op="softmax_backward",
    description="any N: a loop over 4096-element chunks for sum(dy * y), then a loop writing dx (2 reads each)",
    build=loader("triton_kernels.softmax_backward", "softmax_backward_looped"), traffic=Traffic(4, 1), **BACKWARD,
))

# --- cross_entropy ---------------------------------------------------------------------------------
CROSS_ENTROPY = {k: v for k, v in BASE.items() if k != "op"}
CROSS_ENTROPY_LOSS = dict(CROSS_ENTROPY, writes_out=False)  # (loss,) returned: a scalar or one per row
register(Variant(
    name="triton.fused", op="cross_entropy",
    description="one program per row, the whole row in registers: loss and dlogits from one read, one write",
    build=loader("triton_kernels.cross_entropy", "cross_entropy_fused"), traffic=Traffic(1, 1),
    max_n=CROSS_ENTROPY_FUSED_MAX_V, max_n_reason=FUSED_LIMIT, **CROSS_ENTROPY,
))
register(Variant(
    name="triton.looped", op="cross_entropy",
    description="any V: an online (max, sum) loop over chunks, then a loop writing dlogits (2 reads of the logits)",
    build=loader("triton_kernels.cross_entropy", "cross_entropy_looped"), traffic=Traffic(2, 1), **CROSS_ENTROPY,
))

# --- cross_entropy_loss: the same kernels without dlogits --------------------------------------------
register(Variant(
    name="triton.fused", op="cross_entropy_loss",
    description="one program per row, the whole row in registers: the loss from one read",
    build=loader("triton_kernels.cross_entropy", "cross_entropy_loss_fused"), traffic=Traffic(1, 0),
    max_n=CROSS_ENTROPY_FUSED_MAX_V, max_n_reason=FUSED_LIMIT, **CROSS_ENTROPY_LOSS,
))
register(Variant(
    name="triton.looped", op="cross_entropy_loss",
    description="any V: an online (max, sum) loop over chunks (1 read; a second with label smoothing)",
    build=loader("triton_kernels.cross_entropy", "cross_entropy_loss_looped"), traffic=Traffic(1, 0),
    **CROSS_ENTROPY_LOSS,
))


# --- linear_cross_entropy: the seed's design, on the lab's cross-entropy kernel -----------------------------------


def build_seed():
    loader("triton_kernels.cross_entropy", "cross_entropy_fused")()  # Triton importable, interpreted or on a GPU
    from lab.backends.lab_variants import lab_head
    from lab.operators.linear_cross_entropy import train_step

    return train_step(lambda x, weight, target, bias, options: lab_head(x, weight, target, bias, options,
                                                                        accumulate=weight.dtype))


register(Variant(
    name="triton.seed", op="linear_cross_entropy", backend="triton", dtypes=DTYPES, dtype_reason=DTYPE_REASON,
    runs_on_cpu=interpreted(),
    description="the seed's design (mgmalek/efficient_cross_entropy): lab.linear_cross_entropy's chunks and kernel, "
                "dW added up over the chunks in the weight's dtype (rounded once a chunk: it drifts with the chunks)",
    build=build_seed,
))
