"""Correctness: every variant against its operator's float64 reference on the same inputs.

An element passes when |y - ref| <= rtol * scale + atol, with atol = max(atol_rel * max|ref row|, the dtype's
smallest subnormal, float32's smallest normal: FLUSHED): tolerances scale with each row, so long rows of tiny
probabilities are held to the same relative standard as short ones. The scale is |ref|, or what the operator says
the rounding error of an element grows with (softmax_backward: its terms, since dx has cancellation). The whole
output must also satisfy ||y - ref|| / ||scale|| <= norm_tol + twice the error of rounding the exact answer to the
output dtype (no kernel can do better than that rounding: float16 probabilities of long rows are subnormal, on a
grid coarser than norm_tol). For operators that sum along the row, rtol and norm_tol grow by u * sqrt(N) (see
Tolerance.sums_rows): the float64 check showed torch.softmax itself off by 1.1e-5 in norm on a float32 row of 2^20.
NaN and infinities must appear exactly where the reference has them (torch's semantics for -inf rows, +inf and NaN
entries; an overflowing sum), and where the reference lies beyond the output dtype's largest finite value (a float16
gradient summed over many tokens), the infinity it rounds to. Outputs are poisoned with NaN before the run, so an
element the variant never wrote fails.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lab.registry import Kernel, dtype_name, overwrites_input
from lab.tolerance import Tolerance

CHUNK_ELEMENTS = 1 << 24  # compare() works through the output in row blocks of at most this many elements


@dataclass
class CheckResult:
    ok: bool
    worst_ratio: float  # max over elements of |y - ref| / allowed; <= 1 passes
    rel_norm: float  # ||y - ref|| / ||ref|| over elements where ref is not NaN
    message: str = ""

    def summary(self) -> str:
        status = "ok" if self.ok else "FAIL"
        return f"{status} (worst {self.worst_ratio:.2g} of tolerance, rel. norm {self.rel_norm:.2g}){self.message}"


FLUSHED = torch.finfo(torch.float32).smallest_normal
"""Results below float32's smallest normal (2^-126) may be 0: the kernels compute in float32 and their exponentials
flush denormals (csrc/include/lab/exp.cuh). Float32 and bfloat16 outputs that small are 0 within this; float16's
subnormals start far above it and are held to their own grid (a cross-entropy gradient of 2e-44, a mean's 1 / 600000
times a probability of 1e-38, came out 0 from the CUDA kernel, where the row's atol was 1.4e-45)."""


def as_held(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The reference as `dtype` holds it: an element beyond the dtype's largest finite value is the infinity it
    rounds to (the one answer the dtype has), the others as they are."""
    held = ref.to(dtype)
    return torch.where(ref.isfinite() & ~held.isfinite(), held.to(ref.dtype), ref)


def compare(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, row_labels: list[str] | None = None,
            tolerances: dict[torch.dtype, Tolerance] | None = None, scale: torch.Tensor | None = None) -> CheckResult:
    """Compare a variant's output with the float64 reference (see the module docstring). Tolerances
    are the operator's (softmax's when not given); scale is |ref| when not given; a scalar or a 1-D output is
    one row."""
    if tolerances is None:
        from lab.operators import get

        tolerances = get("softmax").tolerances
    while ref.dim() < 2 and y.dim() == ref.dim():  # a scalar or a 1-D output is one row
        y, ref = y.unsqueeze(0), ref.unsqueeze(0)
        scale = None if scale is None else scale.unsqueeze(0)
    if y.shape != ref.shape:
        return CheckResult(False, math.inf, math.inf, f": output shape {tuple(y.shape)}, expected {tuple(ref.shape)}")
    if y.dtype != dtype:
        return CheckResult(False, math.inf, math.inf, f": output dtype {y.dtype}, expected {dtype}")
    if y.numel() == 0:
        return CheckResult(True, 0.0, 0.0)
    tol = tolerances[dtype]
    rtol, norm_tol = tol.for_row_length(ref.shape[-1])
    n = ref.shape[-1]
    y, ref = y.reshape(-1, n), ref.reshape(-1, n)
    scale = None if scale is None else scale.reshape(-1, n)
    smallest = max(torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps, FLUSHED)
    # Row blocks of at most CHUNK_ELEMENTS: the float64 temporaries of a block, not of the whole output,
    # are what the check holds beside the reference (a float32 4096x262144 output is 8 GiB in float64).
    rows_per_block = max(1, CHUNK_ELEMENTS // n)
    blocks = [slice(r, min(r + rows_per_block, ref.shape[0])) for r in range(0, ref.shape[0], rows_per_block)]
    worst, worst_at, mismatches, diff_sq, ref_sq = -math.inf, (0, 0, math.nan, math.nan), 0, 0.0, 0.0
    for rows in blocks:
        y64, ref_b = y[rows].double(), ref[rows]
        ref_b = as_held(ref_b, dtype)
        # NaN and infinities must appear exactly where the reference has them (the same infinity); the
        # tolerances apply to the finite elements.
        ref_special = ~ref_b.isfinite()
        y_special = ~y64.isfinite()
        special_mismatch = (ref_special | y_special) & ~((y64 == ref_b) | (y64.isnan() & ref_b.isnan()))
        ref0 = ref_b.masked_fill(ref_special, 0.0)
        scale0 = ref0.abs() if scale is None else scale[rows].masked_fill(~scale[rows].isfinite() | ref_special, 0.0)
        atol = (ref0.abs().amax(dim=-1, keepdim=True) * tol.atol_rel).clamp_min(smallest)
        err = (y64.masked_fill(y_special, 0.0) - ref0).abs().masked_fill(ref_special, 0.0)
        ratio = (err / (rtol * scale0 + atol)).masked_fill(special_mismatch, math.inf)
        flat = int(ratio.reshape(-1).argmax().item())
        block_worst = ratio.reshape(-1)[flat].item()
        # The first worst element in row-major order, as one argmax over the output; a NaN ratio fails.
        if block_worst > worst or (math.isnan(block_worst) and not math.isnan(worst)):
            worst = block_worst
            r, c = divmod(flat, n)
            worst_at = (rows.start + r, c, y64[r, c].item(), atol[r, 0].item())
        mismatches += int(special_mismatch.sum().item())
        diff_sq += torch.linalg.vector_norm(torch.where(~ref_special & ~y_special, y64 - ref0, 0.0)).item() ** 2
        ref_sq += torch.linalg.vector_norm(scale0).item() ** 2
    diff_norm, ref_norm = math.sqrt(diff_sq), math.sqrt(ref_sq)
    rel_norm = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    if rel_norm > norm_tol and ref_norm > 0:  # only then can the allowance change the verdict
        # Where the dtype cannot hold the answer (overflow) the element check decides, not this.
        rounding_sq = 0.0
        for rows in blocks:
            ref0 = ref[rows].masked_fill(~ref[rows].isfinite(), 0.0)
            rounded = ref0.to(dtype).double()
            rounding_sq += torch.linalg.vector_norm(torch.where(rounded.isfinite(), rounded - ref0, 0.0)).item() ** 2
        norm_tol += 2 * math.sqrt(rounding_sq) / ref_norm
    ok = worst <= 1.0 and rel_norm <= norm_tol
    if ok:
        return CheckResult(True, worst, rel_norm)
    row, col, got, atol_row = worst_at
    what = f"row {row}" + (f" ({row_labels[row]})" if row_labels else "")
    detail = (
        f": worst at {what}, col {col}: got {got:.6g}, expected {ref[row, col].item():.6g}"
        f" (rtol {rtol:.2g}, atol {atol_row:.2g}, norm tol {norm_tol:.2g})"
    )
    if mismatches:
        detail += (f"; {mismatches} element(s) NaN or infinite where the reference is not, or the reverse "
                   "(unwritten?)")
    return CheckResult(False, worst, rel_norm, detail)


Outputs = torch.Tensor | tuple[torch.Tensor, ...]


def as_tuple(outputs: Outputs) -> tuple[torch.Tensor, ...]:
    return outputs if isinstance(outputs, tuple) else (outputs,)


@dataclass(frozen=True)
class OutputSpec:
    """What a variant's outputs are: their shapes and dtypes, and whether there are several (then a tuple)."""

    shapes: tuple[torch.Size, ...]
    dtypes: tuple[torch.dtype, ...]
    several: bool

    def empty(self, device: torch.device, fill: float | None = None) -> Outputs:
        """Output tensors of this spec (NaN-filled with fill=nan): a tensor, or a tuple of several."""
        outs = tuple(torch.empty(s, dtype=d, device=device) if fill is None else
                     torch.full(s, fill, dtype=d, device=device) for s, d in zip(self.shapes, self.dtypes, strict=True))
        return outs if self.several else outs[0]


def output_spec(op, ref: Outputs, dtype: torch.dtype) -> OutputSpec:
    """The outputs of `op` for inputs of `dtype` whose reference is `ref`: shaped like it, of the operator's output
    dtypes (one output of the input's dtype by default)."""
    dtypes = op.output_dtypes(dtype) if op is not None and op.output_dtypes is not None else (dtype,)
    return OutputSpec(tuple(r.shape for r in as_tuple(ref)), dtypes, isinstance(ref, tuple))


def held_to_dtypes(op, spec: OutputSpec, dtype: torch.dtype) -> tuple[torch.dtype, ...]:
    """The dtype whose tolerance each output of `spec` is held to, for inputs of `dtype`: the operator's
    checked_as, else each output's own dtype."""
    return op.checked_as(dtype) if op.checked_as is not None else spec.dtypes


def run_variant(kernel: Kernel, inputs: torch.Tensor | tuple, writes_out: bool, spec: OutputSpec | None = None
                ) -> Outputs:
    """Call a kernel as the checker does: kernel(*inputs), or kernel(*inputs, out) into NaN-poisoned outputs of
    `spec` (by default one shaped like the first input, of its dtype) when it takes them: a tensor, or a tuple of
    them for an operator of several outputs."""
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    if overwrites_input(kernel):  # its own copy: the caller's inputs stay as the reference saw them
        inputs = (inputs[0].clone(), *inputs[1:])
    if not writes_out:
        return kernel(*inputs)
    first = inputs[0]
    out = (spec or OutputSpec((first.shape,), (first.dtype,), False)).empty(first.device, math.nan)
    y = kernel(*inputs, out)
    if not isinstance(y, tuple | torch.Tensor) or len(as_tuple(y)) != len(as_tuple(out)) or any(
            a is not b and a.data_ptr() != b.data_ptr() for a, b in zip(as_tuple(y), as_tuple(out), strict=True)):
        raise RuntimeError("the variant did not return the `out` tensor it was given")
    return out


def check(kernel: Kernel, inputs: torch.Tensor | tuple, writes_out: bool, ref: Outputs | None = None,
          row_labels: list[str] | None = None, op=None, memo: dict | None = None) -> CheckResult:
    """Run `kernel` on the inputs and compare with the operator's float64 reference (computed unless given),
    each output against its own (an operator of several outputs names the failing one). `op` is a
    lab.operators.Operator; softmax when not given. memo: where the checks of several variants on the same inputs
    keep the operator's error scale and PyTorch's own result, computed for the first (a head's, at 65536 tokens,
    takes seconds of float64 matmuls)."""
    if op is None:
        from lab.operators import get

        op = get("softmax")
    inputs = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    if ref is None:
        ref = op.reference(*inputs)
    spec = output_spec(op, ref, inputs[0].dtype)
    try:
        y = run_variant(kernel, inputs, writes_out, spec)
    except torch.OutOfMemoryError:  # not a wrong result: the caller says the point is too large for it
        raise
    except Exception as e:  # a variant that raises fails the check, with its error shown
        return CheckResult(False, math.inf, math.inf, f": raised {type(e).__name__}: {e}".splitlines()[0])
    if inputs[0].is_cuda:
        torch.cuda.synchronize()
    refs, ys = as_tuple(ref), as_tuple(y)
    if len(ys) != len(refs):
        return CheckResult(False, math.inf, math.inf, f": {len(ys)} output(s), expected {len(refs)}")
    scales = (as_tuple(_kept(memo, "error_scale", lambda: op.error_scale(*inputs))) if op.error_scale is not None
              else (None,) * len(refs))
    tolerances = op.tolerances_for(inputs[0].device)
    held_to = held_to_dtypes(op, spec, inputs[0].dtype)
    results = [compare(y_i, r_i, d_i, row_labels if r_i.dim() == 2 else None, {d_i: tolerances[h_i]}, s_i)
               for y_i, r_i, d_i, h_i, s_i in zip(ys, refs, spec.dtypes, held_to, scales, strict=True)]
    if op.framework_result is not None and inputs[0].dtype in LOW_PRECISION and all(r.ok for r in results):
        framework = _kept(memo, "framework_result", lambda: op.framework_result(*inputs))
        recipes = [as_tuple(f) for f in framework] if isinstance(framework, list) else [as_tuple(framework)]
        from_scale = op.framework_floor_from_scale
        from_scale = from_scale if isinstance(from_scale, tuple) else (from_scale,) * len(refs)
        bounds = [framework_bound(y_i, [recipe[i] for recipe in recipes], r_i, tolerances[h_i], s_i if use else None,
                                  zero_ref_scale=s_i)
                  for i, (y_i, r_i, h_i, s_i, use) in enumerate(zip(ys, refs, held_to, scales, from_scale,
                                                                    strict=True))]
        # The comparison's norm error stays the result's; its worst share is of whichever bar is nearer.
        results = [CheckResult(b.ok, max(r.worst_ratio, b.worst_ratio), r.rel_norm, b.message)
                   for r, b in zip(results, bounds, strict=True)]
    if len(results) == 1:
        return results[0]
    failed = [(name, r) for name, r in zip(op.output_names, results, strict=True) if not r.ok]
    return CheckResult(not failed, max(r.worst_ratio for r in results), max(r.rel_norm for r in results),
                       "".join(f"; {name}{r.message}" for name, r in failed))


def _kept(memo: dict | None, key: str, compute):
    """compute(), once per memo."""
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


FRAMEWORK_ERROR_FACTOR = 2.0
"""A variant's largest error may be at most this many times that of PyTorch's own result in the same dtype."""
LOW_PRECISION = (torch.float16, torch.bfloat16)
"""The input dtypes held to PyTorch's own error too: in float32 PyTorch's result is within an ulp or two, and the
float64 tolerance is the bar."""


def framework_bound(y: torch.Tensor, framework: torch.Tensor | list[torch.Tensor], ref: torch.Tensor, tol: Tolerance,
                    scale: torch.Tensor | None = None, zero_ref_scale: torch.Tensor | None = None) -> CheckResult:
    """A passed comparison held to PyTorch's own error as well: max|y - ref| <= FRAMEWORK_ERROR_FACTOR *
    max|framework - ref| + floor * max(scale) over the elements where the reference is finite in y's dtype
    (framework: PyTorch's result, or a list of its results by several recipes, whose largest finite error counts),
    scale the operator's error scale (|ref| without one), as in compare, floor the larger of atol_rel and half a
    16-bit output's eps (times the largest value: half an ulp to an ulp of it, as far as a result summed in another
    order may round; for every operator held to PyTorch's error). The floor keeps a framework that happens to be
    exact from failing every rounding: a soft-capped row of one logit has loss and gradient 0, which PyTorch gets
    exactly and a kernel that computes the cap twice gets a float32 ulp of it off (GPU fuzz, bfloat16 2 x 1); |ref|
    is 0 there, the scale is not. And PyTorch's 16-bit result may land 0.4 ulp from the exact one where one summed
    in another order lands 1.1 ulps off (a head's bfloat16 dW of values up to 12, its cross-entropy in float32: CPU
    fuzz). worst_ratio: the share of that bound taken. zero_ref_scale: where |ref| is the floor's and is 0
    everywhere, the error scale that floors it instead (a vocabulary of one class with label smoothing: every
    gradient exactly 0, which PyTorch's formula gets and the kernel's, 1 - 0.9 - 0.1 in float32, misses by 2e-8 of
    its scale: GPU fuzz)."""
    ref = as_held(ref, y.dtype)  # an answer beyond the dtype is its infinity, whose placement compare checked
    finite = ref.isfinite()
    if not finite.any():
        return CheckResult(True, 0.0, 0.0)
    ref_f = ref[finite]
    ours = (y.double()[finite] - ref_f).abs().max().item()
    errors = [(f.double()[finite] - ref_f).abs().nan_to_num(nan=math.inf).max().item()
              for f in (framework if isinstance(framework, list) else [framework])]
    theirs = max((e for e in errors if math.isfinite(e)), default=math.inf)
    magnitude = (ref_f.abs() if scale is None else scale.double()[finite]).max().item()
    if magnitude == 0 and zero_ref_scale is not None:
        magnitude = zero_ref_scale.double()[finite].max().item()
    rounding = torch.finfo(y.dtype).eps / 2 if y.dtype in LOW_PRECISION else 0.0
    bound = FRAMEWORK_ERROR_FACTOR * theirs + max(tol.atol_rel, rounding) * magnitude
    ratio = ours / bound if bound > 0 else (0.0 if ours == 0 else math.inf)
    if ratio <= 1.0:
        return CheckResult(True, ratio, 0.0)
    floor = bound - FRAMEWORK_ERROR_FACTOR * theirs
    return CheckResult(False, ratio, math.inf, f": largest error {ours:.3g}, more than {FRAMEWORK_ERROR_FACTOR:g}x "
                                               f"PyTorch's own in this dtype ({theirs:.3g}) + {floor:.2g}")


def describe_tolerances(tolerances: dict[torch.dtype, Tolerance]) -> str:
    return "; ".join(
        f"{dtype_name(d)}: rtol {t.rtol:g}, atol {t.atol_rel:g} x row max, norm {t.norm_tol:g}"
        for d, t in tolerances.items()
    )
