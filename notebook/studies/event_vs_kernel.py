"""What a timed call holds besides its kernel: the lab's time of a call (CUDA events around it, the L2
flushed before it and reset before the stretch, as lab.bench times) beside the GPU time of the kernels it
launched, from the PyTorch profiler (CUPTI) over the same calls.

    python notebook/studies/event_vs_kernel.py --variants cuda.auto,peer.quack --shape 4096x1024 --dtype float32

Each variant is checked against the float64 reference first (scripts/interleave.py's checked_calls). Then,
per variant in turn and --rounds times over, bench.l2_reset, a few flushed calls, and --calls flushed
calls timed by events under torch.profiler. Prints per variant: the median event time (us), and each
kernel it launched (the flush's own fill kernel left out) with its launches per call and mean GPU time;
the event time less the kernels' is what the call spent on the GPU outside its kernels (launch, the gap
before the first kernel and between kernels, the end event).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # interleave.py, targets.py
from interleave import checked_calls, variants_here  # noqa: E402

from lab import bench, inputs  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402

FLUSH_KERNEL = "fill"  # the flush's zero_() runs a fill kernel (at::native vectorized_elementwise_kernel<FillFunctor>)


def kernel_times(prof, calls: int) -> dict[str, tuple[float, float]]:
    """Each GPU kernel the profiled calls ran, but the flush's: (launches per call, mean GPU time in us)."""
    out = {}
    for e in prof.key_averages():
        total = getattr(e, "self_device_time_total", None)
        if total is None:
            total = getattr(e, "self_cuda_time_total", 0.0)
        if not total or FLUSH_KERNEL in e.key.lower() or e.count == 0:
            continue
        if getattr(e, "device_type", None) is not None and "CUDA" not in str(e.device_type):
            continue
        out[e.key] = (e.count / calls, total / e.count)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", required=True, help="comma-separated softmax variants")
    p.add_argument("--shape", type=inputs.Shape.parse, required=True, help="MxN")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="bfloat16")
    p.add_argument("--calls", type=int, default=200, help="profiled calls per variant per round")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    if args.calls < 1 or args.rounds < 1:
        sys.exit("event_vs_kernel: --calls and --rounds must be at least 1")
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    by_name, kernels, unavailable = variants_here(names, args.variants, "event_vs_kernel")
    from torch.profiler import ProfilerActivity, profile

    dtype = getattr(torch, args.dtype)
    x = inputs.make_input(args.shape, dtype, "cuda")
    fns, skipped, failed = checked_calls(kernels, by_name, x, SOFTMAX.reference(x))
    for n, why in {**unavailable, **skipped, **failed}.items():
        print(f"{n}: not timed ({why})")
    flush, _ = bench.flush_buffer(bench.FLUSH_MB)
    events: dict[str, list[float]] = {n: [] for n in fns}
    gpu: dict[str, list[dict]] = {n: [] for n in fns}
    for order in bench.round_orders(list(fns), args.rounds):
        for n in order:
            bench.l2_reset(flush)
            for _ in range(max(1, args.calls // 10)):
                flush.zero_()
                fns[n]()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                events[n] += bench.timed_calls(fns[n], flush, args.calls)
            gpu[n].append(kernel_times(prof, args.calls))
    print(f"{torch.cuda.get_device_name()}, {args.dtype} {args.shape.label}: {args.rounds} rounds of {args.calls} "
          "profiled calls; us")
    for n in fns:
        event_us = statistics.median(events[n]) * 1e3
        print(f"{n}: event median {event_us:.2f}")
        kernel_us = 0.0
        for k in sorted({k for g in gpu[n] for k in g}):
            per_call = statistics.median(g[k][0] for g in gpu[n] if k in g)
            mean_us = statistics.median(g[k][1] for g in gpu[n] if k in g)
            kernel_us += per_call * mean_us
            print(f"    {per_call:5.2f} x {mean_us:8.2f}  {k[:150]}")
        print(f"    kernels {kernel_us:.2f} a call; outside them {event_us - kernel_us:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
