"""How cuda.cluster's share of a copy grows with the number of rows at one row length: a fixed cost per
launch (the first rows all read before anything is written, the last ones draining) shows as a share that
climbs with M; a tail of resident clusters (rows not a multiple of the clusters resident at once) would
show as a sawtooth.

    python notebook/studies/cluster_rows.py [--n 262144] [--dtype bfloat16] [--m 128,144,...] [--config 20:16 ...]

At each M: the launch table's choice at the first M (cluster_plan: its shape and cluster size) on one
cluster per row and on a persistent grid (the plan's own grid is marked *), both with the plan's first-wave
stagger, the plan's own grid again without it where the plan has one, and each --config SHAPE:CLUSTER
(indices into cuda.cluster's resident shapes, one cluster per row, no stagger), each checked against
float64 at the first M, then timed in one stretch each (do_bench's median, L2 flushed), as % of a copy
of the same bytes timed the same way. Ends with the least-squares line time = a + b * M of each and of
the copy: a is the fixed cost of a launch (us), b the time of one more row. Row lengths whose plan is
the streaming path (past 16 CTAs x the largest resident shape) are refused: it has no resident shape.
"""

from __future__ import annotations

import argparse
import sys

import torch

from lab import bench, check, inputs
from lab.backends.cuda_variants import load_extension
from lab.operators.softmax import SOFTMAX
from lab.registry import ALL_DTYPES, dtype_name

DTYPES = {dtype_name(d): d for d in ALL_DTYPES}


def fit(ms: list[int], us: list[float]) -> tuple[float, float]:
    """Least-squares (a, b) of us = a + b * m."""
    n, mx, my = len(ms), sum(ms) / len(ms), sum(us) / len(us)
    sxx = sum((m - mx) ** 2 for m in ms)
    b = sum((m - mx) * (u - my) for m, u in zip(ms, us, strict=True)) / sxx if n > 1 and sxx else 0.0
    return my - b * mx, b


def parse_config(text: str) -> tuple[int, int]:
    try:
        shape, cluster = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--config takes SHAPE:CLUSTER, e.g. 20:16; got {text!r}") from None
    return shape, cluster


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=262144)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--m", default=",".join(str(m) for m in range(128, 529, 16)), help="comma-separated row counts")
    p.add_argument("--config", type=parse_config, action="append", default=[], help="SHAPE:CLUSTER (repeatable)")
    args = p.parse_args(argv)
    try:
        ms = [int(v) for v in args.m.split(",")]
    except ValueError:
        sys.exit(f"cluster_rows: --m takes comma-separated whole numbers; got {args.m!r}")
    if not ms or min(ms) < 1 or args.n < 1:
        sys.exit("cluster_rows: --m and --n must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("cluster_rows: needs a CUDA GPU")
    load_extension()
    dtype, tuned = DTYPES[args.dtype], torch.ops.lab_tune.cluster
    shape, cluster, persistent, groups, step_ns = torch.ops.lab_tune.cluster_plan(args.n, dtype, ms[0])
    if shape < 0:
        sys.exit(f"cluster_rows: N = {args.n} takes cuda.cluster's streaming path, which has no resident shape")
    configs = [(shape, cluster, False, groups, step_ns, "plan" + ("" if persistent else "*")),
               (shape, cluster, True, groups, step_ns, "plan, persistent" + ("*" if persistent else ""))]
    if groups > 1 and step_ns > 0:  # the plan's first-wave stagger, and the same launch without it
        configs.append((shape, cluster, bool(persistent), 1, 0, "plan, no stagger"))
    configs += [(s, c, False, 1, 0, f"{s}:{c}") for s, c in args.config]
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, N = {args.n}; % of a copy of the same bytes")
    times: dict[str, list[float]] = {label: [] for *_, label in configs} | {"copy": []}
    for k, m in enumerate(ms):
        x = inputs.make_input(inputs.Shape(m, args.n), dtype, "cuda")
        nbytes = SOFTMAX.bytes_moved(inputs.Shape(m, args.n), dtype)
        copy = bench.copy_ceiling(nbytes, x.device)
        times["copy"].append(copy.median_ms * 1e3)
        cells = []
        for s, c, persistent, g, ns, label in configs:
            def run(t, s=s, c=c, persistent=persistent, g=g, ns=ns):
                return tuned(t, s, c, persistent, g, ns)
            if k == 0 and not (res := check.check(run, x, False, SOFTMAX.reference(x))).ok:
                sys.exit(f"cluster_rows: {label} (shape {s}, cluster {c}) failed the check: {res.summary()}")
            t = bench.time_gpu(lambda run=run, x=x: run(x))
            times[label].append(t.median_ms * 1e3)
            cells.append(f"{label} {100 * copy.median_ms / t.median_ms:5.1f}%")
        print(f"M = {m:5d}  copy {bench.gbps(nbytes, copy.median_ms):5.0f} GB/s  " + "  ".join(cells), flush=True)
        del x
    for label, us in times.items():
        a, b = fit(ms, us)
        print(f"{label:<18} time = {a:6.2f} us + {b:.4f} us x M")
    return 0


if __name__ == "__main__":
    sys.exit(main())
