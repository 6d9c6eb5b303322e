"""Does a variant's timing depend on the variant timed just before it? The lab times a point's variants in
turn, in rounds (lab.bench.time_rounds), so each stretch of a variant's calls follows another variant's
stretch. This script times a target variant right after a stretch of each other variant in turn, several
times over in a new order each time, and prints the target's median after each neighbour, with the
address of the output block the target's calls got (the caching allocator's state is one thing a
neighbour leaves behind: its freed temporaries).

    python notebook/studies/neighbours.py --target lab.auto --shape 4096x4096 --dtype bfloat16 [--repeat 3]

Each variant is checked against the float64 reference before it is timed (scripts/interleave.py's
checked_calls); the neighbours are every other softmax variant of the registry that runs here (or those
named by --variants), and the copy of the same bytes. A stretch is --reps calls, each after the flush
(--flush write: do_bench's 256 MB write; copy: 128 MB copied into 128 MB), timed by CUDA events, after
a tenth of them unflushed: the lab's rounds as they were before lab.bench.l2_reset (the lab now flushes
those calls too). By default the target's stretch follows its neighbour's at once. Between the two:
--empty-cache releases the caching allocator's unused blocks (torch.cuda.empty_cache); --reset N runs
lab.bench.l2_reset with N copies (the lab uses 20); --settle-ms has the target run its own flushed calls
for that long, untimed. The evidence these produced is in notebook/l2-reset-before-timing/.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # interleave.py, targets.py
from interleave import checked_calls, variants_here  # noqa: E402

from lab import bench, inputs  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402
from lab.registry import variants  # noqa: E402

COPY = "copy"


def stretch_us(fn, flush: torch.Tensor, reps: int) -> float:
    """The median of `reps` calls, each after writing the flush buffer, between CUDA events (us): one
    variant's stretch of a round as bench._gpu_rounds timed it before bench.l2_reset (a tenth of the calls
    first, unflushed); --reset runs l2_reset before it."""
    for _ in range(max(1, reps // 10)):
        fn()
    return statistics.median(bench.timed_calls(fn, flush, reps)) * 1e3


def output_address(fn) -> int | None:
    """The address of the output the call returns (None for a call that writes into one it is given)."""
    y = fn()
    return y.data_ptr() if isinstance(y, torch.Tensor) else None


def settle(fn, flush: torch.Tensor, ms: float) -> None:
    """The call, each after writing the flush buffer, for about `ms` milliseconds of GPU time (from one
    timed call's length), untimed."""
    if ms <= 0:
        return
    one = max(bench._estimate_ms(fn, flush), 1e-3)
    for _ in range(max(1, int(ms / one))):
        flush.zero_()
        fn()


def after_each(fns: dict, target: str, flush: torch.Tensor, reps: int, repeat: int, empty_cache: bool,
               settle_ms: float = 0.0, reset: int = 0, seed: int = 0) -> dict[str, list[tuple[float, int | None]]]:
    """For each neighbour (every call but the target, and the target itself), `repeat` times in a new
    order each time: the neighbour's stretch, then the target's; the target's median (us) and its
    output's address after each neighbour."""
    seen: dict[str, list[tuple[float, int | None]]] = {n: [] for n in fns}
    for r in range(repeat):
        for n in random.Random(seed + r).sample(list(fns), len(fns)):
            stretch_us(fns[n], flush, reps)
            if empty_cache:
                torch.cuda.empty_cache()
            if reset:
                bench.l2_reset(flush, reset)
            settle(fns[target], flush, settle_ms)
            t = stretch_us(fns[target], flush, reps)
            seen[n].append((t, output_address(fns[target])))
    return seen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default="lab.auto", help="the variant timed after each other one")
    p.add_argument("--variants", help="comma-separated neighbours (default: every softmax variant that runs here)")
    p.add_argument("--shape", type=inputs.Shape.parse, required=True, help="MxN")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="bfloat16")
    p.add_argument("--reps", type=int, default=200, help="timed calls per stretch")
    p.add_argument("--repeat", type=int, default=3, help="times each neighbour is followed by the target")
    p.add_argument("--empty-cache", action="store_true", help="torch.cuda.empty_cache() before each target stretch")
    p.add_argument("--settle-ms", type=float, default=0.0,
                   help="before each target stretch, its own flushed calls for this long, untimed")
    p.add_argument("--flush", choices=("write", "copy"), default="write",
                   help="before every call: write do_bench's 256 MB buffer (write), or copy 128 MB into 128 MB (copy)")
    p.add_argument("--reset", type=int, default=0,
                   help="before each target stretch, this many flushed copies of an L2-sized buffer (bench.l2_reset)")
    args = p.parse_args(argv)
    if args.reps < 1 or args.repeat < 1:
        sys.exit("neighbours: --reps and --repeat must be at least 1")
    if args.reset < 0 or args.settle_ms < 0:
        sys.exit("neighbours: --reset and --settle-ms must not be negative")
    all_names = [v.name for v in variants() if v.op == "softmax"]
    names = [n.strip() for n in args.variants.split(",") if n.strip()] if args.variants else all_names
    if args.target not in names:
        names.append(args.target)
    by_name, kernels, unavailable = variants_here(names, args.variants or args.target, "neighbours")
    dtype = getattr(torch, args.dtype)
    if args.target in unavailable:
        sys.exit(f"neighbours: {args.target} cannot run here ({unavailable[args.target]})")
    x = inputs.make_input(args.shape, dtype, "cuda")
    ref = SOFTMAX.reference(x)
    fns, skipped, failed = checked_calls(kernels, by_name, x, ref)
    del ref
    if args.target not in fns:
        sys.exit(f"neighbours: {args.target} was skipped or failed its check: "
                 f"{skipped.get(args.target) or failed.get(args.target)}")
    nbytes = SOFTMAX.bytes_moved(args.shape, dtype)
    src = torch.empty(max(1, nbytes // 2), dtype=torch.uint8, device="cuda").fill_(7)
    dst = torch.empty_like(src)
    fns[COPY] = lambda: dst.copy_(src)
    for n, why in {**unavailable, **skipped, **failed}.items():
        print(f"{n}: not a neighbour ({why})")
    flush = bench.flush_buffer(bench.FLUSH_MB)[0] if args.flush == "write" else bench.CopyFlush(bench.FLUSH_MB)
    seen = after_each(fns, args.target, flush, args.reps, args.repeat, args.empty_cache, args.settle_ms, args.reset)
    addresses = [a for v in seen.values() for _, a in v if a is not None]
    base = min(addresses) if addresses else 0
    print(f"{torch.cuda.get_device_name()}, {args.dtype} {args.shape.label}: {args.target} after each neighbour, "
          f"{args.repeat} times, {args.reps} calls a stretch{', empty_cache between' if args.empty_cache else ''}"
          f"{f', settled by {args.settle_ms:g} ms of its own calls' if args.settle_ms else ''}"
          f"{f', {args.reset} L2 reset copies first' if args.reset else ''}, {args.flush} flush; "
          f"us; its output's offset in MiB from the lowest seen")
    for n in sorted(seen, key=lambda n: statistics.median(t for t, _ in seen[n])):
        times = [t for t, _ in seen[n]]
        offsets = sorted({(a - base) / 2**20 for _, a in seen[n] if a is not None})
        where = ",".join(f"{o:.0f}" for o in offsets) if offsets else "-"
        print(f"  after {n:24s} median {statistics.median(times):8.2f}  range {min(times):8.2f}-{max(times):8.2f}"
              f"  output at {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
