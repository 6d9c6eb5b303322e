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
WARMUP_MS = 25.0  # do_bench's warm-up, then its timed repetitions, in milliseconds of calls
REP_MS = 100.0

# How a timing was taken, as the reports say it.
DO_BENCH = "median of triton.testing.do_bench, L2 flushed before every call"
CUDAGRAPH = "median of CUDA graph replays (triton.testing.do_bench_cudagraph): no launch overhead, L2 not flushed"
WALL_CLOCK = "CPU wall clock, one thread (no cache flush)"


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float


def time_gpu(fn: Callable[[], object], warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS) -> Timing:
    from triton.testing import do_bench

    med, p20, p80 = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=list(QUANTILES))
    return Timing(med, p20, p80)


def time_cudagraph(fn: Callable[[], object], rep_ms: float = REP_MS) -> Timing:
    """The calls captured in a CUDA graph and replayed: the kernels' own time, without the launch
    overhead and without flushing the L2 between calls (inputs that fit in L2 stay there)."""
    import torch
    from triton.testing import do_bench_cudagraph

    with torch.cuda.stream(torch.cuda.Stream()):  # graphs are captured on a side stream
        med, p20, p80 = do_bench_cudagraph(fn, rep=rep_ms, quantiles=list(QUANTILES))
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


def time_fn(fn: Callable[[], object], device: torch.device, warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS,
            cudagraph: bool = False) -> Timing:
    if device.type != "cuda":
        return time_cpu(fn, min_seconds=2 * rep_ms / 1e3)
    return time_cudagraph(fn, rep_ms) if cudagraph else time_gpu(fn, warmup_ms, rep_ms)


def method(device: torch.device, cudagraph: bool = False) -> str:
    return WALL_CLOCK if device.type != "cuda" else CUDAGRAPH if cudagraph else DO_BENCH


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")


_COPY_CACHE: dict[tuple, Timing] = {}


def copy_ceiling(moved: int, device: torch.device | str, warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS,
                 cudagraph: bool = False) -> Timing:
    """Time a device-to-device copy that moves `moved` bytes (reads moved / 2, writes moved / 2), the
    same way as the variants (once per size, timing and run)."""
    nbytes = max(1, moved // 2)
    device = torch.device(device)
    key = (nbytes, str(device), warmup_ms, rep_ms, cudagraph)
    if key not in _COPY_CACHE:
        src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(7)
        dst = torch.empty_like(src)
        _COPY_CACHE[key] = time_fn(lambda: dst.copy_(src), device, warmup_ms, rep_ms, cudagraph)
        del src, dst
    return _COPY_CACHE[key]
