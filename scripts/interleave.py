"""Time a few variants at a few shapes in interleaved rounds, to tell a real gap from the timing's noise.

The lab itself times a point's variants in interleaved rounds (python -m lab.test: lab.bench.time_rounds,
do_bench's loop with the L2 flushed before every call). This script does the same for the variants and
shapes asked for, with more rounds, a choice of flush sizes and the spread of the rounds printed: on
tensors of a few MB a kernel runs for 4-15 us, and one round's median can differ from the next by several
percent. Each round is the same loop as do_bench (the L2 flushed by writing a buffer before every call,
CUDA events around the call), in a new order every round (lab.bench.round_orders), each variant's
stretch after the lab's L2 reset (lab.bench.l2_reset). A larger
flush buffer keeps the GPU busy longer before each call, so a call whose host work outlasts the flush
(its launch reaching the GPU late, the wait counted in its time) reads faster with it. Beside each
timing, the host time of one call (the mean over back-to-back calls, no synchronisation between them).

    python scripts/interleave.py --variants lab.auto,cuda.auto,cuda.register_cached \\
        --shape 4096x512 --shape 4096x1024 --dtype bfloat16 [--rounds 5] [--flush-mb 256,1024]

Each variant is checked against the float64 reference at each shape before it is timed (a failure is
printed, not timed). Prints, per flush size, shape and variant: the median over rounds of each round's
median (us), the lowest and highest round, and the host time per call (us). lab.auto and cuda.auto
route by the committed dispatch table.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from lab import bench, check, inputs
from lab.operators.softmax import SOFTMAX
from lab.registry import Unavailable, variants


def softmax_variants(names: list[str], asked: str, prog: str) -> dict:
    """The softmax variants of the registry by name; exits naming any of `names` (parsed from the text
    `asked`) that is not one, or `asked` if it names none."""
    by_name = {v.name: v for v in variants() if v.op == "softmax"}
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        sys.exit(f"{prog}: no softmax variant named {', '.join(unknown) or repr(asked)}; "
                 "see python -m lab.test --list")
    return by_name


def variants_here(names: list[str], asked: str, prog: str) -> tuple[dict, dict, dict[str, str]]:
    """The scripts' common start: softmax_variants (exits on a name that is none), then an exit without a
    CUDA GPU, then kernels_of: (the registry's softmax variants by name, the named ones' kernels, why each
    of the others cannot run here)."""
    by_name = softmax_variants(names, asked, prog)
    if not torch.cuda.is_available():
        sys.exit(f"{prog}: needs a CUDA GPU")
    kernels, unavailable = kernels_of(names, by_name)
    return by_name, kernels, unavailable


def kernels_of(names: list[str], by_name: dict) -> tuple[dict, dict[str, str]]:
    """The kernel of each named variant (auto's routes: the committed dispatch table), and why each
    one that cannot run here cannot."""
    kernels, unavailable = {}, {}
    for n in names:
        try:
            kernels[n] = by_name[n].kernel()
        except Unavailable as e:
            unavailable[n] = str(e)
    return kernels, unavailable


def checked_calls(kernels: dict, by_name: dict, x: torch.Tensor, ref: torch.Tensor) -> tuple[dict, dict, dict]:
    """Per variant that takes x, the call to time (into an output it is given, where the variant writes
    one; a per_shape variant's kernel built anew for x), once its result matched ref; and, by name, why
    the others were skipped or what their check found."""
    fns, skipped, failed = {}, {}, {}
    shape = inputs.Shape.of(x)
    for n, k in kernels.items():
        v = by_name[n]
        if reason := v.skip_reason(shape, x.dtype):
            skipped[n] = reason
            continue
        if v.per_shape:  # built for each shape (torch.compile: one graph per shape, no recompile limit)
            k = v.kernel()
        c = check.check(k, x, v.writes_out, ref)  # correct before timed
        if not c.ok:
            failed[n] = c.summary()
            continue
        fns[n] = bench.timed_call(k, (x,), v.writes_out, lambda: torch.empty_like(x))  # an output a call, as the lab's
    return fns, skipped, failed


def interleaved_rounds(fns: dict, flush: torch.Tensor, rounds: int, reps: int) -> dict[str, list[float]]:
    """Each call's median per round (us), the calls taken in turn every round, in a new order each round
    (lab.bench.interleave, as the lab's own rounds)."""
    return bench.interleave(fns, lambda fn, count: [timed_round(fn, flush, count)], dict.fromkeys(fns, reps), rounds)


def timed_round(fn, flush: torch.Tensor, reps: int) -> float:
    """The median of `reps` calls, each after writing the flush buffer, timed by CUDA events (us), after
    the lab's L2 reset (bench.l2_reset: the same L2 state whatever ran before) and a few flushed calls:
    bench.timed_stretch, the lab's own stretch, with at least 3 calls of warm-up."""
    return statistics.median(bench.timed_stretch(fn, flush, reps, max(3, reps // 10))) * 1e3


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", required=True, help="comma-separated exact variant names")
    p.add_argument("--shape", type=inputs.Shape.parse, action="append", required=True, help="MxN (repeatable)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="bfloat16")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=200, help="timed calls per variant per round")
    p.add_argument("--flush-mb", default="256", help="comma-separated flush buffer sizes in MB (do_bench's: 256)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.reps < 1:
        sys.exit("interleave: --rounds and --reps must be at least 1")
    try:
        flushes = [int(s) for s in args.flush_mb.split(",")]
    except ValueError:
        sys.exit(f"interleave: --flush-mb takes whole MB, comma-separated; got {args.flush_mb!r}")
    if not flushes or min(flushes) < 1:
        sys.exit("interleave: each --flush-mb must be at least 1")
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    by_name, kernels, unavailable = variants_here(names, args.variants, "interleave")
    dtype = getattr(torch, args.dtype)
    for n, reason in unavailable.items():
        print(f"{n}: skipped ({reason})")
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, {args.rounds} rounds of {args.reps} calls; times in us")
    for mb in flushes:
        flush, _ = bench.flush_buffer(mb)
        for shape in args.shape:
            x = inputs.make_input(shape, dtype, "cuda")
            ref = SOFTMAX.reference(x)
            fns, skipped, failed = checked_calls(kernels, by_name, x, ref)
            for n, reason in skipped.items():
                print(f"flush {mb:5d} MB  {shape.label}  {n:24s} skipped ({reason})")
            for n, summary in failed.items():
                print(f"flush {mb:5d} MB  {shape.label}  {n:24s} FAILED the check, not timed: {summary}")
            rounds = interleaved_rounds(fns, flush, args.rounds, args.reps)
            for n in fns:
                t = rounds[n]
                print(f"flush {mb:5d} MB  {shape.label}  {n:24s} median {statistics.median(t):7.2f}  "
                      f"rounds {min(t):7.2f}-{max(t):7.2f}  host {bench.host_us(fns[n]):6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
