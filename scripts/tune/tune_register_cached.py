"""Time cuda.register_cached's launch shapes against its table, auto and the peers, at the sweeps' short rows.

The row-shape table of register_cached.cu keys a shape (threads per row, elements per thread) by the
row's length, with a second shape for few rows at some lengths (taken where its grid is resident all
at once). This script tries every tuning shape compiled into lab._C
(torch.ops.lab_tune.register_cached_shapes: threads per row, elements per thread, threads per block,
packed, staged; labels like 16x8/128PS) that holds the row in less than twice its length, each on a
grid of one block per row group, beside the table's own choice (torch.ops.lab_tune.register_cached,
both grids; the few-rows shape is the table's choice on the grid of one block per row group), a device-to-device copy of
the same bytes, and the lab's and the peers' softmax variants named by --variants (skipped, with the
reason, where not installed). Each is checked against float64 before it is timed; all are timed in
interleaved rounds (the order rotated each round; each round the median of --reps calls, the L2
flushed before every call by a 256 MB write), and the median over rounds is reported: on tensors of a
few MB one timing of a kernel can differ from the next by several percent.

    python scripts/tune/tune_register_cached.py [--dtype bfloat16] [--sweep tutorial] [--max-n 4096]
        [--shape 32768x2048] [--variants lab.auto,peer.quack] [--rounds 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

# the checkout (lab) and scripts/ (interleave), wherever this runs from
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]
from interleave import checked_calls, interleaved_rounds, kernels_of, softmax_variants  # noqa: E402

from lab import bench, check, dispatch, inputs  # noqa: E402
from lab.backends.cuda_variants import load_extension, register_cached_shapes  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402
from lab.registry import ALL_DTYPES, dtype_name  # noqa: E402

DTYPES = {dtype_name(d): d for d in ALL_DTYPES}
COPY = "copy"
TABLE = "register_cached table"
TABLE_PERSISTENT = "register_cached table, persistent"


def shape_calls(x: torch.Tensor) -> dict:
    """The copy, the table's choice on both grids and every tuning shape that holds x's rows in less
    than twice their length, by label: the calls to time at x."""
    n = x.shape[1]
    out = torch.empty_like(x)
    fns = {COPY: lambda: out.copy_(x)}
    fns[TABLE] = lambda: torch.ops.lab_tune.register_cached(x, False)
    fns[TABLE_PERSISTENT] = lambda: torch.ops.lab_tune.register_cached(x, True)
    for i, s in enumerate(register_cached_shapes(x.dtype)):
        if s.holds(n) and s.threads * s.elems < 2 * n:
            fns[s.label()] = lambda i=i: torch.ops.lab_tune.register_cached_shape(x, i)
    return fns


def measure_point(sweep: str, shape: inputs.Shape, dtype: torch.dtype, kernels: dict, unavailable: dict[str, str],
                  by_name: dict, rounds: int, reps: int, flush: torch.Tensor) -> dict:
    """Every call at one point, each checked against float64 first (the copy excepted), then all timed
    in interleaved rounds; `kernels` and `unavailable` are interleave.kernels_of's, taken once per run."""
    x = inputs.make_input(shape, dtype, "cuda")
    ref = SOFTMAX.reference(x)
    fns = shape_calls(x)
    wrong = {}
    for label in [k for k in fns if k != COPY]:
        res = check.check(lambda t, f=fns[label]: f(), x, False, ref)
        if not res.ok:
            wrong[label] = res.summary()
            del fns[label]
    variant_fns, shape_skipped, failed = checked_calls(kernels, by_name, x, ref)
    fns.update(variant_fns)
    times = interleaved_rounds(fns, flush, rounds, reps)
    return {"sweep": sweep, "dtype": dtype_name(dtype), "m": shape.m, "n": shape.n,
            "skipped": {**unavailable, **shape_skipped}, "wrong": {**wrong, **failed},
            "auto_choice": list(torch.ops.lab_tune.auto_choice(shape.m, shape.n, dtype)),
            "lab_choice": dispatch.lab_choice(shape.m, shape.n, dtype),
            "us": {k: statistics.median(v) for k, v in times.items()}, "rounds_us": times}


def summary(row: dict) -> str:
    us = row["us"]
    copy = us[COPY]
    shapes = {k: v for k, v in us.items() if "/" in k}
    best = min(shapes, key=shapes.get) if shapes else None
    others = {k: v for k, v in us.items() if k not in shapes and k != COPY}
    parts = [f"{row['sweep']:<8} {row['dtype']:<8} {row['m']}x{row['n']:<7} copy {copy:6.2f} us"
             f" (auto: {row['auto_choice'][0]} by {row['auto_choice'][1]}, lab.auto: {row['lab_choice']})"]
    if best:
        parts.append(f"best shape {best} {shapes[best]:6.2f} ({100 * copy / shapes[best]:5.1f}%)")
    parts += [f"{k} {v:6.2f} ({100 * copy / v:5.1f}%)" for k, v in others.items()]
    if row["wrong"]:
        parts.append(f"WRONG: {row['wrong']}")
    ranked = sorted(shapes.items(), key=lambda kv: kv[1])
    return "  ".join(parts) + "\n    shapes: " + ", ".join(f"{k} {v:.2f}" for k, v in ranked)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES))
    p.add_argument("--sweep", action="append", choices=sorted(inputs.SWEEPS), help="default: tutorial")
    p.add_argument("--max-n", type=int, default=4096, help="time the sweeps' rows of at most this many elements")
    p.add_argument("--shape", type=inputs.Shape.parse, action="append",
                   help="MxN to time instead of the sweeps (repeatable)")
    p.add_argument("--variants", default="lab.auto,peer.quack,peer.liger",
                   help="comma-separated softmax variants to time beside the shapes")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=100, help="timed calls per configuration per round")
    p.add_argument("--json", help="write every measurement here (after each point)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.reps < 1:
        sys.exit("tune_register_cached: --rounds and --reps must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("tune_register_cached: needs a CUDA GPU")
    load_extension()
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    by_name = softmax_variants(names, args.variants, "tune_register_cached")
    kernels, unavailable = kernels_of(names, by_name)
    flush, _ = bench.flush_buffer(bench.FLUSH_MB)
    records = []
    start = time.perf_counter()
    print(f"{torch.cuda.get_device_name()}; {args.rounds} rounds of {args.reps} calls, the median of round "
          f"medians in us, and % of the copy's time", flush=True)
    for dtype in [DTYPES[d] for d in (args.dtype or ["bfloat16", "float32"])]:
        asked = [("asked", s) for s in args.shape or []]
        swept = [(sweep, s) for sweep in args.sweep or ["tutorial"] for s in inputs.SWEEPS[sweep] if s.n <= args.max_n]
        for sweep, shape in asked or swept:
            row = measure_point(sweep, shape, dtype, kernels, unavailable, by_name, args.rounds, args.reps, flush)
            records.append(row)
            print(summary(row), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(records, f, indent=1)
    skipped = {k: v for r in records for k, v in r["skipped"].items()}
    for k, v in skipped.items():
        print(f"skipped {k}: {v}")
    print(f"{len(records)} points in {time.perf_counter() - start:.0f} s")
    return 1 if any(r["wrong"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
