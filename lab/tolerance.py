"""The tolerance an operator declares for a dtype (lab/check.py applies it): an element passes when
|y - ref| <= rtol * scale + atol, atol = max(atol_rel * max|ref row|, the dtype's smallest subnormal, float32's
smallest normal: check.FLUSHED), and the whole output when ||y - ref|| / ||scale|| <= norm_tol (plus the rounding
of the exact answer to the dtype)."""

from __future__ import annotations

import math
from dataclasses import dataclass

UNIT_ROUNDOFF_FP32 = 2.0**-24  # the kernels accumulate in float32 whatever their input dtype


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol_rel: float
    norm_tol: float
    sums_rows: bool = False
    """The operator sums along the row (softmax, its backward): rtol and norm_tol grow by
    u * sqrt(N), u = 2^-24 (float32's unit roundoff), the typical rounding error of a float32 sum of
    N terms: 6.1e-5 at N = 2^20, 3.8e-6 at N = 4096 (float32 rtol is 2e-5)."""

    def for_row_length(self, n: int) -> tuple[float, float]:
        """(rtol, norm_tol) for rows of n elements."""
        grow = UNIT_ROUNDOFF_FP32 * math.sqrt(n) if self.sums_rows else 0.0
        return self.rtol + grow, self.norm_tol + grow
