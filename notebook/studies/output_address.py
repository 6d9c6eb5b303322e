"""Does the output's address move a kernel's time? GPU only.

With no arguments: torch.ops.lab.softmax (cuda.auto) timed in interleaved rounds (lab.bench.time_rounds, 5
and 20 rounds) writing into three separate preallocated outputs (out_A twice, out_B, out_C), into an output
it allocates per call (alloc), and through lab.softmax, at five shapes; each time with its ratio to out_A's.

    python notebook/studies/output_address.py

With --variants: each named variant, checked against the float64 reference first, timed in the same
interleaved rounds writing into an output allocated per call (alloc, as the lab times it: the block the
call before freed), into --separate preallocated outputs (out_A, ...), and, with --offsets-kb, into views of
one pool at those byte offsets (pool+0KB, pool+4KB, ...: the same pages, the output's start moved); every
variant writes into the same preallocated outputs, so a label is one address for all of them. A variant
that takes no output (a peer) is timed on alloc alone. Prints each output's median (us) and its ratio to the
variant's alloc, and the variant's spread (slowest / fastest output); every output written is then compared,
bit for bit, with the variant's output of x allocated apart (each kernel reduces a row in a fixed order, so
an output at any address must be the same).

    python notebook/studies/output_address.py --variants cuda.cluster,triton.fused --shape 4096x32768 \\
        --dtype float32 --offsets-kb 4,64,1024 [--rounds 5]
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # interleave.py, targets.py
from interleave import checked_calls, variants_here  # noqa: E402

import lab  # noqa: E402
from lab import bench, inputs  # noqa: E402
from lab.backends.cuda_variants import load_extension  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402

SHAPES = ((torch.float32, (4096, 8192)), (torch.bfloat16, (4096, 16384)), (torch.bfloat16, (4096, 2048)),
          (torch.float32, (4096, 16384)), (torch.bfloat16, (4096, 4096)))
VECTOR_BYTES = 16  # the kernels' widest access: an output must start on a 16-byte boundary to take it


def address_calls(x: torch.Tensor, op) -> dict:
    """The calls to time: the op into three preallocated outputs (A twice), allocating, and lab.softmax."""
    a, b, c = (torch.empty_like(x) for _ in range(3))
    return {"out_A": lambda: op.out(x, out=a), "out_B": lambda: op.out(x, out=b),
            "out_A_again": lambda: op.out(x, out=a), "alloc": lambda: op(x),
            "lab.softmax": lambda: lab.softmax(x), "out_C": lambda: op.out(x, out=c)}


def outputs_at(x: torch.Tensor, separate: int, offsets_kb: list[int]) -> dict[str, torch.Tensor]:
    """Outputs shaped as x: `separate` allocations of their own (out_A, out_B, ...) and, where offsets_kb is
    not empty, views of one pool starting 0 and each of those KB into it (pool+0KB, pool+4KB, ...)."""
    if separate < 0 or any(kb < 0 for kb in offsets_kb):
        raise ValueError(f"separate outputs and offsets must not be negative: {separate}, {offsets_kb}")
    outs = {f"out_{chr(ord('A') + i)}": torch.empty_like(x) for i in range(separate)}
    if offsets_kb:
        span = x.numel() * x.element_size()
        pool = torch.empty(span + max(offsets_kb) * 1024 + VECTOR_BYTES, dtype=torch.uint8, device=x.device)
        start = -pool.data_ptr() % VECTOR_BYTES  # the pool's own start on a 16-byte boundary
        for kb in sorted({0, *offsets_kb}):
            at = start + kb * 1024
            outs[f"pool+{kb}KB"] = pool[at:at + span].view(x.dtype).view(x.shape)
    return outs


def default_run() -> None:
    """cuda.auto into three outputs, allocating and through lab.softmax, at SHAPES (5 and 20 rounds)."""
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


def variants_run(args: argparse.Namespace) -> int:
    """--variants: each variant into its outputs at each shape (the module's docstring says what is printed).
    Exit status 1 if a variant failed its check or an output differed from its output allocated apart."""
    names = [n.strip() for n in args.variants.split(",") if n.strip()]
    by_name, kernels, unavailable = variants_here(names, args.variants, "output_address")
    for n, reason in unavailable.items():
        print(f"{n}: skipped ({reason})")
    dtype, dev, status = getattr(torch, args.dtype), torch.device("cuda"), 0
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, {args.rounds} interleaved rounds; times in us", flush=True)
    for shape in args.shape:
        x = inputs.make_input(shape, dtype, "cuda")
        ref = SOFTMAX.reference(x)
        fns, skipped, failed = checked_calls(kernels, by_name, x, ref)
        del ref
        for n, reason in skipped.items():
            print(f"{shape.label}  {n}: skipped ({reason})")
        for n, summary in failed.items():
            print(f"{shape.label}  {n}: FAILED the check, not timed: {summary}")
            status = 1
        outs = outputs_at(x, args.separate, args.offsets_kb)  # the same addresses for every variant
        calls, written = {}, {}
        for n, fn in fns.items():
            calls[(n, "alloc")] = fn
            if by_name[n].writes_out:
                for label, out in outs.items():
                    calls[(n, label)] = functools.partial(kernels[n], x, out)
                    written[(n, label)] = out
        timings = bench.time_rounds({f"{n} {label}": fn for (n, label), fn in calls.items()}, dev,
                                    rounds=args.rounds, host_check=False)
        for n in fns:
            mine = {label: timings[f"{v} {label}"].median_ms for v, label in calls if v == n}
            print(f"{shape.label}  {n:22s} " + "  ".join(f"{label} {ms * 1e3:7.2f} ({ms / mine['alloc']:.3f})"
                                                         for label, ms in mine.items())
                  + f"  spread {max(mine.values()) / min(mine.values()):.3f}", flush=True)
        apart = {n: kernels[n](x, torch.empty_like(x)) for n in {n for n, _ in written}}
        for (n, label), out in written.items():  # each output holds the last variant's; write it again
            kernels[n](x, out)
            if not torch.equal(out, apart[n]):
                print(f"{shape.label}  {n} {label}: the output differs from the variant's output allocated apart")
                status = 1
    return status


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", help="comma-separated exact variant names (without it: cuda.auto at five shapes)")
    p.add_argument("--shape", type=inputs.Shape.parse, action="append", help="MxN (repeatable; with --variants)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="bfloat16")
    p.add_argument("--separate", type=int, default=3, help="outputs allocated apart (default 3: out_A, out_B, out_C)")
    p.add_argument("--offsets-kb", type=lambda s: [int(v) for v in s.split(",") if v.strip()], default=[],
                   help="comma-separated KB: views of one pool starting there (and at 0)")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args(argv)
    if args.variants is None:
        if args.shape or args.offsets_kb:
            p.error("--shape and --offsets-kb go with --variants")
        if not torch.cuda.is_available():
            sys.exit("output_address: needs a CUDA GPU")
        default_run()
        return 0
    if not args.shape:
        p.error("--variants needs at least one --shape")
    if args.rounds < 1 or args.separate < 0 or any(kb < 0 for kb in args.offsets_kb):
        p.error("--rounds must be at least 1, --separate and --offsets-kb not negative")
    return variants_run(args)


if __name__ == "__main__":
    sys.exit(main())
