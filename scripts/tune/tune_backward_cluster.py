"""Measure every launch of softmax_backward's cuda.cluster at the backward sweeps' row lengths, to choose its table.

For each dtype and each row length of the fixed and tutorial sweeps from --min-n (at the sweep's M), every CTA
shape of csrc/softmax_backward/cluster.cu (threads, packs of y and of dy per thread, dy in registers or shared
memory) is tried with every cluster size whose slice fits the shape's packs and fills at least a quarter of them, on
a persistent grid and with one cluster per row. Each configuration is checked against float64 before it is timed
(median of do_bench, L2 flushed, each configuration in one stretch). Prints, per point, the best configuration, the
table's own choice (softmax_backward_cluster_plan) and, for scale, cuda.two_pass and cuda.register_cached where it
runs; writes every measurement as JSON.

    python scripts/tune/tune_backward_cluster.py [--dtype bfloat16 ...] [--min-n 1024] [--json tune.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[2])]  # the checkout, wherever this runs from
from lab import bench, check, inputs  # noqa: E402
from lab.backends.cuda_variants import backward_cluster_shapes, load_extension  # noqa: E402
from lab.dispatch import pack_elements  # noqa: E402
from lab.operators.softmax_backward import SOFTMAX_BACKWARD, make_inputs  # noqa: E402
from lab.registry import ALL_DTYPES, dtype_name  # noqa: E402

CLUSTERS = (1, 2, 3, 4, 6, 8, 12, 16)
TWO_PASS = -1  # torch.ops.lab_tune.softmax_backward_cluster's shape for two_pass (kStreamingShape)
DTYPES = {dtype_name(d): d for d in ALL_DTYPES}


def candidates(n: int, dtype: torch.dtype, table: list[tuple[int, int, int]]):
    """(shape index, cluster) pairs whose slice fits the shape's registers and fills at least a quarter of them."""
    pack = pack_elements(dtype)
    for i, (threads, packs, _) in enumerate(table):
        for c in CLUSTERS:
            slice_packs = math.ceil(math.ceil(n / pack) / c)
            if slice_packs <= threads * packs and 4 * slice_packs >= threads * packs:
                yield i, c


def measure_point(sweep: str, shape: inputs.Shape, dtype: torch.dtype, table: list[tuple[int, int, int]]) -> dict:
    tuned = torch.ops.lab_tune.softmax_backward_cluster
    y, dy = make_inputs(shape, dtype, "cuda", 0)
    y, dy = y.contiguous(), dy.contiguous()
    ref = SOFTMAX_BACKWARD.reference(y, dy)
    nbytes = SOFTMAX_BACKWARD.bytes_moved(shape, dtype)
    copy = bench.gbps(nbytes, bench.copy_ceiling(nbytes, y.device).median_ms)
    row = {"sweep": sweep, "dtype": dtype_name(dtype), "m": shape.m, "n": shape.n, "copy_gbps": copy,
           "plan": list(torch.ops.lab_tune.softmax_backward_cluster_plan(shape.n, dtype)), "configs": []}
    for i, c in candidates(shape.n, dtype, table):
        for persistent in (True, False):
            cfg = {"shape": i, "threads": table[i][0], "packs": table[i][1], "dy_shared": bool(table[i][2]),
                   "cluster": c, "persistent": persistent}
            row["configs"].append(cfg)

            def run(a, b, i=i, c=c, p=persistent):
                return tuned(a, b, i, c, p)

            res = check.check(run, (y, dy), False, ref, op=SOFTMAX_BACKWARD)
            if not res.ok:
                cfg["error"] = res.summary()
                continue
            t = bench.time_gpu(lambda run=run: run(y, dy), rep_ms=50)
            cfg["pct_copy"] = 100 * bench.gbps(nbytes, t.median_ms) / copy
    refs = {"cuda.cluster": lambda: torch.ops.lab.softmax_backward_cluster(y, dy),
            "cuda.two_pass": lambda: torch.ops.lab.softmax_backward_two_pass(y, dy)}
    if shape.n <= 16384:
        refs["cuda.register_cached"] = lambda: torch.ops.lab.softmax_backward_register_cached(y, dy)
    for name, fn in refs.items():
        row[name] = 100 * bench.gbps(nbytes, bench.time_gpu(fn, rep_ms=50).median_ms) / copy
    return row


def describe(cfg: dict | None) -> str:
    if cfg is None:
        return "-"
    grid = "p" if cfg["persistent"] else "n"
    held = "s" if cfg.get("dy_shared") else ""  # s: dy in shared memory
    return f"{cfg['threads']}x{cfg['packs']}{held} c{cfg['cluster']}{grid} {cfg['pct_copy']:.1f}%"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES), help="repeatable; default: all three")
    p.add_argument("--min-n", type=int, default=1024)
    p.add_argument("--json", type=Path, help="write every measurement here")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("tune_backward_cluster: needs a CUDA GPU")
    load_extension()
    table = backward_cluster_shapes()
    rows = []
    for name in args.dtype or [dtype_name(d) for d in ALL_DTYPES]:
        dtype = DTYPES[name]
        for sweep in ("fixed", "tutorial"):
            for shape in inputs.SWEEPS[sweep]:
                if shape.n < args.min_n:
                    continue
                row = measure_point(sweep, shape, dtype, table)
                rows.append(row)
                timed = [c for c in row["configs"] if "pct_copy" in c]
                best = max(timed, key=lambda c: c["pct_copy"], default=None)
                errors = [c for c in row["configs"] if "error" in c]
                refs = "  ".join(f"{k} {row[k]:.1f}%" for k in ("cuda.cluster", "cuda.two_pass", "cuda.register_cached")
                                 if k in row)
                print(f"{name:9s} {sweep:8s} {shape.m}x{shape.n}: best {describe(best)}  plan {row['plan']}  {refs}"
                      + (f"  ({len(errors)} failed: {errors[0]['error']})" if errors else ""), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
