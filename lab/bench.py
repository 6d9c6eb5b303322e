"""Timing. On a GPU: triton.testing.do_bench's loop (CUDA events around each call, the L2 flushed
by writing a buffer before every call, median with p20/p80), with the flush buffer's size a
parameter (do_bench's 256 MB by default), and beside each timing the host time of one call and the
flush's own GPU time: a call whose host work outlasts the flush reaches the GPU late, and the wait is
in its time (`host_bound`). On the CPU: the same quantiles of a wall-clock loop. GB/s counts the bytes
the operator must move (softmax: one read of x and one write of y, 2 * M * N * itemsize), whatever the
variant really moves; the ceiling is a copy moving the same bytes (half read, half written) timed the
same way in the same run.

The variants of one point, and the copy, are timed together in interleaved rounds (`time_rounds`): each
round times every call in turn with do_bench's loop, in a new order every round (a seeded shuffle), and a
call's median is taken over all its rounds' samples. A GPU's speed drifts over seconds (clocks,
temperature, the memory's state): one stretch per variant once ranked two timings of the very same kernel
5% apart on a tensor of a few MB; in rounds every call is timed across the same stretches of time. Before
every stretch of calls (and before time_gpu's timed calls), `l2_reset` runs the same work whatever ran
before: the flush alone leaves part of an input in the L2 after some stretches and not after others, a
steady 6-12% on tensors of a few to a few tens of MB. The measurements: notebook/l2-reset-before-timing/.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch

from lab.registry import overwrites_input

QUANTILES = (0.5, 0.2, 0.8)
WARMUP_MS = 25.0  # do_bench's warm-up, then its timed repetitions, in milliseconds of calls
REP_MS = 100.0
FLUSH_MB = 256  # triton.testing.do_bench's L2 flush: 256 MB written before every call
ROUNDS = 5  # time_rounds: the calls of a point timed in turn, five times over
ORDER_SEED = 0  # round_orders' shuffles
HOST_CALLS = 20  # back-to-back calls timed on the host for a call's host time
RESET_CALLS = 20  # l2_reset: flushed copies of an L2-sized buffer before every timed stretch
LONG_FLUSH_MAX_MB = 8192  # the longest flush for the host-bound check (about 2 ms of an H200's writes)

# How a timing was taken, as the reports say it.
DO_BENCH = ("median of triton.testing.do_bench's loop, L2 flushed before every call (a {mb} MB write) and reset "
            "before every stretch of calls (copies of an L2-sized buffer)")
ROUNDS_NOTE = (", a point's variants and its ceiling (the copy, or an operator's matmuls) timed in {rounds} "
               "interleaved rounds")
CUDAGRAPH = "median of CUDA graph replays (triton.testing.do_bench_cudagraph): no launch overhead, L2 not flushed"
WALL_CLOCK = "CPU wall clock, one thread (no cache flush)"


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p20_ms: float
    p80_ms: float
    host_us: float | None = None  # host time of one call, back to back (GPU timing only)
    flush_us: float | None = None  # the GPU time of the flush before each call
    long_flush_ms: float | None = None  # the median again behind a longer flush, where the host's time came near
    long_flush_mb: int | None = None  # that flush's size

    @property
    def host_bound(self) -> bool:
        """The GPU waited for the host's launches and the median holds part of the wait: where a call's
        host time came near the flush's GPU time, the call was timed again behind a flush long enough to
        hide twice that host time (four times the flush at least), and it ran faster there."""
        return self.long_flush_ms is not None and self.long_flush_ms < 0.95 * self.median_ms - 5e-4


_FLUSH: dict[tuple[int, int], tuple[torch.Tensor, float]] = {}


def flush_buffer(flush_mb: int) -> tuple[torch.Tensor, float]:
    """The flush buffer of `flush_mb` MB on the current GPU and the median GPU time (us) of writing it."""
    key = (torch.cuda.current_device(), flush_mb)
    if key not in _FLUSH:
        if flush_mb < 1:
            raise ValueError(f"the flush buffer must be at least 1 MB, got {flush_mb}")
        if len(_FLUSH) >= 2:
            _FLUSH.clear()  # two buffers at most: the flush and the long one
        buf = torch.empty(flush_mb * 2**20 // 4, dtype=torch.int32, device="cuda")
        buf.zero_()
        # The write timed as any call is: after a write of the buffer, between two events.
        _FLUSH[key] = buf, statistics.median(timed_calls(buf.zero_, buf, 10)) * 1e3
    return _FLUSH[key]


_RESET: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def l2_reset(buf: torch.Tensor, calls: int = RESET_CALLS) -> None:
    """The same stretch of work before every timed stretch, whatever ran before it: `calls` copies of a
    buffer the size of the L2 into another, each after writing the flush buffer `buf`.

    Why: the flush does not empty the L2 of everything. On the H200 a stretch of one kernel's flushed calls
    ran at one of two steady levels set by the stretch before it (bfloat16 4096x4096, cuda.auto: 19.9 or
    21.2 us, against 21.0 for a copy of the same bytes): the faster level read part of its input from the L2.
    After a few flushed copies of an L2-sized buffer no neighbour gave the faster level
    (notebook/l2-reset-before-timing/)."""
    dev = torch.cuda.current_device()
    if dev not in _RESET:
        size = torch.cuda.get_device_properties(dev).L2_cache_size
        src = torch.ones(max(size, 2**20), dtype=torch.uint8, device="cuda")
        _RESET[dev] = src, torch.empty_like(src)
    src, dst = _RESET[dev]
    for _ in range(calls):
        buf.zero_()
        dst.copy_(src)


class CopyFlush:
    """A flush that reads and writes: each call (`zero_`, the name timed_calls calls) copies one half of
    `flush_mb` MB into the other. Tried against the L2 state above, it did not change it; the lab flushes by
    writing, as do_bench does (notebook/studies/: call_series.py --flush copy)."""

    def __init__(self, flush_mb: int):
        half = flush_mb * 2**20 // 2
        self.src = torch.ones(half, dtype=torch.uint8, device="cuda")
        self.dst = torch.empty_like(self.src)

    def zero_(self) -> None:
        self.dst.copy_(self.src)


def host_us(fn: Callable[[], object], calls: int = HOST_CALLS) -> float:
    """Host time of one call (us): `calls` calls back to back, no flush and no synchronisation between them."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6


def timed_events(fn: Callable[[], object], buf: torch.Tensor,
                 calls: int) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    """`calls` calls, each after writing `buf` (the L2 flush), each between two CUDA events: the (start, end)
    event pairs, recorded and synchronized."""
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for s, e in events:
        buf.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return events


def timed_calls(fn: Callable[[], object], buf: torch.Tensor, calls: int) -> list[float]:
    """`calls` calls, each after writing `buf` (the L2 flush), each between two CUDA events: their times in ms."""
    return [s.elapsed_time(e) for s, e in timed_events(fn, buf, calls)]


def timed_stretch(fn: Callable[[], object], buf: torch.Tensor, calls: int, pre_calls: int) -> list[float]:
    """One stretch of a call's timed calls, as every round takes it (the lab's, scripts/interleave.py's):
    l2_reset (the same L2 state whatever ran before), `pre_calls` flushed calls of fn, then timed_calls."""
    l2_reset(buf)
    for _ in range(pre_calls):
        buf.zero_()
        fn()
    return timed_calls(fn, buf, calls)


def _estimate_ms(fn: Callable[[], object], buf: torch.Tensor) -> float:
    """do_bench's estimate of a timed call: one call, then 5 calls each after writing `buf`, the flush
    included, between two events (ms per flush and call)."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        buf.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    return max(start.elapsed_time(end) / 5, 1e-6)


def _loop(fn: Callable[[], object], buf: torch.Tensor, warmup_ms: float, rep_ms: float) -> tuple[float, float, float]:
    """triton.testing.do_bench's loop: the number of warm-up and timed calls from an estimate over 5 calls,
    the warm-up, then l2_reset, then the timed calls, each after writing `buf`, between two CUDA events;
    (median, p20, p80) in ms."""
    estimate_ms = _estimate_ms(fn, buf)
    n_warmup, n_repeat = max(1, int(warmup_ms / estimate_ms)), max(1, int(rep_ms / estimate_ms))
    for _ in range(n_warmup):
        fn()
    l2_reset(buf)
    return quantiles(timed_calls(fn, buf, n_repeat))


def time_gpu(fn: Callable[[], object], warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS,
             flush_mb: int = FLUSH_MB) -> Timing:
    """The median of do_bench's loop behind a flush of `flush_mb` MB, the host time of one call and the
    flush's GPU time; where the host time reaches half the flush's, the median again behind a flush whose
    GPU time is twice the host time or more, four times the flush at least, as far as half the free memory
    and LONG_FLUSH_MAX_MB allow (Timing.host_bound compares the two)."""
    buf, _ = flush_buffer(flush_mb)
    return _with_host_check(fn, _loop(fn, buf, warmup_ms, rep_ms), warmup_ms, rep_ms, flush_mb)


def _with_host_check(fn: Callable[[], object], quantiles: tuple[float, float, float], warmup_ms: float,
                     rep_ms: float, flush_mb: int) -> Timing:
    """The Timing of `fn` from its (median, p20, p80), with its host time, the flush's GPU time and, where
    the host time came near the flush's, the median again behind a longer flush (time_gpu says how)."""
    med, p20, p80 = quantiles
    _, flush_us = flush_buffer(flush_mb)
    host = host_us(fn)
    # The longer flush's median is taken in one stretch after the rounds, not in them: host_bound asks it
    # to be 5% faster, more than a stretch drifts from the rounds' median on a call long enough to matter.
    long_ms = long_mb = None
    if host > 0.5 * flush_us:
        room_mb = min(torch.cuda.mem_get_info()[0] // 2 // 2**20, LONG_FLUSH_MAX_MB)
        long_mb = min(flush_mb * max(4, math.ceil(2 * host / flush_us)), room_mb)
        if long_mb > flush_mb:
            long_ms = _loop(fn, flush_buffer(long_mb)[0], warmup_ms / 4, rep_ms / 4)[0]
        else:
            long_mb = None
    return Timing(med, p20, p80, host, flush_us, long_ms, long_mb)


def timed_call(kernel: Callable[..., object], case: tuple, writes_out: bool,
               new_out: Callable[[], object]) -> Callable[[], object]:
    """The call to time: a kernel that writes into an output it is given (writes_out) gets one allocated
    for each call (new_out()), from PyTorch's caching allocator, and dropped after it, as the kernels that allocate
    their own do; so every call's output is the same block, the one the call before freed. The very same
    kernel moved by up to 1% with the address of its output (notebook/output-address/), and an output kept
    per variant would rank the variants by where their outputs happened to lie."""
    if overwrites_input(kernel):  # its calls overwrite a copy of the first input, made here, outside the timing
        case = (case[0].clone(), *case[1:])  # (Liger's cross-entropy: its time does not depend on the values)
    if not writes_out:
        return lambda: kernel(*case)
    return lambda: kernel(*case, new_out())


def round_orders(names: list[str], rounds: int, seed: int = ORDER_SEED) -> list[list[str]]:
    """The order of the calls in each round: shuffled anew every round (random.Random(seed + round), the
    same on every run), so that no call always runs first or after the same neighbour. A call after a
    slow one, or after one that leaves the GPU cooler or hotter, may run faster or slower for it: one fixed
    order, rotated, kept every call behind the same neighbour, and there cuda.auto read 1.2% slower than the
    kernel it runs (bfloat16 2097152x32: 68.1 against 67.3 us). The orders are the same
    at every point of a run (the same names, the same seeds), so shuffling alone still put a variant
    behind the same neighbours at every point; what the neighbour before leaves in the L2 is removed by
    l2_reset before every stretch, and the shuffle spreads what remains."""
    return [random.Random(seed + r).sample(names, len(names)) for r in range(rounds)]


def interleave(calls: dict[str, Callable[[], object]], sample: Callable[[Callable[[], object], int], list[float]],
               per_round: dict[str, int], rounds: int) -> dict[str, list[float]]:
    """Every call's samples from `rounds` rounds: in each round every call in turn gives per_round[name]
    samples (`sample(call, count)`, in ms), in the orders of round_orders."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for order in round_orders(list(calls), rounds):
        for name in order:
            samples[name] += sample(calls[name], per_round[name])
    return samples


def quantiles(samples: list[float]) -> tuple[float, float, float]:
    """(median, p20, p80) of samples in ms, interpolated as torch.quantile (do_bench's) does."""
    t = torch.tensor(samples, dtype=torch.float64)
    med, p20, p80 = torch.quantile(t, torch.tensor(QUANTILES, dtype=torch.float64)).tolist()
    return med, p20, p80


def _gpu_rounds(calls: dict[str, Callable[[], object]], warmup_ms: float, rep_ms: float, flush_mb: int,
                rounds: int, warm: Collection[str], host_check: bool) -> dict[str, Timing]:
    buf, _ = flush_buffer(flush_mb)
    per_round = {}
    for name, fn in calls.items():  # do_bench's estimate and warm-up, once per call
        estimate_ms = _estimate_ms(fn, buf)
        for _ in range(1 if name in warm else max(1, int(warmup_ms / estimate_ms))):
            fn()
        per_round[name] = max(1, int(rep_ms / rounds / estimate_ms))

    def sample(fn: Callable[[], object], count: int) -> list[float]:
        return timed_stretch(fn, buf, count, max(1, count // 10))  # a few calls again after the others ran

    samples = interleave(calls, sample, per_round, rounds)
    if not host_check:
        return {name: Timing(*quantiles(samples[name])) for name in calls}
    return {name: _with_host_check(fn, quantiles(samples[name]), warmup_ms, rep_ms, flush_mb)
            for name, fn in calls.items()}


def _cpu_rounds(calls: dict[str, Callable[[], object]], rep_ms: float, rounds: int) -> dict[str, Timing]:
    per_round = {}
    for name, fn in calls.items():
        fn()  # warm-up
        t0 = time.perf_counter()
        fn()
        estimate_ms = max((time.perf_counter() - t0) * 1e3, 1e-6)
        # time_cpu's budget (2 * rep_ms of calls, 5 to 200 samples in all) shared among the rounds
        fewest, most = math.ceil(5 / rounds), max(1, 200 // rounds)
        per_round[name] = min(max(fewest, int(2 * rep_ms / rounds / estimate_ms)), most)

    def sample(fn: Callable[[], object], count: int) -> list[float]:
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1e3)
        return out

    samples = interleave(calls, sample, per_round, rounds)
    return {name: Timing(*quantiles(s)) for name, s in samples.items()}


def time_rounds(calls: dict[str, Callable[[], object]], device: torch.device, warmup_ms: float = WARMUP_MS,
                rep_ms: float = REP_MS, cudagraph: bool = False, flush_mb: int = FLUSH_MB,
                rounds: int = ROUNDS, warm: Collection[str] = (), host_check: bool = True) -> dict[str, Timing]:
    """Each call's Timing, the calls timed together in `rounds` interleaved rounds (`interleave`): on a GPU
    each has do_bench's estimate and warm-up first (one call for those named in `warm`, timed moments
    before), then rep_ms of flushed, event-timed calls in all, rep_ms / rounds a round, and the host check
    of time_gpu unless host_check is False; on the CPU, wall-clock samples the same way.
    With cudagraph, each call's graph replays are timed in one stretch (a graph is one launch; there is
    no flush between calls to share)."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    if device.type != "cuda":
        return _cpu_rounds(calls, rep_ms, rounds)
    if cudagraph:
        return {name: time_cudagraph(fn, rep_ms) for name, fn in calls.items()}
    return _gpu_rounds(calls, warmup_ms, rep_ms, flush_mb, rounds, warm, host_check)


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
            cudagraph: bool = False, flush_mb: int = FLUSH_MB) -> Timing:
    if device.type != "cuda":
        return time_cpu(fn, min_seconds=2 * rep_ms / 1e3)
    return time_cudagraph(fn, rep_ms) if cudagraph else time_gpu(fn, warmup_ms, rep_ms, flush_mb)


def method(device: torch.device, cudagraph: bool = False, flush_mb: int = FLUSH_MB, rounds: int | None = None) -> str:
    """How a timing was taken, as the reports say it; `rounds`: in that many interleaved rounds (time_rounds)."""
    text = WALL_CLOCK if device.type != "cuda" else CUDAGRAPH if cudagraph else DO_BENCH.format(mb=flush_mb)
    return text + (ROUNDS_NOTE.format(rounds=rounds) if rounds and not (cudagraph and device.type == "cuda") else "")


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")


_COPY_CACHE: dict[tuple, Timing] = {}


def copy_call(moved: int, device: torch.device | str) -> Callable[[], object]:
    """A device-to-device copy that moves `moved` bytes (reads moved / 2, writes moved / 2), as a call: the scale an
    operator that moves those bytes is timed against (copy_ceiling, or beside it in the same rounds)."""
    src = torch.empty(max(1, moved // 2), dtype=torch.uint8, device=device).fill_(7)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def copy_ceiling(moved: int, device: torch.device | str, warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS,
                 cudagraph: bool = False, flush_mb: int = FLUSH_MB) -> Timing:
    """Time a device-to-device copy that moves `moved` bytes (reads moved / 2, writes moved / 2) in one
    stretch, once per size, timing and process: the tuning scripts' scale. The lab itself times its copy
    in each point's rounds, beside the variants (lab.measure.time_point)."""
    nbytes = max(1, moved // 2)
    device = torch.device(device)
    key = (nbytes, str(device), warmup_ms, rep_ms, cudagraph, flush_mb)
    if key not in _COPY_CACHE:
        _COPY_CACHE[key] = time_fn(copy_call(moved, device), device, warmup_ms, rep_ms, cudagraph, flush_mb)
    return _COPY_CACHE[key]
