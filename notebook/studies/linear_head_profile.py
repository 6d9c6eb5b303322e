"""Where does a call of a linear_cross_entropy variant spend its GPU time? torch.profiler's kernel times for a few
calls of each named variant at one point, by kernel, beside the call's wall time (CUDA events).

    python notebook/studies/linear_head_profile.py --shape 1024x256000xK2304 --variants lab.auto torch.compile

GPU only; the variants' names are the lab's (python -m lab.test --op linear_cross_entropy --list).
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch


def main() -> None:
    from lab import registry
    from lab.inputs import Shape
    from lab.operators import get

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", type=Shape.parse, required=True)
    p.add_argument("--variants", nargs="+", default=["lab.auto", "torch.compile"])
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--calls", type=int, default=3)
    args = p.parse_args()
    op = get("linear_cross_entropy")
    case = op.make_inputs(args.shape, getattr(torch, args.dtype), "cuda", 0)
    for name in args.variants:
        kernel = registry.get(op.name, name).kernel()
        for _ in range(2):
            kernel(*case)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            start.record()
            for _ in range(args.calls):
                kernel(*case)
            end.record()
            torch.cuda.synchronize()
        wall = start.elapsed_time(end) / args.calls
        by_kernel: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                by_kernel[e.name][0] += e.device_time / 1e3 / args.calls
                by_kernel[e.name][1] += 1
        busy = sum(t for t, _ in by_kernel.values())
        print(f"{name} at {op.shape_label(args.shape)} {args.dtype}: {wall:.3f} ms a call, kernels {busy:.3f} ms "
              f"(idle {wall - busy:.3f} ms)")
        for k, (t, count) in sorted(by_kernel.items(), key=lambda kv: -kv[1][0])[:12]:
            print(f"  {t:8.3f} ms  x{count // args.calls:<3} {k[:110]}")


if __name__ == "__main__":
    main()
