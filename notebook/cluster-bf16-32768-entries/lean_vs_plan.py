"""cluster.cu's lean kernel (cluster_lean_softmax_kernel: float32 registers, one exponential per element, one
cluster per row) at every lean shape and cluster size that splits the row exactly, against cuda.cluster as built
(the launch table's choice), QuACK where installed, and a copy of the same bytes, in the same interleaved rounds
(7 rounds; the L2 flushed before every call). Each configuration is checked against float64 first; each lean one is
timed with no stagger and with the table entry's. EXTRA="INDEX:CLUSTER ..." adds resident shapes (by their index in
torch.ops.lab_tune.cluster_shapes) launched one cluster per row with the entry's stagger, where the slice fits
and fills a quarter of the shape or more; NO_LEAN=1 leaves the lean shapes out. The lean shapes exist only in the
build of the branch wip/cluster-lean (call1-3); on main's build, which has none, the script times the table, QuACK
and the EXTRA shapes (call4).

    PYTHONPATH=$PWD python notebook/cluster-bf16-32768-entries/lean_vs_plan.py bfloat16 4096x32768 1024x65536 ...
"""

import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "scripts"))
from interleave import checked_calls, interleaved_rounds, kernels_of, softmax_variants  # noqa: E402

from lab import bench, check, inputs  # noqa: E402
from lab.backends.cuda_variants import cluster_shapes, load_extension  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402


def main(argv: list[str]) -> int:
    if not torch.cuda.is_available():
        sys.exit("lean_vs_plan: needs a CUDA GPU")
    load_extension()
    dtype = getattr(torch, argv[0])
    names = ["cuda.cluster", "peer.quack"]
    by_name = softmax_variants(names, ",".join(names), "lean_vs_plan")
    kernels, unavailable = kernels_of(names, by_name)
    print("unavailable:", unavailable, flush=True)
    shapes = cluster_shapes()
    flush, _ = bench.flush_buffer(bench.FLUSH_MB)
    for label in argv[1:]:
        shape = inputs.Shape.parse(label)
        x = inputs.make_input(shape, dtype, "cuda")
        ref = SOFTMAX.reference(x)
        plan = list(torch.ops.lab_tune.cluster_plan(shape.n, dtype, shape.m))
        print(f"{argv[0]} {label}: plan {shapes[plan[0]].label() if plan[0] >= 0 else 'streaming'} "
              f"c{plan[1]} {'persistent' if plan[2] else 'one per row'} stagger {plan[3]}x{plan[4]} ns", flush=True)
        out = torch.empty_like(x)
        fns = {"copy": lambda x=x, out=out: out.copy_(x)}
        for i, s in enumerate(shapes):
            if not getattr(s, "lean", False) or shape.n % (s.threads * s.elems) or os.environ.get("NO_LEAN") == "1":
                continue
            c = shape.n // (s.threads * s.elems)
            if not 1 <= c <= 16:
                continue
            for groups, ns in {(1, 0), (plan[3], plan[4])}:
                def run(t, i=i, c=c, g=groups, ns=ns):
                    return torch.ops.lab_tune.cluster(t, i, c, False, g, ns)

                name = f"lean {s.label()} c{c}" + (f" stagger {groups}x{ns}" if groups > 1 else "")
                res = check.check(run, x, False, ref)
                if res.ok:
                    fns[name] = lambda x=x, run=run: run(x)
                else:
                    print(label, name, "WRONG", res.summary(), flush=True)
        for spec in os.environ.get("EXTRA", "").split():
            i, c = map(int, spec.split(":"))
            s = shapes[i]
            slice_elems = -(-shape.n // c)
            held = s.threads * s.elems
            if not s.runs(dtype) or getattr(s, "lean", False) or not held / 4 <= slice_elems <= held:
                continue

            def run(t, i=i, c=c, g=plan[3], ns=plan[4]):
                return torch.ops.lab_tune.cluster(t, i, c, False, g, ns)

            name = f"{s.label()} c{c}"
            res = check.check(run, x, False, ref)
            if res.ok:
                fns[name] = lambda x=x, run=run: run(x)
            else:
                print(label, name, "WRONG", res.summary(), flush=True)
        calls, skipped, failed = checked_calls(kernels, by_name, x, ref)
        fns.update(calls)
        if skipped or failed:
            print(label, "skipped", skipped, "failed", failed, flush=True)
        times = interleaved_rounds(fns, flush, 7, 50 if shape.m >= 1024 else 200)
        copy = statistics.median(times["copy"])
        for k, t in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
            m = statistics.median(t)
            print(f"{argv[0]} {label:11s} {k:34s} {m:8.2f} us ({min(t):7.2f}-{max(t):7.2f}) "
                  f"{100 * copy / m:5.1f}% of copy", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
