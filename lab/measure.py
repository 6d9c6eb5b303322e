"""One point of a run: each variant checked against the float64 reference on the point's own input, then the
checked ones and a same-bytes copy timed together in interleaved rounds; and the correctness suite (edge shapes,
special values) that runs before any point and bars a failing variant from timing."""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

import torch

from lab import bench, check, inputs, report
from lab.console import log, wrap
from lab.operators import Operator
from lab.registry import Unavailable, Variant, dtype_name


@dataclass
class Runnable:
    variant: Variant
    failed: dict[str, str] = field(default_factory=dict)  # dtype name -> why the suite failed
    kernels: dict = field(default_factory=dict)  # per-shape kernels (torch.compile)

    def kernel_for(self, x: torch.Tensor):
        """The kernel for inputs whose first tensor is x (per-shape variants compile one per shape)."""
        v = self.variant
        if not v.per_shape:
            return v.kernel()
        key = (tuple(x.shape), x.stride(), x.dtype)
        if key not in self.kernels:
            self.kernels.clear()  # one shape at a time: keeps compiled graphs from piling up
            log(f"    {v.name}: building for {tuple(x.shape)} {dtype_name(x.dtype)} (a compiler runs: seconds)")
            self.kernels[key] = v.kernel()
        return self.kernels[key]


def suite_cases(op: Operator, device: torch.device, dtype: torch.dtype, seed: int):
    """(label, shape, inputs, row labels) for the correctness suite: edge shapes and special cases."""
    for shape in op.edge_shapes:
        if device.type == "cpu" and shape.n > op.cpu_edge_max_n:
            continue
        yield op.shape_label(shape), shape, op.make_inputs(shape, dtype, device, seed), None
    for label, case, row_labels in op.special_cases(dtype, device, seed):
        yield label, shape_of(case, op), case, row_labels


def shape_of(case: tuple, op: Operator | None = None) -> inputs.Shape:
    """The Shape of a case: the operator's case_shape where it has one, else its first input's (M, N, row stride), or
    (1, N) for a 1-D tensor."""
    if op is not None and op.case_shape is not None:
        return op.case_shape(*case)
    x = case[0]
    return inputs.Shape.of(x) if x.dim() == 2 else inputs.Shape(1, x.numel())


OUT_OF_MEMORY = "ran out of GPU memory at this point"


def out_of_memory(device: torch.device) -> str:
    """The reason a variant that ran out of memory is skipped at a point (and its memory given back)."""
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info(device)
    return (f"{OUT_OF_MEMORY} ({free / 2**30:.1f} of {total / 2**30:.1f} GiB free beside this point's inputs and "
            "their checks' reference)")


def run_suite(op: Operator, runnable: list[Runnable], dtypes: list[torch.dtype], device: torch.device,
              seed: int) -> None:
    """Edge shapes and special values for every variant and dtype; a failure bars it from timing."""
    log("\n" + wrap(f"correctness suite: edge shapes and special values, against {op.name}'s float64 reference"))
    log(wrap(f"  tolerances: {check.describe_tolerances(op.tolerances_for(device))}"))
    for dtype in dtypes:
        cases = [(label, shape, case, rl, op.reference(*case))
                 for label, shape, case, rl in suite_cases(op, device, dtype, seed)]
        for r in runnable:
            v = r.variant
            worst, count, failures, skipped = 0.0, 0, [], {}
            start = time.perf_counter()
            for label, shape, case, row_labels, ref in cases:
                if v.skip_reason(shape, dtype):
                    continue
                if reason := v.case_skip_reason(*case):
                    skipped[reason] = skipped.get(reason, 0) + 1
                    continue
                res = check.check(r.kernel_for(case[0]), case, v.writes_out, ref, row_labels, op)
                count += 1
                worst = max(worst, res.worst_ratio)
                if not res.ok:
                    failures.append(f"{label}: {res.summary()}")
            name = dtype_name(dtype)
            if failures:
                r.failed[name] = failures[0]
                log(f"  FAIL {v.name:<20} {name:<9} {len(failures)}/{count} cases; first: {failures[0]}")
                if len(failures) > 1:
                    log(wrap(f"       also failed: {'; '.join(f.split(': ')[0] for f in failures[1:])}", 7))
            elif count:
                log(f"  ok   {v.name:<20} {name:<9} {count} cases, worst {worst:.2g} of tolerance "
                    f"({time.perf_counter() - start:.1f} s)")
            for reason, n in skipped.items():
                log(f"       {v.name:<20} {name:<9} {n} case(s) skipped: {reason}")


def check_point(op: Operator, r: Runnable, sweep: str, shape: inputs.Shape, case: tuple[torch.Tensor, ...],
                ref: torch.Tensor, device: torch.device, args: argparse.Namespace, memo: dict | None = None):
    """One variant at one point as far as its check: the Result (skipped, failed or checked) and, where it
    is to be timed, its kernel (else None). memo: the point's, shared by its variants' checks (check.check)."""
    v, dtype = r.variant, case[0].dtype
    res = report.Result(sweep, v.name, v.backend, dtype_name(dtype), shape.m, shape.n, shape.stride, "skipped",
                        op=op.name, k=shape.k)
    failed = r.failed.get(dtype_name(dtype))
    if reason := ((failed and f"failed the correctness suite ({failed})") or v.skip_reason(shape, dtype)
                  or v.case_skip_reason(*case)):
        res.reason = reason
        return res, None
    try:
        kernel = r.kernel_for(case[0])
    except Unavailable as e:
        res.reason = str(e)
        return res, None
    try:
        c = check.check(kernel, case, v.writes_out, ref, op=op, memo=memo)
    except torch.OutOfMemoryError:  # skipped, not failed: the point is too large for it on this GPU
        res.reason = out_of_memory(device)
        return res, None
    res.worst_ratio, res.rel_norm = c.worst_ratio, c.rel_norm
    if not c.ok:
        res.status, res.reason = "failed", c.summary()
        return res, None
    res.status = "checked"
    if device.type == "cpu" and v.backend == "triton":
        res.reason = "interpreted (TRITON_INTERPRET=1): checked, not timed"
        return res, None
    return res, None if args.check_only else kernel


def record_timing(op: Operator, res: report.Result, v: Variant, t: bench.Timing, shape: inputs.Shape,
                  dtype: torch.dtype, copy: bench.Timing | None, device: torch.device,
                  args: argparse.Namespace) -> None:
    """A checked Result made "ok" with its timing and its figures: GB/s and its shares of the copy and of its model,
    or for an operator built on matmuls TFLOP/s and its share of the ceiling (its matmuls alone); `copy` is the
    ceiling's timing."""
    res.timing = bench.method(device, args.cudagraph, args.flush_mb, args.rounds)
    res.host_us, res.flush_us, res.host_bound = t.host_us, t.flush_us, t.host_bound
    res.long_flush_ms, res.long_flush_mb = t.long_flush_ms, t.long_flush_mb
    nbytes = op.bytes_moved(shape, dtype)
    traffic = v.traffic_for(dtype)
    res.status = "ok"
    res.median_ms, res.p20_ms, res.p80_ms = t.median_ms, t.p20_ms, t.p80_ms
    if op.compute_bound:
        res.tflops = op.flops(shape) / t.median_ms / 1e9
        if copy is not None:
            res.ceiling_ms = copy.median_ms
            res.pct_ceiling = 100 * copy.median_ms / t.median_ms
        return
    res.gbps = bench.gbps(nbytes, t.median_ms)
    res.model_reads, res.model_writes = traffic.reads, traffic.writes
    if copy is not None:
        res.copy_gbps = bench.gbps(nbytes, copy.median_ms)
        res.pct_copy = 100 * res.gbps / res.copy_gbps
        res.modeled_gbps = res.copy_gbps * op.ceiling_fraction(traffic)
        res.pct_modeled = 100 * res.gbps / res.modeled_gbps


EMPTY_SHAPE = "an empty shape (no elements): checked, nothing to time"
SELECTION_SHARE = 0.25
"""The selection pass's timed calls, as a share of --rep (time_point)."""
CEILING = "ceiling"  # the ceiling's name among a point's timed calls (the copy, or an operator's matmuls)


def time_point(op: Operator, runnable: list[Runnable], sweep: str, shape: inputs.Shape,
               case: tuple[torch.Tensor, ...], ref: torch.Tensor, device: torch.device, args: argparse.Namespace,
               results: list[report.Result]) -> list[report.Result]:
    """Every variant at one point, in the runnable order: each checked before it is timed, then all the
    checked ones and a copy of the same bytes timed together in interleaved rounds (bench.time_rounds),
    each output allocated per call (bench.timed_call).
    A variant with a `prepare` (auto: its dispatch table from this run's results) is prepared from a
    selection pass first: the other variants timed in rounds for SELECTION_SHARE of --rep, their medians
    kept as selection_ms and selection_gbps (what the table is built from), and only then checked and
    timed with the others. A variant's route is thus chosen from timings other than the ones reported,
    so that the variant it routes to is not reported with the luck that won it the choice, and auto is
    timed in the same rounds as that variant."""
    dtype = case[0].dtype
    nbytes, spec = op.work(shape, dtype), check.output_spec(op, ref, dtype)

    def new_out():
        return spec.empty(case[0].device)
    checked: dict[str, tuple[report.Result, object]] = {}
    memo: dict = {}  # the checks' error scale and PyTorch's own result, once for the point

    def timed(names) -> dict:
        if not nbytes:  # an empty shape: checked (an empty result), nothing to time
            return {}
        return {n: bench.timed_call(checked[n][1], case, by_name[n].variant.writes_out, new_out) for n in names
                if checked[n][1] is not None}

    by_name = {r.variant.name: r for r in runnable}
    plain = [r for r in runnable if r.variant.prepare is None]
    prepared = [r for r in runnable if r.variant.prepare is not None]
    for r in plain:
        checked[r.variant.name] = check_point(op, r, sweep, shape, case, ref, device, args, memo)
    if prepared:
        selection = timed(r.variant.name for r in plain)
        if selection:
            for n, t in bench.time_rounds(selection, device, args.warmup, args.rep * SELECTION_SHARE,
                                          args.cudagraph, args.flush_mb, args.rounds, host_check=False).items():
                res = checked[n][0]
                res.selection_ms, res.selection_gbps = t.median_ms, bench.gbps(nbytes, t.median_ms)
        so_far = [checked[r.variant.name][0] for r in plain]
        for r in prepared:
            r.variant.prepare(results + so_far)  # e.g. cuda.auto's table from this run so far
            checked[r.variant.name] = check_point(op, r, sweep, shape, case, ref, device, args, memo)
    del ref, memo  # checked: the float64 reference and scales are not held through the timing
    if not nbytes:
        for res, kernel in checked.values():
            if kernel is not None:
                res.reason = EMPTY_SHAPE
    calls = timed(r.variant.name for r in runnable)
    if calls:
        if op.ceiling is not None:
            calls[CEILING] = op.ceiling(*case)  # the operator's matmuls alone, in the same rounds
        else:
            calls[CEILING] = bench.copy_call(nbytes, device)  # the copy of the same bytes, in the same rounds
        warm = [n for n in calls if n != CEILING and checked[n][0].selection_ms is not None]  # warmed up moments ago
        timings = bench.time_rounds(calls, device, args.warmup, args.rep, args.cudagraph, args.flush_mb,
                                    args.rounds, warm=warm)
        for n, t in timings.items():
            if n != CEILING:
                record_timing(op, checked[n][0], by_name[n].variant, t, shape, dtype, timings[CEILING], device, args)
                if op.compute_bound and device.type == "cuda":
                    checked[n][0].peak_mb = peak_mb(calls[n])
    return [checked[r.variant.name][0] for r in runnable]


def peak_mb(call) -> float:
    """The most memory one call of `call` held allocated at once above what was allocated before it (its outputs
    included), in MB (PyTorch's caching allocator's count: what its tensors took, not what it keeps cached)."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak / 1e6


