"""Does the output's address move one kernel's time? torch.ops.lab.softmax (cuda.auto) timed in interleaved
rounds (lab.bench.time_rounds, 5 and 20 rounds) writing into three separate preallocated outputs (out_A
twice, out_B, out_C), into an output it allocates per call (alloc), and through lab.softmax, at five
shapes; each time with its ratio to out_A's. GPU only.

    python scripts/output_address.py
"""

from __future__ import annotations

import sys

import torch

import lab
from lab import bench, inputs
from lab.backends.cuda_variants import load_extension

SHAPES = ((torch.float32, (4096, 8192)), (torch.bfloat16, (4096, 16384)), (torch.bfloat16, (4096, 2048)),
          (torch.float32, (4096, 16384)), (torch.bfloat16, (4096, 4096)))


def address_calls(x: torch.Tensor, op) -> dict:
    """The calls to time: the op into three preallocated outputs (A twice), allocating, and lab.softmax."""
    a, b, c = (torch.empty_like(x) for _ in range(3))
    return {"out_A": lambda: op.out(x, out=a), "out_B": lambda: op.out(x, out=b),
            "out_A_again": lambda: op.out(x, out=a), "alloc": lambda: op(x),
            "lab.softmax": lambda: lab.softmax(x), "out_C": lambda: op.out(x, out=c)}


def main() -> int:
    if not torch.cuda.is_available():
        sys.exit("output_address: needs a CUDA GPU")
    load_extension()
    dev, op = torch.device("cuda"), torch.ops.lab.softmax
    for dtype, shape in SHAPES:
        calls = address_calls(inputs.make_input(inputs.Shape(*shape), dtype, "cuda"), op)
        for rounds in (5, 20):
            t = bench.time_rounds(calls, dev, rounds=rounds)
            base = t["out_A"].median_ms
            print(f"{str(dtype)[6:]:9s} {shape} rounds {rounds:2d}: "
                  + "  ".join(f"{n} {v.median_ms * 1e3:7.2f} ({v.median_ms / base:.3f})" for n, v in t.items()),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
