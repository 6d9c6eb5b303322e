"""Measure every launch shape of cuda.cluster at the sweeps' row lengths, to choose its launch table.

For each dtype and each row length of the fixed and tutorial sweeps (at the sweep's M), every
resident CTA shape (threads, elements per thread, rows staged ahead, float32 or packed 16-bit
registers) compiled into lab._C for that dtype is tried with every cluster size whose slice fits
the shape's registers and fills at least a quarter of them. Packed shapes (label suffix P: 16-bit
elements held two to a register) run for float16 and bfloat16 only; --shapes packed times only
them (with --dtype bfloat16, the measurement the packed path waits for), --shapes float only the
others. Each configuration is checked against float64 before it is timed (median of
do_bench, L2 flushed, each configuration in one stretch; with --rounds R, a point's configurations, references and
copy together in R interleaved rounds, as the lab times a point's variants: one stretch each can differ from the
next by a few percent at decode-time rows of 5-20 us). Every configuration starts its first wave of clusters all at
once (no stagger; scripts/tune/stagger.py tunes that for a chosen shape). Prints, per point, the best configuration, the
one the launch table (cluster_plan) picks, cuda.cluster as launched (the table's choice with its
stagger), the streaming path, and cuda.register_cached and torch.softmax for scale; writes every
measurement as JSON.

    python scripts/tune/tune_cluster.py [--dtype bfloat16] [--shapes all|packed|float] [--min-n 1024] [--max-n 16384]
        [--shape 4096x50257 ...] [--grid both|persistent|one-per-row] [--rounds 5] [--json tune.json]

--shape (repeatable) times the shapes given instead of the sweeps'. Where N or the row stride is not a
multiple of a 16-byte pack, rows start off 16-byte boundaries: the launcher splits each as a shifted row of up
to a pack less one element more, from the shapes that load straight into registers only (stages 0), and
the candidates are chosen for that longest shifted row.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

# the checkout (lab) and scripts/ (interleave), wherever this runs from
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]
from lab import bench, check, inputs  # noqa: E402
from lab.backends.cuda_variants import ClusterShape, cluster_shapes, load_extension  # noqa: E402
from lab.dispatch import pack_elements  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402
from lab.registry import ALL_DTYPES, dtype_name  # noqa: E402

CLUSTERS = (1, 2, 3, 4, 6, 8, 12, 16)
STREAMING = -1  # torch.ops.lab_tune.cluster's shape for the streaming path (kStreamingShape in lab/tune.h)
DTYPES = {dtype_name(d): d for d in ALL_DTYPES}


def points(min_n: int, max_n: int | None = None) -> list[tuple[str, inputs.Shape]]:
    return [(sweep, s) for sweep in ("fixed", "tutorial") for s in inputs.SWEEPS[sweep]
            if s.n >= min_n and (max_n is None or s.n <= max_n)]


def candidates(n: int, dtype: torch.dtype, shapes: list[ClusterShape], kinds: str = "all", shifted: bool = False):
    """(shape index, cluster) pairs whose slice fits the shape and uses at least a quarter of it, for
    the shapes compiled for `dtype` of the kinds asked for (all, packed or float). Shifted rows (contiguous
    rows whose N is not a multiple of a pack) fit as rows of n + pack - 1 elements, on stages-0 shapes only."""
    pack = pack_elements(dtype)
    if shifted:
        n += pack - 1
    for i, s in enumerate(shapes):
        if not s.runs(dtype) or (kinds == "packed" and not s.packed) or (kinds == "float" and s.packed):
            continue
        if shifted and s.stages:
            continue
        for c in CLUSTERS:
            slice_elems = math.ceil(math.ceil(n / pack) / c) * pack
            if slice_elems <= s.threads * s.elems and 4 * slice_elems >= s.threads * s.elems:
                yield i, c


def describe(c: dict | None) -> str:
    if c is None:
        return "-"
    kind = "p" if c["persistent"] else "n"
    return f"{label(c)} c{c['cluster']}{kind} {c['pct_copy']:.1f}%"


def label(c: dict) -> str:
    return ClusterShape(c["threads"], c["elems"], c["stages"], c.get("packed", False), c.get("one_row", False)).label()


GRIDS = {"both": (True, False), "persistent": (True,), "one-per-row": (False,)}


def measure_point(sweep: str, shape: inputs.Shape, dtype: torch.dtype, shapes: list[ClusterShape],
                  kinds: str = "all", grid: str = "both", rounds: int = 1) -> dict:
    """Every candidate configuration at one point, checked then timed, with references for scale. `grid`
    (a key of GRIDS): the launches timed, persistent grids, one cluster per row or both. rounds 1: each
    configuration and reference in one stretch of its own (time_gpu), the copy before them; more: all of them and
    the copy together in that many interleaved rounds (bench.time_rounds), for gaps of a few percent."""
    tuned = torch.ops.lab_tune.cluster
    x = inputs.make_input(shape, dtype, "cuda")
    ref = SOFTMAX.reference(x)
    nbytes = SOFTMAX.bytes_moved(shape, dtype)
    # Rows off 16-byte boundaries: x's row stride, or y's (the op's output is contiguous: N).
    pack = pack_elements(dtype)
    shifted = shape.n % pack != 0 or shape.stride % pack != 0
    row = {"sweep": sweep, "dtype": dtype_name(dtype), "m": shape.m, "n": shape.n, "rounds": rounds,
           "plan": list(torch.ops.lab_tune.cluster_plan(shape.n, dtype, shape.m, not shifted)), "configs": []}
    pairs = list(candidates(shape.n, dtype, shapes, kinds, shifted))
    calls: dict[int | str, Callable[[], object]] = {}  # a configuration's index in row["configs"], or a reference
    if row["plan"][0] >= 0 and tuple(row["plan"][:2]) not in pairs:
        pairs.append(tuple(row["plan"][:2]))  # the plan's own choice, for comparison, whatever --shapes says
    for i, c in pairs:
        for persistent in GRIDS[grid]:
            s = shapes[i]
            if not s.launches(persistent):
                continue  # a one-row shape: one cluster per row only
            cfg = {"shape": i, "threads": s.threads, "elems": s.elems, "stages": s.stages, "packed": s.packed,
                   "one_row": s.one_row, "cluster": c, "persistent": persistent}
            row["configs"].append(cfg)

            def run(t: torch.Tensor, i: int = i, c: int = c, p: bool = persistent) -> torch.Tensor:
                return tuned(t, i, c, p)

            res = check.check(run, x, False, ref)
            if not res.ok:  # a configuration the GPU refuses (shared memory, occupancy) or a wrong result
                cfg["error"] = res.summary()
                continue
            calls[len(row["configs"]) - 1] = lambda run=run: run(x)
    del ref
    refs = {"torch.softmax": lambda: torch.softmax(x, -1),
            # The launch table's own choice as cuda.cluster runs it (its stagger included), and the streaming path.
            "cuda.cluster": lambda: torch.ops.lab.cluster(x),
            "streaming": lambda: tuned(x, STREAMING, 1, True)}
    if shape.n <= 16384:
        refs["cuda.register_cached"] = lambda: torch.ops.lab_tune.register_cached(x, True)
        refs["cuda.register_cached (one block per row group)"] = lambda: torch.ops.lab_tune.register_cached(x, False)
    calls.update(refs)
    if rounds == 1:
        copy_ms = bench.copy_ceiling(nbytes, x.device).median_ms
        ms = {name: bench.time_gpu(fn, rep_ms=50).median_ms for name, fn in calls.items()}
    else:
        calls["copy"] = bench.copy_call(nbytes, x.device)
        ms = {name: t.median_ms for name, t in bench.time_rounds(calls, x.device, rounds=rounds,
                                                                  host_check=False).items()}
        copy_ms = ms.pop("copy")
    row["copy_gbps"] = bench.gbps(nbytes, copy_ms)
    for name, t_ms in ms.items():
        pct = 100 * copy_ms / t_ms
        if isinstance(name, int):
            row["configs"][name].update(gbps=bench.gbps(nbytes, t_ms), pct_copy=pct)
        else:
            row[name] = pct
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES))
    p.add_argument("--shapes", choices=("all", "packed", "float"), default="all",
                   help="which resident shapes to time: all, the packed 16-bit ones, or the float32-register ones")
    p.add_argument("--min-n", type=int, default=32)
    p.add_argument("--max-n", type=int, help="time the sweeps' rows of at most this many elements (default: all)")
    p.add_argument("--shape", type=inputs.Shape.parse, action="append",
                   help="MxN (repeatable): time these shapes (MxN/STRIDE: strided rows) instead of the sweeps' points")
    p.add_argument("--grid", choices=sorted(GRIDS), default="both",
                   help="the launches to time: persistent grids, one cluster per row, or both (default)")
    p.add_argument("--rounds", type=int, default=1,
                   help="1 (default): each configuration timed in one stretch; more: a point's configurations, "
                        "references and copy timed together in this many interleaved rounds")
    p.add_argument("--json", help="write every measurement here")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds takes a whole number of at least 1; got {args.rounds}")
    if not torch.cuda.is_available():
        sys.exit("tune_cluster: needs a CUDA GPU")
    load_extension()
    shapes = cluster_shapes()
    records, skipped = [], []
    start = time.perf_counter()
    for dtype in [DTYPES[d] for d in (args.dtype or ["float32", "bfloat16"])]:
        todo = [("custom", s) for s in args.shape] if args.shape else points(args.min_n, args.max_n)
        for sweep, shape in todo:
            row, oom = None, ""
            try:
                row = measure_point(sweep, shape, dtype, shapes, args.shapes, args.grid, args.rounds)
            # A GPU too small for the point: the whole-output float64 check of 4096x262144 did not fit 80 GB
            # before check.compare went by row blocks.
            except torch.OutOfMemoryError as e:
                oom = str(e).splitlines()[0]
            if row is None:  # the point's tensors are released with the exception: the next point has the memory
                torch.cuda.empty_cache()
                skipped.append(f"{sweep} {dtype_name(dtype)} {shape.label}")
                print(f"{sweep:<8} {dtype_name(dtype):<8} {shape.label:<12} NOT TIMED: out of GPU memory ({oom})",
                      flush=True)
                continue
            records.append(row)
            best, wrong = best_and_wrong(row["configs"])
            planned = next((c for c in row["configs"] if "gbps" in c
                            and [c["shape"], c["cluster"], int(c["persistent"])] == row["plan"][:3]), None)
            rc = ""  # register_cached holds rows up to 16384 elements: timed there only
            if "cuda.register_cached" in row:
                rc = (f"register_cached {row['cuda.register_cached']:5.1f}% (non-persistent "
                      f"{row['cuda.register_cached (one block per row group)']:5.1f}%) ")
            print(f"{sweep:<8} {dtype_name(dtype):<8} {shape.label:<12} best {describe(best):<27} "
                  f"plan {describe(planned):<27} cuda.cluster {row['cuda.cluster']:5.1f}% "
                  f"streaming {row['streaming']:5.1f}% {rc}torch {row['torch.softmax']:5.1f}%"
                  + (f"  WRONG x{len(wrong)}: {describe_error(wrong[0])}" if wrong else ""), flush=True)
            save(args.json, records)
    print(f"{len(records)} points in {time.perf_counter() - start:.0f} s"
          + (f"; {len(skipped)} not timed (out of GPU memory): {', '.join(skipped)}" if skipped else ""))
    return 1 if any(best_and_wrong(r["configs"])[1] for r in records) or skipped else 0


def best_and_wrong(configs: list[dict]) -> tuple[dict | None, list[dict]]:
    """The fastest timed configuration of a point, and those whose result was wrong (not those that raised: a launch
    the GPU refuses)."""
    best = max((c for c in configs if "gbps" in c), key=lambda c: c["gbps"], default=None)
    return best, [c for c in configs if "error" in c and "raised" not in c["error"]]


def save(path: str | None, records: list[dict]) -> None:
    """Every measurement so far as JSON (after every point: a run cut short keeps what it measured)."""
    if path:
        with open(path, "w") as f:
            json.dump(records, f, indent=1)


def describe_error(c: dict) -> str:
    return f"{label(c)} c{c['cluster']} p={c['persistent']}: {c['error']}"


if __name__ == "__main__":
    sys.exit(main())
