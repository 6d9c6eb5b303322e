"""bfloat16 rows of cluster.cu's 32768 entry: cuda.cluster as built against the entry's old configuration (512 x 64
packed on 1 CTA, one cluster per row: torch.ops.lab_tune.cluster(x, 26, 1, False)), QuACK where installed, and a
copy of the same bytes, in the same interleaved rounds, each checked against float64 first.

    PYTHONPATH=$PWD python notebook/cluster-bf16-32768-entries/entry32768.py 4096x32768 1024x28672 ...
"""

import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "scripts"))
from interleave import checked_calls, interleaved_rounds, kernels_of, softmax_variants  # noqa: E402

from lab import bench, check, inputs  # noqa: E402
from lab.backends.cuda_variants import load_extension  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402

OLD = "old entry 512x64P x1"


def main(shapes: list[str]) -> int:
    if not torch.cuda.is_available():
        sys.exit("entry32768: needs a CUDA GPU")
    load_extension()
    names = ["cuda.cluster", "peer.quack"]
    by_name = softmax_variants(names, ",".join(names), "entry32768")
    kernels, unavailable = kernels_of(names, by_name)
    print("unavailable:", unavailable, "plan 32768:", list(torch.ops.lab_tune.cluster_plan(32768, torch.bfloat16)))
    flush, _ = bench.flush_buffer(bench.FLUSH_MB)
    for label in shapes:
        shape = inputs.Shape.parse(label)
        x = inputs.make_input(shape, torch.bfloat16, "cuda")
        ref = SOFTMAX.reference(x)
        out = torch.empty_like(x)
        fns = {"copy": lambda x=x, out=out: out.copy_(x)}

        def old(x=x):
            return torch.ops.lab_tune.cluster(x, 26, 1, False)

        res = check.check(lambda t, old=old: old(), x, False, ref)
        if res.ok:
            fns[OLD] = old
        else:
            print(label, "old entry WRONG", res.summary())
        calls, skipped, failed = checked_calls(kernels, by_name, x, ref)
        fns.update(calls)
        if skipped or failed:
            print(label, "skipped", skipped, "failed", failed)
        times = interleaved_rounds(fns, flush, 7, 50 if shape.m >= 1024 else 200)
        copy = statistics.median(times["copy"])
        for k, t in sorted(times.items(), key=lambda kv: statistics.median(kv[1])):
            m = statistics.median(t)
            print(f"bfloat16 {label:11s} {k:24s} {m:8.2f} us ({min(t):7.2f}-{max(t):7.2f}) "
                  f"{100 * copy / m:5.1f}% of copy", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
