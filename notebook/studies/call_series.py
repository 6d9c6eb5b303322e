"""Stretches of calls, one after another: how a call's time moves within a stretch and from one stretch
to the next, beside the GPU's clocks and power. The lab times a point's variants in short stretches
(lab.bench.time_rounds); on the H200 a stretch's median depended on the stretch before it, through what
that stretch left in the L2 (notebook/studies/neighbours.py, notebook/l2-reset-before-timing/), which
lab.bench.l2_reset now removes before every stretch.

    python notebook/studies/call_series.py --sequence cuda.auto,torch.compile,cuda.auto,copy,l2-reset,cuda.auto \\
        --shape 4096x4096 --dtype bfloat16 [--calls 2000]

Each stretch is --calls calls of one variant (or of 'copy', a copy of the same bytes). Between two
stretches, 'l2-reset' runs lab.bench.l2_reset (the lab's reset before each stretch) and
'reset-persisting' calls cudaCtxResetPersistingL2Cache (which changed nothing on the H200; the
experiment's files name it 'reset-l2', its first name). Each call is timed after the flush (--flush
write: do_bench's 256 MB write; copy: 128 MB copied into 128 MB), between CUDA events, with no reset
and no untimed calls between stretches unless asked for; the variants are checked against the float64
reference first. Each stretch prints its median, then its calls in windows of --window: each window's
start (ms from the stretch's first call, on the GPU's clock), median and p20-p80 (us), and the SM and
memory clocks (MHz), power (W) and temperature (C) that nvidia-smi sampled (every 20 ms, in a process
beside, where nvidia-smi runs) closest to the window's middle; then the windows' medians as a
histogram of levels (0.1 us bins).
"""

from __future__ import annotations

import argparse
import collections
import csv
import datetime
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # interleave.py, targets.py
from interleave import checked_calls, kernels_of, softmax_variants  # noqa: E402

from lab import bench, inputs  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402

SMI_FIELDS = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu"
RESET = "reset-persisting"  # cudaCtxResetPersistingL2Cache
LAB_RESET = "l2-reset"  # lab.bench.l2_reset


def series(fn, flush: torch.Tensor, calls: int) -> tuple[list[float], list[float]]:
    """`calls` flushed, event-timed calls in one stream (bench.timed_events, the lab's timed calls): each
    one's time (us) and its start on the GPU (ms after the first call's)."""
    events = bench.timed_events(fn, flush, calls)
    first = events[0][0]
    return [s.elapsed_time(e) * 1e3 for s, e in events], [first.elapsed_time(s) for s, _ in events]


def read_smi(path: Path) -> list[tuple[float, list[str]]]:
    """nvidia-smi's samples: (seconds since the epoch, [sm MHz, mem MHz, W, C])."""
    rows = []
    with open(path) as f:
        for row in csv.reader(f):
            if len(row) < 5:
                continue
            try:
                when = datetime.datetime.strptime(row[0].strip(), "%Y/%m/%d %H:%M:%S.%f").timestamp()
            except ValueError:
                continue
            rows.append((when, [c.strip().split(" ")[0] for c in row[1:5]]))
    return rows


def reset_persisting_l2() -> None:
    """cudaCtxResetPersistingL2Cache: every L2 line marked persisting (evict_last) back to normal."""
    import ctypes

    import torch.cuda  # noqa: F401 (the runtime is loaded)
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            continue
    else:
        sys.exit("call_series: no libcudart to call cudaCtxResetPersistingL2Cache")
    err = rt.cudaCtxResetPersistingL2Cache()
    if err != 0:
        sys.exit(f"call_series: cudaCtxResetPersistingL2Cache returned error {err}")


def calls_of(names: list[str], x: torch.Tensor, dtype: torch.dtype, shape: inputs.Shape) -> dict:
    """The call of each name: a softmax variant (checked first), or 'copy' (a copy of the same bytes)."""
    fns = {}
    if "copy" in names:
        src = torch.empty(max(1, SOFTMAX.bytes_moved(shape, dtype) // 2), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        fns["copy"] = lambda: dst.copy_(src)
    wanted = [n for n in dict.fromkeys(names) if n not in ("copy", RESET, LAB_RESET)]
    if wanted:
        by_name = softmax_variants(wanted, ",".join(wanted), "call_series")
        kernels, unavailable = kernels_of(wanted, by_name)
        if unavailable:
            sys.exit(f"call_series: cannot run here: {unavailable}")
        checked, skipped, failed = checked_calls(kernels, by_name, x, SOFTMAX.reference(x))
        if skipped or failed:
            sys.exit(f"call_series: skipped or failed the check: {skipped or failed}")
        fns.update(checked)
    return fns


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sequence", required=True,
                   help=f"comma-separated stretches in turn: softmax variants, 'copy' (a copy of the same bytes), "
                        f"'{LAB_RESET}' (lab.bench.l2_reset) or '{RESET}' (cudaCtxResetPersistingL2Cache)")
    p.add_argument("--shape", type=inputs.Shape.parse, required=True, help="MxN")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="bfloat16")
    p.add_argument("--calls", type=int, default=2000, help="calls per stretch")
    p.add_argument("--window", type=int, default=100, help="calls per printed window")
    p.add_argument("--flush", choices=("write", "copy"), default="write",
                   help="before every call: write do_bench's 256 MB buffer (write), or copy 128 MB into 128 MB (copy)")
    args = p.parse_args(argv)
    if args.calls < 1 or args.window < 1:
        sys.exit("call_series: --calls and --window must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("call_series: needs a CUDA GPU")
    dtype = getattr(torch, args.dtype)
    names = [n.strip() for n in args.sequence.split(",") if n.strip()]
    x = inputs.make_input(args.shape, dtype, "cuda")
    fns = calls_of(names, x, dtype, args.shape)
    flush = bench.flush_buffer(bench.FLUSH_MB)[0] if args.flush == "write" else bench.CopyFlush(bench.FLUSH_MB)
    smi_dir = Path(tempfile.mkdtemp())
    smi_log, smi = smi_dir / "smi.csv", None
    try:
        if shutil.which("nvidia-smi"):
            with open(smi_log, "w") as f:
                smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv,noheader",
                                        "-lms", "20"], stdout=f, stderr=subprocess.DEVNULL)
            time.sleep(0.2)
        stretches = []
        for n in names:
            torch.cuda.synchronize()
            if n in (RESET, LAB_RESET):
                if n == RESET:
                    reset_persisting_l2()
                else:
                    bench.l2_reset(flush)
                torch.cuda.synchronize()
                stretches.append((n, time.time(), [], []))
                continue
            t0 = time.time()
            stretches.append((n, t0, *series(fns[n], flush, args.calls)))
        if smi:
            time.sleep(0.1)
    finally:  # the sampler stops and its log goes, whatever happened (an error, Ctrl-C)
        if smi:
            smi.terminate()
            smi.wait()
        samples = read_smi(smi_log) if smi else []
        shutil.rmtree(smi_dir, ignore_errors=True)
    print(f"{torch.cuda.get_device_name()}, {args.dtype} {args.shape.label}: {args.calls} flushed calls a stretch, "
          f"windows of {args.window}; us; clocks MHz, power W, temperature C (nvidia-smi, 20 ms)")
    for n, t0, times, starts in stretches:
        if not times:
            print(f"== {n}")
            continue
        _, p20, p80 = bench.quantiles([t / 1e3 for t in times])
        print(f"== {n}: median {statistics.median(times):.2f}, p20-p80 {p20 * 1e3:.2f}-{p80 * 1e3:.2f}")
        levels: collections.Counter = collections.Counter()
        for i in range(0, len(times), args.window):
            w = times[i:i + args.window]
            med, w20, w80 = (q * 1e3 for q in bench.quantiles([t / 1e3 for t in w]))
            levels[round(med, 1)] += 1
            mid = t0 + (starts[i] + starts[min(i + args.window, len(times)) - 1]) / 2e3  # the host's clock, roughly
            near = min(samples, key=lambda s: abs(s[0] - mid))[1] if samples else ["-"] * 4
            print(f"  {starts[i]:8.1f} ms  median {med:7.2f}  p20-p80 {w20:7.2f}-{w80:7.2f}  "
                  f"sm {near[0]:>5}  mem {near[1]:>5}  {near[2]:>6} W  {near[3]:>3} C")
        print("  window medians by level (us: windows):", ", ".join(f"{k:.1f}: {v}" for k, v in sorted(levels.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
