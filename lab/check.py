"""Correctness: every variant against torch.softmax in float64 on the same input.

An element passes when |y - ref| <= rtol * |ref| + atol, with atol = max(atol_rel * max|ref row|,
the dtype's smallest subnormal): tolerances scale with each row, so long rows of tiny
probabilities are held to the same relative standard as short ones. The whole output must also
satisfy ||y - ref|| / ||ref|| <= norm_tol. NaN must appear exactly where the reference has NaN
(torch's semantics for -inf rows, +inf and NaN entries). Outputs are poisoned with NaN before the
run, so an element the variant never wrote fails.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from lab.registry import Kernel, dtype_name


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol_rel: float
    norm_tol: float


# Rounding the output to a 16-bit dtype alone costs up to half an ulp (2^-11 for float16, 2^-9 for
# bfloat16, relative): rtol allows four times that. float32 outputs carry the error of exp (fast
# exp2-based __expf: about 1e-6 relative over the arguments that matter) and of the float32 sum.
# atol is only for elements far below the row's maximum (flushed or subnormal results).
TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=2e-5, atol_rel=1e-7, norm_tol=1e-5),
    torch.float16: Tolerance(rtol=2e-3, atol_rel=1e-5, norm_tol=1e-3),
    torch.bfloat16: Tolerance(rtol=8e-3, atol_rel=1e-5, norm_tol=4e-3),
}


@dataclass
class CheckResult:
    ok: bool
    worst_ratio: float  # max over elements of |y - ref| / allowed; <= 1 passes
    rel_norm: float  # ||y - ref|| / ||ref|| over elements where ref is not NaN
    message: str = ""

    def summary(self) -> str:
        status = "ok" if self.ok else "FAIL"
        return f"{status} (worst {self.worst_ratio:.2g} of tolerance, rel. norm {self.rel_norm:.2g}){self.message}"


# The float64 reference of each operator the registry knows (lab.registry keys variants by op).
REFERENCES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": lambda x: torch.softmax(x.double(), dim=-1),
}


def reference(x: torch.Tensor, op: str = "softmax") -> torch.Tensor:
    return REFERENCES[op](x)


def compare(y: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, row_labels: list[str] | None = None) -> CheckResult:
    """Compare a variant's output with the float64 reference (see the module docstring)."""
    if y.shape != ref.shape:
        return CheckResult(False, math.inf, math.inf, f": output shape {tuple(y.shape)}, expected {tuple(ref.shape)}")
    if y.dtype != dtype:
        return CheckResult(False, math.inf, math.inf, f": output dtype {y.dtype}, expected {dtype}")
    if y.numel() == 0:
        return CheckResult(True, 0.0, 0.0)
    tol = TOLERANCES[dtype]
    y64 = y.double()
    ref_nan = ref.isnan()
    y_nan = y64.isnan()
    nan_mismatch = ref_nan != y_nan
    ref0 = ref.masked_fill(ref_nan, 0.0)
    smallest = torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps
    atol = (ref0.abs().amax(dim=-1, keepdim=True) * tol.atol_rel).clamp_min(smallest)
    err = (y64.masked_fill(y_nan, 0.0) - ref0).abs()
    ratio = err / (tol.rtol * ref0.abs() + atol)
    ratio = ratio.masked_fill(nan_mismatch, math.inf)
    worst = ratio.max().item()
    finite = ~ref_nan
    diff_norm = torch.linalg.vector_norm(torch.where(finite & ~y_nan, y64 - ref0, 0.0)).item()
    ref_norm = torch.linalg.vector_norm(ref0).item()
    rel_norm = diff_norm / ref_norm if ref_norm > 0 else (0.0 if diff_norm == 0 else math.inf)
    ok = worst <= 1.0 and rel_norm <= tol.norm_tol
    if ok:
        return CheckResult(True, worst, rel_norm)
    flat = int(ratio.reshape(-1).argmax().item())
    row, col = divmod(flat, ref.shape[1])
    what = f"row {row}" + (f" ({row_labels[row]})" if row_labels else "")
    nan_count = int(nan_mismatch.sum().item())
    detail = (
        f": worst at {what}, col {col}: got {y64[row, col].item():.6g}, expected {ref[row, col].item():.6g}"
        f" (rtol {tol.rtol:g}, atol {atol[row, 0].item():.2g}, norm tol {tol.norm_tol:g})"
    )
    if nan_count:
        detail += f"; {nan_count} element(s) NaN where the reference is not, or the reverse (unwritten?)"
    return CheckResult(False, worst, rel_norm, detail)


def run_variant(kernel: Kernel, x: torch.Tensor, writes_out: bool) -> torch.Tensor:
    """Call a kernel as the checker does: into a NaN-poisoned output when it takes one."""
    if not writes_out:
        return kernel(x)
    out = torch.full(x.shape, math.nan, dtype=x.dtype, device=x.device)
    y = kernel(x, out)
    if y is not out and y.data_ptr() != out.data_ptr():
        raise RuntimeError("the variant did not return the `out` tensor it was given")
    return out


def check(kernel: Kernel, x: torch.Tensor, writes_out: bool, ref: torch.Tensor | None = None,
          row_labels: list[str] | None = None) -> CheckResult:
    """Run `kernel` on x and compare with the float64 reference (computed unless given)."""
    try:
        y = run_variant(kernel, x, writes_out)
    except Exception as e:  # a variant that raises fails the check, with its error shown
        return CheckResult(False, math.inf, math.inf, f": raised {type(e).__name__}: {e}".splitlines()[0])
    if x.is_cuda:
        torch.cuda.synchronize()
    return compare(y, reference(x) if ref is None else ref, x.dtype, row_labels)


def describe_tolerances() -> str:
    return "; ".join(
        f"{dtype_name(d)}: rtol {t.rtol:g}, atol {t.atol_rel:g} x row max, norm {t.norm_tol:g}"
        for d, t in TOLERANCES.items()
    )
