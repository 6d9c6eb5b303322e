"""Measure every launch of the cross-entropy cluster kernel, computing the loss alone or (--grad) the loss and its
gradient, to choose its launch tables.

For each dtype and each point of the cross_entropy operator's vocab sweep (or the --shape points), every resident
CTA shape compiled for the kernel (torch.ops.lab_tune.cross_entropy_shapes) is tried with every cluster size whose
slice fits the shape's registers and fills at least a quarter of them (scripts/tune/tune_cluster.py's candidates),
on a persistent grid and one cluster per row, without a stagger; the fastest --staggered configurations are timed
again with each of STAGGERS. Each configuration's loss per row (and, with --grad, the gradient of their sum) is
checked against float64 before it is timed (median of do_bench, L2 flushed). The kernel alone: no targets' step, no
reduction. Prints, per point, the best configuration and the kernel's table's (torch.ops.lab_tune.cross_entropy_plan),
in percent of a copy of the same bytes (the loss alone: M * V * itemsize, half read and half written; with the
gradient: twice that, the logits read and dlogits written); writes every measurement as JSON.

    python scripts/tune/tune_cross_entropy_cluster.py [--grad] [--dtype bfloat16] [--shape 4096x50257 ...]
        [--json tune.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

# the checkout (lab) and scripts/tune (tune_cluster), wherever this runs from
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parent)]
from tune_cluster import DTYPES, best_and_wrong, candidates, describe, describe_error, save  # noqa: E402

from lab import bench, check, inputs  # noqa: E402
from lab.backends.cuda_variants import cluster_shapes, load_extension  # noqa: E402
from lab.dispatch import pack_elements  # noqa: E402
from lab.operators.cross_entropy import CROSS_ENTROPY, CROSS_ENTROPY_LOSS, CrossEntropyOptions  # noqa: E402
from lab.registry import dtype_name  # noqa: E402

STAGGERS = ((4, 500), (6, 1000))  # (groups, ns): the staggers softmax's tables use
PER_ROW = CrossEntropyOptions(reduction="none")  # the kernel's output: the loss per row
REP_MS = 30.0


def measure_point(shape: inputs.Shape, dtype: torch.dtype, staggered: int, grad: bool = False) -> dict:
    """Every candidate launch at one point, checked then timed, and the table's own."""
    tuned = torch.ops.lab_tune.cross_entropy
    op = CROSS_ENTROPY if grad else CROSS_ENTROPY_LOSS
    logits, target, _ = op.make_inputs(shape, dtype, "cuda", 0, PER_ROW)
    ref = op.reference(logits, target, PER_ROW)
    nbytes = op.bytes_moved(shape, dtype)
    copy = bench.gbps(nbytes, bench.copy_ceiling(nbytes, logits.device).median_ms)
    pack = pack_elements(dtype)
    shifted = shape.n % pack != 0 or shape.stride % pack != 0
    shapes = cluster_shapes()
    compiled = sorted(torch.ops.lab_tune.cross_entropy_shapes(dtype))
    plan = list(torch.ops.lab_tune.cross_entropy_plan(shape.n, dtype, shape.m, not shifted, grad))
    row = {"dtype": dtype_name(dtype), "m": shape.m, "n": shape.n, "grad": grad, "copy_gbps": copy, "plan": plan,
           "configs": []}
    dlogits = torch.empty_like(logits) if grad else None

    def timed(shape_index: int, cluster: int, persistent: bool, stagger: tuple[int, int]) -> None:
        s = shapes[shape_index]
        cfg = {"shape": shape_index, "threads": s.threads, "elems": s.elems, "stages": s.stages,
               "packed": s.packed, "one_row": s.one_row, "cluster": cluster, "persistent": persistent,
               "stagger": list(stagger)}
        row["configs"].append(cfg)

        def run(x, t, _options):
            loss = tuned(x, t, shape_index, cluster, persistent, *stagger, dlogits=dlogits)
            return (loss,) if dlogits is None else (loss, dlogits)

        if dlogits is not None:  # shared by the configurations: one that writes nothing must not pass on another's
            dlogits.fill_(float("nan"))
        res = check.check(run, (logits, target, PER_ROW), False, ref, None, op)
        if not res.ok:
            cfg["error"] = res.summary()
            return
        t = bench.time_gpu(lambda: run(logits, target, PER_ROW), rep_ms=REP_MS)
        cfg["gbps"] = bench.gbps(nbytes, t.median_ms)
        cfg["pct_copy"] = 100 * cfg["gbps"] / copy

    # candidates indexes the list it is given, the compiled shapes: back to the shapes' indices
    for j, c in candidates(shape.n, dtype, [shapes[i] for i in compiled], "all", shifted):
        i = compiled[j]
        for persistent in (False, True):
            if shapes[i].launches(persistent):
                timed(i, c, persistent, (1, 0))
    ranked = sorted((c for c in row["configs"] if "gbps" in c), key=lambda c: -c["gbps"])
    for c in ranked[:staggered]:
        if c["cluster"] > 1:
            for stagger in STAGGERS:
                timed(c["shape"], c["cluster"], c["persistent"], stagger)
    if plan[0] >= 0:
        timed(plan[0], plan[1], bool(plan[2]), (plan[3], plan[4]))
        row["planned"] = row["configs"][-1]
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--grad", action="store_true", help="the loss and its gradient (the kernel lab.cross_entropy runs "
                   "in training), not the loss alone")
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES))
    p.add_argument("--shape", type=inputs.Shape.parse, action="append",
                   help="MxN (repeatable): time these shapes instead of the vocab sweep's points")
    p.add_argument("--staggered", type=int, default=3,
                   help="time the fastest N configurations again with each stagger (those of more than one CTA a "
                        "row: a single CTA is never staggered)")
    p.add_argument("--json", help="write every measurement here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("tune_cross_entropy_cluster: needs a CUDA GPU")
    load_extension()
    records = []
    start = time.perf_counter()
    for dtype in [DTYPES[d] for d in (args.dtype or ["float32", "bfloat16"])]:
        for shape in args.shape or CROSS_ENTROPY_LOSS.sweeps["vocab"]:
            row = measure_point(shape, dtype, args.staggered, args.grad)
            records.append(row)
            best, wrong = best_and_wrong(row["configs"])
            print(f"{dtype_name(dtype):<8} {shape.label:<12} best {describe(best):<27}"
                  f"{'' if best is None else ' s' + str(best['stagger']):<12} "
                  f"plan {describe(row.get('planned')):<27}"
                  + (f"  WRONG x{len(wrong)}: {describe_error(wrong[0])}" if wrong else ""), flush=True)
            save(args.json, records)
    print(f"{len(records)} points in {time.perf_counter() - start:.0f} s")
    return 1 if any(best_and_wrong(r["configs"])[1] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
