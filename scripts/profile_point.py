"""Run one variant on one shape a few times, for a profiler to watch (see scripts/profile.sh).

    python scripts/profile_point.py cuda.register_cached 131072x512 bfloat16 [--runs 3]

The first run is a warm-up (compilation, first-touch); profile a later one (ncu --launch-skip).
"""

from __future__ import annotations

import argparse
import sys

import torch

from lab import inputs
from lab.registry import variants


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variant", help="an exact variant name, e.g. cuda.register_cached")
    p.add_argument("shape", type=inputs.Shape.parse, help="MxN or MxN/STRIDE")
    p.add_argument("dtype", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    found = [v for v in variants() if v.name == args.variant]
    if not found:
        sys.exit(f"profile_point: no variant named {args.variant!r}; see python -m lab.test --list")
    kernel = found[0].kernel()
    x = inputs.make_input(args.shape, getattr(torch, args.dtype), "cuda")
    for _ in range(args.runs):
        kernel(x)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
