"""cross_entropy: a language model's next-token loss over given logits, and its gradient, as a training step
computes them.

Inputs (logits, target, options): logits M x V (float32, float16 or bfloat16; rows may be strided, padded with
NaN past V), target int64 (M), some rows ignore_index, and CrossEntropyOptions. Outputs: the loss (float32: a
scalar for mean and sum, one per row for none) and dlogits (M x V, the logits' dtype), the gradient of the loss
(for none, of the rows' sum: what an upstream gradient of ones gives).

The loss of row i, with z = cap * tanh(x / cap) where softcap is set (z = x otherwise): PyTorch's
F.cross_entropy of z (its class weights, label smoothing and ignore_index), plus z_loss * logsumexp(z)^2; mean
divides the rows' sum by PyTorch's denominator (the non-ignored rows, or the sum of their targets' class
weights): a batch whose rows are all ignored has a NaN mean, as in PyTorch. An ignored row adds nothing and its
gradient is zero, whatever it holds (PyTorch's autograd gives NaN there for a row holding a NaN: the row takes
no part in the loss, so the lab defines zero). Special values otherwise follow PyTorch: a NaN in a counted row,
or a row of only -inf, makes its loss NaN; a target whose logit is -inf makes it +inf.

GB/s = 2*M*V*itemsize / time: read the logits once, write dlogits once (the target and the loss are O(M)).

cross_entropy_loss: the loss alone, as evaluation computes it (no gradient): the same inputs, options, cases and
sweeps; GB/s = M*V*itemsize / time, one read of the logits.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lab import inputs
from lab.inputs import VOCABULARIES, Shape
from lab.operators import Operator, register_operator, softmax
from lab.registry import Traffic

REDUCTIONS = ("mean", "sum", "none")


@dataclass(frozen=True, eq=False)
class CrossEntropyOptions:
    ignore_index: int = -100
    reduction: str = "mean"
    label_smoothing: float = 0.0
    z_loss: float = 0.0
    """lambda of the z-loss, lambda * logsumexp(z)^2 added to each counted row's loss (PaLM's auxiliary loss)."""
    softcap: float | None = None
    """cap of logit soft-capping, z = cap * tanh(x / cap) (Gemma 2), or None."""
    weight: torch.Tensor | None = None
    """A weight per class (V,), as F.cross_entropy's `weight`, or None."""

    def __post_init__(self):
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.reduction!r}")
        if not 0.0 <= self.label_smoothing <= 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1], got {self.label_smoothing}")
        if self.z_loss < 0:
            raise ValueError(f"z_loss must be >= 0, got {self.z_loss}")
        if self.softcap is not None and not self.softcap > 0:
            raise ValueError(f"softcap must be > 0 (or None), got {self.softcap}")

    def extra_terms(self) -> list[str]:
        """The options set that change the loss beyond class weights and the reduction, of label_smoothing, z_loss
        and softcap: what a kernel of the plain loss (QuACK's, the lab's CUDA one) lacks."""
        return [name for name in ("label_smoothing", "z_loss", "softcap")
                if getattr(self, name) != getattr(DEFAULT, name)]

    @property
    def is_default(self) -> bool:
        """Every option at its default and no class weights (DEFAULT itself, or options equal to it)."""
        return self.label == "defaults"

    @property
    def label(self) -> str:
        """The options that differ from the defaults, e.g. "label_smoothing=0.1, reduction=sum"."""
        parts = [f"{name}={getattr(self, name)}" for name in ("reduction", "label_smoothing", "z_loss", "softcap")
                 if getattr(self, name) != getattr(DEFAULT, name)]
        parts += ["weight"] if self.weight is not None else []
        parts += [f"ignore_index={self.ignore_index}"] if self.ignore_index != DEFAULT.ignore_index else []
        return ", ".join(parts) or "defaults"


DEFAULT = CrossEntropyOptions()


def loss_of(logits: torch.Tensor, target: torch.Tensor, options: CrossEntropyOptions) -> torch.Tensor:
    """The loss in PyTorch ops, in the dtype of `logits` (the reference runs it in float64, torch's variants in the
    input's dtype): see the module docstring."""
    z = options.softcap * torch.tanh(logits / options.softcap) if options.softcap is not None else logits
    weight = None if options.weight is None else options.weight.to(z.dtype)
    rows = F.cross_entropy(z, target, weight=weight, ignore_index=options.ignore_index, reduction="none",
                           label_smoothing=options.label_smoothing)
    counted = target != options.ignore_index
    if options.z_loss:
        lse = torch.logsumexp(z, dim=-1)
        rows = rows + torch.where(counted, options.z_loss * lse * lse, 0.0)
    if options.reduction == "none":
        return rows
    total = rows.sum()
    if options.reduction == "sum":
        return total
    denominator = counted.sum() if weight is None else torch.where(counted, weight[target.clamp(0)], 0.0).sum()
    return total / denominator


def loss_and_grad(loss_fn, logits: torch.Tensor, target: torch.Tensor, options: CrossEntropyOptions
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """loss_fn(logits, target, options)'s loss and its gradient with respect to the logits, by autograd, as a
    training step takes them (for none, the gradient of the rows' sum), in the logits' dtype."""
    x = logits.detach().requires_grad_()
    with torch.enable_grad():
        loss = loss_fn(x, target, options)
        (grad,) = torch.autograd.grad(loss, x, torch.ones_like(loss))
    return loss.detach(), grad


def _ignored_rows_zero(result: tuple[torch.Tensor, torch.Tensor], target: torch.Tensor, options: CrossEntropyOptions
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    loss, grad = result
    return loss, grad.masked_fill((target == options.ignore_index).unsqueeze(-1), 0.0)


def reference(logits: torch.Tensor, target: torch.Tensor, options: CrossEntropyOptions = DEFAULT
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, dlogits) in float64: autograd through loss_of on the float64 logits, ignored rows' gradient zero."""
    return _ignored_rows_zero(loss_and_grad(loss_of, logits.double(), target, options), target, options)


def framework_result(logits: torch.Tensor, target: torch.Tensor, options: CrossEntropyOptions = DEFAULT
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's own loss and gradient in the logits' dtype (F.cross_entropy without an upcast, autograd), the
    bar a variant must stay within twice the error of (lab/check.py, framework_bound); ignored rows as the
    reference has them."""
    return _ignored_rows_zero(loss_and_grad(loss_of, logits, target, options), target, options)


def error_scale(logits: torch.Tensor, target: torch.Tensor, options: CrossEntropyOptions = DEFAULT,
                with_grad: bool = True) -> tuple[torch.Tensor, ...]:
    """What each output's rounding error grows with, per element. The gradient,
        dz_j = c * s'(x_j) * [w_y (1 - s) (p_j - [j = y]) + s / V (p_j sum(w) - w_j) + 2 lambda lse p_j]
    (c the reduction's factor, s the label smoothing, w the class weights, 1 without), subtracts the target's share
    from the probability, and at a confident target (p near 1) the difference is far smaller than either term: the
    scale is the terms' size, c * s'' * [w_y (1 - s) (p_j + [j = y]) + s / V (p_j sum(w) + w_j) + 2 lambda |lse|
    p_j]. The soft cap's derivative s'(x) = 1 - tanh^2(x / cap) cancels the same way where x is far past the cap
    (tanh^2 near 1: float32 leaves it a multiple of 2^-24, in PyTorch's autograd as in the lab's kernels), so its
    factor in the scale is s'' = 1 + tanh^2(x / cap), the size of its terms. A row's loss,
    w_y (1 - s) (lse - z_y) + s / V sum_j w_j (lse - z_j) + lambda lse^2, cancels the same way where the target is
    confident (a loss of 2e-4 from an lse of 5): its scale is the same sum of magnitudes, reduced as the loss is.
    (loss's scale, dlogits'), or (loss's,) without with_grad (cross_entropy_loss)."""
    m, v = logits.shape
    counted = target != options.ignore_index
    weight = torch.ones(v, dtype=torch.float64, device=logits.device) if options.weight is None else \
        options.weight.double()
    w_y = torch.where(counted, weight[target.clamp(0)] if v else 0.0, 0.0)
    c = 1.0 / w_y.sum() if options.reduction == "mean" else 1.0
    s, lam = options.label_smoothing, options.z_loss
    # A tolerance's scale: float32 will do.
    grad = torch.empty(m, v, dtype=torch.float32, device=logits.device) if with_grad else None
    row = torch.zeros(m, dtype=torch.float64, device=logits.device)
    step = max(1, SCALE_CHUNK // max(1, v))
    for r0 in range(0, m if v else 0, step):  # in chunks of rows: a few float64 temporaries of a chunk's size
        r1 = min(m, r0 + step)
        x = logits[r0:r1].double()
        tanh = torch.tanh(x / options.softcap) if options.softcap is not None else None
        z = options.softcap * tanh if tanh is not None else x
        lse = torch.logsumexp(z, dim=-1, keepdim=True)
        wy = w_y[r0:r1].unsqueeze(-1)
        if grad is not None:
            dcap = 1 + tanh**2 if tanh is not None else 1.0  # s'' above
            p = torch.exp(z - lse)
            terms = p * (wy * (1 - s) + s / v * weight.sum() + 2 * lam * lse.abs()) + s / v * weight
            terms.scatter_add_(-1, target[r0:r1].clamp(0).unsqueeze(-1), wy * (1 - s))
            grad[r0:r1] = (c * counted[r0:r1].unsqueeze(-1) * dcap * terms).nan_to_num_(nan=0.0, posinf=0.0)
        lse_abs, zabs = lse.abs(), torch.where(z.isfinite(), z.abs(), 0.0)
        z_y = zabs.gather(-1, target[r0:r1].clamp(0).unsqueeze(-1))
        row[r0:r1] = (wy * (1 - s) * (lse_abs + z_y) + s / v * (weight * (lse_abs + zabs)).sum(-1, keepdim=True)
                      + lam * lse_abs * lse_abs).squeeze(-1)
    row = torch.where(counted, row, 0.0)
    loss = row if options.reduction == "none" else row.sum() * c
    loss = loss.nan_to_num(nan=0.0, posinf=0.0)
    return (loss, grad) if grad is not None else (loss,)


SCALE_CHUNK = 2**24
"""error_scale's rows at a time, in logits: its float64 temporaries stay near 128 MB each at any size."""


def make_inputs(shape: Shape, dtype: torch.dtype, device: torch.device | str, seed: int = 0,
                options: CrossEntropyOptions = DEFAULT) -> tuple[torch.Tensor, torch.Tensor, CrossEntropyOptions]:
    """Irregular logits (lab/inputs.py's rows: per-row scale and offset, a few large outliers) and targets drawn
    uniformly from the vocabulary, one row in eight ignored."""
    logits = inputs.make_input(shape, dtype, device, seed)
    g = torch.Generator(device="cpu").manual_seed(seed + 1)
    target = torch.randint(0, max(1, shape.n), (shape.m,), generator=g)
    target[torch.rand(shape.m, generator=g) < 0.125] = options.ignore_index
    return logits, target.to(device), options


# Special cases: each an option set or a kind of row the kernels must get right.
SPECIAL_VS = (7, 1000, 4099)


def special_cases(dtype: torch.dtype, device: torch.device | str, seed: int):
    """Special values (lab/inputs.py's special rows, as logits: -inf entries, a row of -inf, +inf, NaN, 1e4), a
    peaked batch (one large logit per row, as a trained model gives, on the target or not), targets on -inf logits,
    every row ignored, and each option (reductions, label smoothing, z-loss, soft-capping, class weights, another
    ignore_index) alone and together."""
    g = torch.Generator(device="cpu").manual_seed(seed + 7)
    for v in SPECIAL_VS:
        x, labels = inputs.special_input(v, dtype, device, seed)
        target = torch.randint(0, v, (x.shape[0],), generator=g)
        target[::4] = DEFAULT.ignore_index  # a random row and its special neighbour, in turn
        yield f"special rows, V={v}", (x, target.to(device), DEFAULT), labels
    # The option cases at one vocabulary on the CPU (the Triton interpreter is slow), at two on a GPU.
    for v in (64,) if torch.device(device).type == "cpu" else (64, 4099):
        logits, target, _ = make_inputs(Shape(16, v), dtype, device, seed)
        peak = torch.randint(0, v, (16,), generator=g)
        peak[::2] = target[::2].clamp(0).cpu()  # half the rows confident and right, half confident and wrong
        peaked = logits.clone()
        peaked[torch.arange(16, device=logits.device), peak.to(logits.device)] = 30.0
        yield f"peaked rows, V={v}", (peaked, target, DEFAULT), None
        masked = logits.clone()
        masked[:, : v // 3] = -math.inf  # a masked part of the vocabulary
        on_mask = target.clone()
        on_mask[1::3] = 0  # a target on a masked logit: its loss is +inf
        yield f"-inf vocabulary entries, V={v}", (masked, on_mask, DEFAULT), None
        yield f"every row ignored, V={v}", (logits, torch.full_like(target, DEFAULT.ignore_index), DEFAULT), None
        weight = torch.rand(v, generator=g).add(0.25).to(device)
        for options in (CrossEntropyOptions(reduction="sum"), CrossEntropyOptions(reduction="none"),
                        CrossEntropyOptions(label_smoothing=0.1), CrossEntropyOptions(z_loss=1e-4),
                        CrossEntropyOptions(softcap=30.0), CrossEntropyOptions(weight=weight),
                        CrossEntropyOptions(ignore_index=3),
                        CrossEntropyOptions(reduction="none", label_smoothing=0.1, z_loss=1e-4, softcap=15.0,
                                            weight=weight)):
            t = target.masked_fill(target == DEFAULT.ignore_index, options.ignore_index)
            yield f"{options.label}, V={v}", (logits, t, options), None


# The loss is float32 whatever the logits' dtype, dlogits in the logits' dtype: probabilities less the target's
# share, rounded to the dtype and summed in float32 over the row, as softmax's output is: softmax's tolerances (and
# its CPU ones, for PyTorch's in-order sums).
TOLERANCES, CPU_TOLERANCES = softmax.TOLERANCES, softmax.CPU_TOLERANCES

# Up to 2^30 logits a point: the float64 reference (8 bytes a logit, twice: loss graph and gradient) stays within
# a GPU's memory beside the logits, their gradient and the check.
MAX_LOGITS = 2**30
SWEEPS: dict[str, tuple[Shape, ...]] = {
    "vocab": tuple(Shape(m, v) for v in VOCABULARIES for m in (1024, 4096, 16384, 32768) if m * v <= MAX_LOGITS),
    "quick": (Shape(4096, 32000), Shape(4096, 128256)),
    "cpu": (Shape(64, 1000), Shape(16, 4099), Shape(4, 32000)),
}
# M = 0 and 1, V = 1 and 2, odd V, both sides of the Triton kernels' block steps, strided rows.
EDGE_SHAPES: tuple[Shape, ...] = (
    Shape(0, 7), Shape(1, 1), Shape(3, 2), Shape(5, 31), Shape(3, 257), Shape(2, 4095), Shape(2, 4096),
    Shape(2, 4097), Shape(3, 1000, 1040), Shape(2, 8193), Shape(2, 32768), Shape(2, 65537), Shape(1, 131073),
)
CPU_EDGE_MAX_N = 8193

CROSS_ENTROPY = register_operator(Operator(
    name="cross_entropy",
    description="loss = cross_entropy(logits, target) and dlogits = d loss / d logits (logits: M x V)",
    make_inputs=make_inputs,
    special_cases=special_cases,
    reference=reference,
    tolerances=TOLERANCES,
    cpu_tolerances=CPU_TOLERANCES,
    min_traffic=Traffic(1, 1),
    bytes_formula="2*M*V*itemsize",
    baseline="torch.cross_entropy",
    sweeps=SWEEPS,
    gpu_sweeps=("vocab",),
    edge_shapes=EDGE_SHAPES,
    cpu_edge_max_n=CPU_EDGE_MAX_N,
    error_scale=error_scale,
    framework_result=framework_result,
    output_dtypes=lambda dtype: (torch.float32, dtype),
    checked_as=lambda dtype: (dtype, dtype),  # a 16-bit loss as PyTorch gives it: in the logits' dtype
    output_names=("loss", "dlogits"),
    x_label="V (vocabulary)",
))


def loss_reference(logits: torch.Tensor, target: torch.Tensor, options: CrossEntropyOptions = DEFAULT
                   ) -> tuple[torch.Tensor]:
    """(loss,) in float64: loss_of on the float64 logits."""
    with torch.no_grad():
        return (loss_of(logits.double(), target, options),)


def loss_framework_result(logits: torch.Tensor, target: torch.Tensor, options: CrossEntropyOptions = DEFAULT
                          ) -> tuple[torch.Tensor]:
    """PyTorch's own loss in the logits' dtype (cross_entropy's framework_result, without the gradient)."""
    with torch.no_grad():
        return (loss_of(logits, target, options),)


# The same inputs, cases, tolerances and sweeps as cross_entropy's; one output, one read.
CROSS_ENTROPY_LOSS = register_operator(dataclasses.replace(
    CROSS_ENTROPY,
    name="cross_entropy_loss",
    description="loss = cross_entropy(logits, target) alone, as evaluation computes it (no gradient; logits: M x V)",
    reference=loss_reference,
    # One read of the logits; the GB/s's copy moves the same bytes (half read, half written), as every operator's.
    min_traffic=Traffic(1, 0),
    bytes_formula="M*V*itemsize",
    error_scale=lambda logits, target, options=DEFAULT: error_scale(logits, target, options, with_grad=False),
    framework_result=loss_framework_result,
    output_dtypes=lambda dtype: (torch.float32,),
    checked_as=lambda dtype: (dtype,),
    output_names=("loss",),
))
