"""Does the SM's shared-memory configuration before a timed call count in its time?

An SM splits its on-chip memory between L1 and shared memory in one of a few configurations, and the driver
picks one for each kernel from what its blocks need (ncu's "Shared Memory Configuration Size": 32.77 KB for a
kernel with no shared memory of its own, 167.94 KB for register_cached's staged float32 N = 1024 shape). Between
two kernels that want different configurations the SM changes over. In the lab's loop the kernel before each
timed call is the flush's fill; if the change-over falls inside the timed window, a kernel whose configuration
differs from the fill's pays for it in every call and one that matches does not.

This script times each variant's calls as scripts/interleave.py does (the lab's flushed calls between CUDA
events, interleaved rounds), once behind the flush alone and once behind the flush followed by a primer: a
variant's own call on a small input of the same row length (--primer-rows rows), launched after the flush and
before the start event, so that its run is not timed but the configuration it leaves is the one the timed
call meets. A kernel timed behind a primer of its own kind starts in its own configuration; behind another
kind's, in that one.

    python notebook/studies/primer.py --variants cuda.register_cached,torch.compile --primers cuda.register_cached \\
        --shape 4096x1024 --dtype float32 [--primer-rows 8] [--rounds 5] [--reps 100]

The primer's host time comes on top of the call's before the start event: where the two outlast the flush's GPU
time, the GPU waits for the host inside the timed window (rounds of 20-90 us at 4096x128 behind the 256 MB flush
on an H200). --flush-mb 1024 keeps the GPU busy about 250 us, longer than any of the lab's calls takes on the host.

Every variant and primer is checked against the float64 reference before it is timed. Prints, per shape, the
median over rounds of each (variant, primer) pair's round medians (us) and the spread of the rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # interleave.py, targets.py
from interleave import checked_calls, timed_round, variants_here  # noqa: E402

from lab import bench, inputs  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402

NO_PRIMER = "-"


class PrimedFlush:
    """The flush buffer's write, then the primer's call (if any): what bench's timed stretches call `zero_`
    before each timed call (as bench.CopyFlush stands in for the buffer)."""

    def __init__(self, buf: torch.Tensor, primer=None):
        self.buf, self.primer = buf, primer

    def zero_(self) -> None:
        self.buf.zero_()
        if self.primer is not None:
            self.primer()


def parse_names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", required=True, help="comma-separated variants to time")
    p.add_argument("--primers", required=True, help="comma-separated variants to run before the start event")
    p.add_argument("--shape", type=inputs.Shape.parse, action="append", required=True, help="MxN (repeatable)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="bfloat16")
    p.add_argument("--primer-rows", type=int, default=8, help="rows of the primer's input (its row length: N)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=100, help="timed calls per (variant, primer) per round")
    p.add_argument("--flush-mb", type=int, default=bench.FLUSH_MB,
                   help="the flush's size: long enough that the host's primer and call reach the GPU before it ends")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.reps < 1 or args.primer_rows < 1 or args.flush_mb < 1:
        sys.exit("primer: --rounds, --reps, --primer-rows and --flush-mb must be at least 1")
    names, primers = parse_names(args.variants), parse_names(args.primers)
    if not names or not primers:
        sys.exit("primer: --variants and --primers each name at least one variant")
    everything = list(dict.fromkeys(names + primers))
    by_name, kernels, unavailable = variants_here(everything, ",".join(everything), "primer")
    for n, reason in unavailable.items():
        sys.exit(f"primer: {n} cannot run here ({reason})")
    dtype = getattr(torch, args.dtype)
    buf, _ = bench.flush_buffer(args.flush_mb)
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, {args.rounds} rounds of {args.reps} calls behind the "
          f"{args.flush_mb} MB flush, then the primer (its input {args.primer_rows} rows); times in us")
    for shape in args.shape:
        x = inputs.make_input(shape, dtype, "cuda")
        small = inputs.make_input(inputs.Shape(args.primer_rows, shape.n), dtype, "cuda")
        fns, skipped, failed = checked_calls({n: kernels[n] for n in names}, by_name, x, SOFTMAX.reference(x))
        prime, p_skipped, p_failed = checked_calls({n: kernels[n] for n in primers}, by_name, small,
                                                   SOFTMAX.reference(small))
        for n, why in {**skipped, **failed, **p_skipped, **p_failed}.items():
            print(f"{shape.label}  {n}: not timed ({why})")
        flushes = {NO_PRIMER: PrimedFlush(buf)} | {n: PrimedFlush(buf, f) for n, f in prime.items()}
        pairs = {(v, q): (fn, flushes[q]) for v, fn in fns.items() for q in flushes}
        keys = {f"{v} behind {q}": (v, q) for v, q in pairs}  # bench.interleave passes each key's value
        rounds = bench.interleave(
            {k: pairs[vq] for k, vq in keys.items()}, lambda pair, count: [timed_round(pair[0], pair[1], count)],
            dict.fromkeys(keys, args.reps), args.rounds)
        for k, t in rounds.items():
            v, q = keys[k]
            behind = "the flush alone" if q == NO_PRIMER else f"primer {q}"
            print(f"{shape.label}  {v:24s} behind {behind:32s} median {statistics.median(t):7.2f}  "
                  f"rounds {min(t):7.2f}-{max(t):7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
