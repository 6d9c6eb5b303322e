"""Host time per call of the lab's fast entries, where a short row's kernel is shorter than the Python
and dispatch work around it (GPU only).

The benchmark times kernels on the GPU (CUDA events, L2 flushed between calls), which hides host work
shorter than the flush; a user calling softmax in a loop on small tensors pays it in full. This times
`calls` back-to-back calls on the host (perf_counter around the loop, one synchronize at the end) and
prints microseconds per call for lab.softmax, torch.ops.lab.softmax (cuda.auto), the variant lab.softmax
routes the shape to (from its dispatch table), and torch.softmax. Where the kernel is shorter than the host
work, the number is the host work; where it is longer, the number is the kernel's time.

    python notebook/studies/overhead.py [--shape 4096x128] [--dtype bfloat16] [--calls 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import lab  # noqa: E402
from lab import dispatch, env, inputs, registry  # noqa: E402

DEFAULT_SHAPES = ["4096x128", "4096x1024", "16384x4096"]


def per_call_us(fn, x: torch.Tensor, calls: int) -> float:
    for _ in range(20):
        fn(x)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", action="append", help=f"MxN (default: {', '.join(DEFAULT_SHAPES)})")
    p.add_argument("--dtype", action="append", choices=["float32", "float16", "bfloat16"],
                   help="default: float32 and bfloat16")
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("overhead.py: needs a CUDA GPU")
    rows = []
    for text in args.shape or DEFAULT_SHAPES:
        shape = inputs.Shape.parse(text)
        for name in args.dtype or ["float32", "bfloat16"]:
            dtype = getattr(torch, name)
            x = inputs.make_input(shape, dtype, "cuda")
            routed = dispatch.lab_choice(shape.m, shape.n, dtype) or "cuda.auto"
            entries = {"lab.softmax": lab.softmax, "torch.ops.lab.softmax": torch.ops.lab.softmax,
                       f"{routed} (its route)": registry.get("softmax", routed).kernel(),
                       "torch.softmax": lambda t: torch.softmax(t, -1)}
            got = {label: per_call_us(fn, x, args.calls) for label, fn in entries.items()}
            rows.append({"shape": shape.label, "dtype": name, "routed": routed, "us_per_call": got})
            print(f"{shape.label} {name}: " + ", ".join(f"{k} {v:.1f} us" for k, v in got.items()), flush=True)
    if args.json:
        path = dispatch.table_path(dispatch.current_gpu())
        table = dispatch.load(path).get("source", "?") if path.exists() else "none (no table for this GPU model)"
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(0), "commit": env.git_commit(),
                                         "dispatch_table": table, "calls": args.calls, "rows": rows},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
