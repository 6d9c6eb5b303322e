"""Timing. On a GPU: triton.testing.do_bench, L2 flushed before every call, median with p20/p80.
On the CPU: the same quantiles of a wall-clock loop. GB/s counts the bytes the operator must move
(softmax: one read of x and one write of y, 2 * M * N * itemsize), whatever the variant really
moves; the ceiling is a copy moving the same bytes (half read, half written) timed the same way in
the same run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

QUANTILES = (0.5, 0.2, 0.8)


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float


def time_gpu(fn: Callable[[], object], warmup_ms: float = 25, rep_ms: float = 100) -> Timing:
    from triton.testing import do_bench

    med, p20, p80 = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=list(QUANTILES))
    return Timing(med, p20, p80)


def time_cpu(fn: Callable[[], object], min_seconds: float = 0.2, max_reps: int = 200) -> Timing:
    fn()  # warm-up
    samples: list[float] = []
    deadline = time.perf_counter() + min_seconds
    while len(samples) < 5 or (time.perf_counter() < deadline and len(samples) < max_reps):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    q = statistics.quantiles(samples, n=10, method="inclusive")  # deciles: q[1] is p20, q[7] is p80
    return Timing(statistics.median(samples), q[1], q[7])


def time_fn(fn: Callable[[], object], device: torch.device) -> Timing:
    return time_gpu(fn) if device.type == "cuda" else time_cpu(fn)


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")


_COPY_CACHE: dict[tuple[int, str], Timing] = {}


def copy_ceiling(moved: int, device: torch.device | str) -> Timing:
    """Time a device-to-device copy that moves `moved` bytes (reads moved / 2, writes moved / 2), once
    per size and run."""
    nbytes = max(1, moved // 2)
    key = (nbytes, str(device))
    if key not in _COPY_CACHE:
        src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(7)
        dst = torch.empty_like(src)
        _COPY_CACHE[key] = time_fn(lambda: dst.copy_(src), device)
        del src, dst
    return _COPY_CACHE[key]
