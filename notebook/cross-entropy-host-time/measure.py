"""Where does lab.cross_entropy's training call (forward with grad, then backward) spend its host time at 1024 tokens,
and what does the eager target check's wait cost in the benchmark's timing? (GPU only.)

For each shape and dtype: cross_entropy's variants lab.auto, cuda.cluster, triton.fused and peer.liger (those that
build and take the shape), and lab.auto with its target check left out ("lab.auto, no check": the forward does not
wait for the check; a bad target's row would be NaN, as under torch.compile), each called as the
harness calls it (lab/operators/cross_entropy.py, loss_and_grad: autograd.grad of the loss).
- host: lab.bench.host_us, 20 calls back to back (a call that waits for the GPU counts the wait);
- median: lab.bench.time_rounds, L2 flushed before every call, the variants and a copy of the same bytes in
  interleaved rounds (host_bound: the harness's flag);
- then for lab.auto: the host time of its forward alone (no backward) and of its forward without the check, and
  cProfile's 25 most costly functions (cumulative) over 200 calls, back to back.

    python notebook/cross-entropy-host-time/measure.py [--shape 1024x32000] [--dtype bfloat16] [--json FILE]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from lab import bench, inputs, registry  # noqa: E402
from lab.operators import cross_entropy as ce  # noqa: E402

SHAPES = ("1024x32000", "1024x50257", "1024x128256", "4096x32000")
DTYPES = ("bfloat16", "float32")
VARIANTS = ("lab.auto", "cuda.cluster", "triton.fused", "peer.liger")
NO_CHECK = "lab.auto, no check"


def without_check(fn):
    """fn with lab.cross_entropy's target check left out, for this call only: the loss alone's (loss_and_grad's
    check) and, where the backward waits for it, the training call's (loss_and_grad_checked_later's)."""
    import lab.losses

    kernels = lab.losses._ops()
    checked, checked_later = kernels.loss_and_grad, kernels.loss_and_grad_checked_later

    def unchecked(*args, **kwargs):
        return checked(*args, **{**kwargs, "check": False})

    def unchecked_later(*args, **kwargs):
        return checked_later(*args, **{**kwargs, "check": False})

    def call():
        kernels.loss_and_grad, kernels.loss_and_grad_checked_later = unchecked, unchecked_later
        try:
            return fn()
        finally:
            kernels.loss_and_grad, kernels.loss_and_grad_checked_later = checked, checked_later
    return call


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", action="append")
    p.add_argument("--dtype", action="append")
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    registry.load_backends()
    device = torch.device("cuda")
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    records = []
    for dtype_name in args.dtype or DTYPES:
        dtype = getattr(torch, dtype_name)
        for text in args.shape or SHAPES:
            m, n = map(int, text.split("x"))
            shape = inputs.Shape(m, n)
            case = ce.make_inputs(shape, dtype, device, seed=0)
            calls = {}
            for name in VARIANTS:
                v = registry.get("cross_entropy", name)
                try:
                    kernel = v.kernel()
                except registry.Unavailable as e:
                    print(f"  {name}: unavailable ({e})")
                    continue
                if why := v.skip_reason(shape, dtype):
                    print(f"  {name} at {text} {dtype_name}: skipped ({why})")
                    continue
                calls[name] = bench.timed_call(kernel, case, False, lambda: None)
            if "lab.auto" in calls:
                calls[NO_CHECK] = without_check(calls["lab.auto"])
            nbytes = 2 * m * n * dtype.itemsize
            src = torch.empty(nbytes // 2, dtype=torch.uint8, device=device)
            dst = torch.empty_like(src)
            calls["copy"] = lambda dst=dst, src=src: dst.copy_(src)
            for fn in calls.values():  # compiled and warm before anything is timed
                fn()
            hosts = {name: bench.host_us(fn) for name, fn in calls.items()}
            timings = bench.time_rounds(calls, device)
            print(f"{dtype_name} {text}: median us (host us a call, host-bound?)")
            for name, t in timings.items():
                print(f"  {name:22s} {t.median_ms * 1e3:8.1f}  ({hosts[name]:6.1f}, {t.host_bound})")
                records.append({"dtype": dtype_name, "m": m, "n": n, "variant": name,
                                "median_us": t.median_ms * 1e3, "host_us": hosts[name], "host_bound": t.host_bound,
                                "flush_us": t.flush_us})
            if "lab.auto" in calls:
                profile_lab_auto(case, dtype_name, text, records)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")


def profile_lab_auto(case: tuple, dtype_name: str, text: str, records: list) -> None:
    from lab.backends.lab_variants import lab_loss

    logits, target, options = case
    x = logits.detach().requires_grad_()

    def forward():
        with torch.enable_grad():
            return lab_loss(x, target, options)

    parts = {"forward alone": forward, "forward alone, no check": without_check(forward)}
    for name, fn in parts.items():
        fn()
        us = bench.host_us(fn)
        print(f"  {name:22s} host {us:6.1f} us a call")
        records.append({"dtype": dtype_name, "shape": text, "part": name, "host_us": us})
    full = registry.get("cross_entropy", "lab.auto").kernel()
    profiler = cProfile.Profile()
    torch.cuda.synchronize()
    profiler.enable()
    for _ in range(200):
        full(*case)
    profiler.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
    print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    main()
