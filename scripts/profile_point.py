"""Run one variant on one shape a few times, for a profiler to watch (see scripts/profile.sh).

    python scripts/profile_point.py cuda.register_cached 131072x512 bfloat16 [--runs 3]
    python scripts/profile_point.py cluster:20:16:n 256x262144 bfloat16
    python scripts/profile_point.py --op softmax_backward cuda.register_cached 4096x512 bfloat16

A warm-up call and every other kernel (the inputs', the reference's) come before the profiled range
(cudaProfilerStart: ncu --profile-from-start off), which holds the runs alone; profile a later one (ncu --launch-skip).
After the range, every run is checked against the float64 reference.
`--flush-mb MB` runs each call as the lab's timing loop does (lab/bench.py): the L2 reset first, then a write of
an MB-sized buffer before every call, so that a profiler with its own cache control off
(ncu --cache-control none, scripts/profile.sh's PROFILE_CACHE=none) sees the L2 a timed call meets.
`cluster:SHAPE:CLUSTER:p|n` runs one launch configuration of cuda.cluster outside its plan, as
scripts/tune/tune_cluster.py times them: SHAPE an index of its resident shapes (tune_cluster.py's labels
list them), CLUSTER the CTAs per row, p a persistent grid, n one cluster per row. Every run is checked
against the float64 reference after the runs (a failure exits non-zero: the profile is of a wrong kernel).
"""

from __future__ import annotations

import argparse
import sys

import torch

from lab import bench, check, inputs, operators
from lab.registry import variants


def cluster_config(spec: str) -> tuple[int, int, bool]:
    """(shape index, cluster size, persistent) from 'cluster:SHAPE:CLUSTER:p|n'."""
    parts = spec.split(":")
    if len(parts) != 4 or parts[0] != "cluster" or parts[3] not in ("p", "n") \
            or not parts[1].isdigit() or not parts[2].isdigit() or not 1 <= int(parts[2]) <= 16:
        raise ValueError(f"expected cluster:SHAPE:CLUSTER:p|n (CLUSTER 1 to 16), got {spec!r}")
    return int(parts[1]), int(parts[2]), parts[3] == "p"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("variant", help="an exact variant name, e.g. cuda.register_cached, or cluster:SHAPE:CLUSTER:p|n")
    p.add_argument("shape", type=inputs.Shape.parse, help="MxN or MxN/STRIDE")
    p.add_argument("dtype", choices=("float32", "float16", "bfloat16"))
    p.add_argument("--op", default="softmax", choices=operators.operators(),
                   help="the operator whose variant runs, on its own inputs (default softmax)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--flush-mb", type=int, default=0, metavar="MB",
                   help="write an MB-sized buffer before every call, after the lab's L2 reset (0: no flush)")
    args = p.parse_args(argv)
    if args.flush_mb < 0:
        sys.exit(f"profile_point: --flush-mb must be 0 or more, got {args.flush_mb}")
    op = operators.get(args.op)
    writes_out = False
    if args.variant.startswith("cluster:"):
        if args.op != "softmax":
            sys.exit("profile_point: cluster:SHAPE:CLUSTER:p|n runs softmax's cluster kernel (--op softmax)")
        try:
            shape, cluster, persistent = cluster_config(args.variant)
        except ValueError as e:
            sys.exit(f"profile_point: {e}")
        if not torch.cuda.is_available():
            sys.exit("profile_point: needs a CUDA GPU")

        def kernel(t: torch.Tensor) -> torch.Tensor:
            return torch.ops.lab_tune.cluster(t, shape, cluster, persistent)
    else:
        found = [v for v in variants(args.op) if v.name == args.variant]
        if not found:
            sys.exit(f"profile_point: {args.op} has no variant named {args.variant!r}; "
                     f"see python -m lab.test --op {args.op} --list")
        kernel, writes_out = found[0].kernel(), found[0].writes_out
    dtype = getattr(torch, args.dtype)
    case = (inputs.make_input(args.shape, dtype, "cuda"),) if args.op == "softmax" \
        else tuple(op.make_inputs(args.shape, dtype, "cuda", 0))
    spec = check.output_spec(op, op.reference(*case), dtype)
    call = bench.timed_call(kernel, case, writes_out, lambda: spec.empty(case[0].device))
    # A warm-up call (compiled: torch.compile's autotuning launches its kernels too), the inputs' and the reference's
    # kernels (PyTorch's softmax among them, which a name filter could catch) all before the profiled range.
    call()
    flush = None
    if args.flush_mb:
        flush, _ = bench.flush_buffer(args.flush_mb)
        bench.l2_reset(flush)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()  # the range that ncu --profile-from-start off watches: the runs alone
    for _ in range(args.runs):
        if flush is not None:
            flush.zero_()
        call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    res = check.check(kernel, case, writes_out, op=op)
    if not res.ok:
        sys.exit(f"profile_point: {args.variant} failed the check at {args.shape.label}: {res.summary()}; "
                 "the profile is of a wrong kernel")
    return 0


if __name__ == "__main__":
    sys.exit(main())
