"""Time triton.multirow's kernel at chosen (rows per program, warps) beside other variants.

triton.multirow picks ROWS (rows per program) and num_warps from the row's length and M
(triton_kernels/multirow.py's compute_launch_config). Its layout follows from them: at bfloat16 4096x512 the
heuristic's 4 rows in 4 warps puts a row on 64 threads of 8 elements and two rows on every thread, and that
kernel was 1.6% shorter than register_cached's (one row on 32 threads of 16 elements) in timed calls on the
H200 (notebook/smem-carveout-not-a-cost/). This script asks which of the program's layouts the time follows:
each ROWSxWARPS configuration runs the same kernel on a grid of cdiv(M, ROWS) programs.

    python scripts/tune/tune_multirow.py --shape 4096x512 --dtype bfloat16 \\
        [--configs 4x4,4x2,2x2,8x4] [--variants cuda.auto,peer.quack] [--rounds 7] [--reps 200]

Every configuration and variant is checked against the float64 reference first; all are timed in interleaved
rounds as scripts/interleave.py times them (the lab's flushed calls between CUDA events, the L2 reset before
each stretch). Prints per shape the median of the round medians (us), the spread of the rounds, and the
heuristic's own configuration marked.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

# the checkout (lab) and scripts/ (interleave), wherever this runs from
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]
from interleave import checked_calls, timed_round, variants_here  # noqa: E402

from lab import bench, check, inputs  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402
from triton_kernels.common import cdiv, next_power_of_2, sm_count  # noqa: E402
from triton_kernels.multirow import MAX_N, launch_config, softmax_multirow_kernel  # noqa: E402

DEFAULT_CONFIGS = "1x1,1x2,1x4,2x2,2x4,4x2,4x4,4x8,8x4,8x8"


def parse_configs(text: str) -> list[tuple[int, int]]:
    """[(rows, warps)] from 'ROWSxWARPS,...': rows a power of two, warps 1, 2, 4, 8 or 16."""
    configs = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        rows, sep, warps = part.partition("x")
        if not sep or not rows.isdigit() or not warps.isdigit():
            raise ValueError(f"expected ROWSxWARPS, got {part!r}")
        r, w = int(rows), int(warps)
        if r < 1 or r & (r - 1):
            raise ValueError(f"rows per program must be a power of two, got {r} in {part!r}")
        if w not in (1, 2, 4, 8, 16):
            raise ValueError(f"warps must be 1, 2, 4, 8 or 16, got {w} in {part!r}")
        configs.append((r, w))
    if not configs:
        raise ValueError("no configuration given")
    return configs


def multirow_at(rows: int, warps: int):
    """triton.multirow's kernel at ROWS = rows and num_warps = warps, as a call of x."""

    def call(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n_rows, n_cols = x.shape
        softmax_multirow_kernel[(cdiv(n_rows, rows),)](x, out, x.stride(0), out.stride(0), n_rows, n_cols, ROWS=rows,
                                                       BLOCK_N=next_power_of_2(n_cols), num_warps=warps)
        return out

    return call


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", type=inputs.Shape.parse, action="append", required=True, help="MxN (repeatable)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="bfloat16")
    p.add_argument("--configs", default=DEFAULT_CONFIGS,
                   help=f"ROWSxWARPS, comma-separated (default {DEFAULT_CONFIGS})")
    p.add_argument("--variants", default="", help="comma-separated softmax variants to time beside them")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--reps", type=int, default=200, help="timed calls per configuration per round")
    args = p.parse_args(argv)
    try:
        configs = parse_configs(args.configs)
    except ValueError as e:
        sys.exit(f"tune_multirow: {e}")
    if args.rounds < 1 or args.reps < 1:
        sys.exit("tune_multirow: --rounds and --reps must be at least 1")
    if too_long := [s.label for s in args.shape if s.n > MAX_N]:
        sys.exit(f"tune_multirow: rows past {MAX_N} elements do not fit one program: {', '.join(too_long)}")
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    if names:
        by_name, kernels, unavailable = variants_here(names, args.variants, "tune_multirow")
        for n, reason in unavailable.items():
            print(f"{n}: skipped ({reason})")
    elif not torch.cuda.is_available():
        sys.exit("tune_multirow: needs a CUDA GPU")
    else:
        by_name, kernels = {}, {}
    dtype = getattr(torch, args.dtype)
    flush, _ = bench.flush_buffer(bench.FLUSH_MB)
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, {args.rounds} rounds of {args.reps} calls; times in us")
    for shape in args.shape:
        x = inputs.make_input(shape, dtype, "cuda")
        ref = SOFTMAX.reference(x)
        _, heuristic_rows, heuristic_warps = launch_config(shape.m, shape.n, x.element_size(), sm_count(x.device.index))
        fns, skipped, failed = checked_calls(kernels, by_name, x, ref)
        for r, w in configs:
            label = f"multirow {r}x{w}" + (" (heuristic)" if (r, w) == (heuristic_rows, heuristic_warps) else "")
            fn = multirow_at(r, w)
            res = check.check(fn, x, False, ref)
            if res.ok:
                fns[label] = bench.timed_call(fn, (x,), False, lambda: None)
            else:
                failed[label] = res.summary()
        for n, why in {**skipped, **failed}.items():
            print(f"{shape.label}  {n}: not timed ({why})")
        rounds = bench.interleave(fns, lambda fn, count: [timed_round(fn, flush, count)],
                                  dict.fromkeys(fns, args.reps), args.rounds)
        for n, t in sorted(rounds.items(), key=lambda kv: statistics.median(kv[1])):
            print(f"{shape.label}  {n:28s} median {statistics.median(t):7.2f}  rounds {min(t):7.2f}-{max(t):7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
