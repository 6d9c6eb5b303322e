"""Which row shape should the softmax backward's register_cached take at each length: its table's, or twice the
threads per row with half the elements each? Times both (torch.ops.lab_tune.softmax_backward_register_cached, with
twice_the_threads False and True), in interleaved rounds on one GPU (lab.bench.time_rounds, L2 flushed), at every
length the kernel takes (32 to 16384) with the tutorial sweep's 4096 rows and the fixed sweep's 2^26 / N, in
float32, bfloat16 and float16. Each is checked against the float64 reference first. GB/s = 3 * M * N * itemsize /
time (2R + 1W).

    python notebook/backward-register-cached-shapes/measure.py [--json FILE]
"""

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import lab  # noqa: E402,F401  (loads torch.ops.lab_tune)
from lab import bench, inputs  # noqa: E402

LENGTHS = (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
MODES = {"table": False, "twice": True}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    op = torch.ops.lab_tune.softmax_backward_register_cached
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}")
    records = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in LENGTHS:
            for m in sorted({inputs.TUTORIAL_M, inputs.FIXED_ELEMENTS // n}):
                g = torch.Generator(device="cuda").manual_seed(n)
                y = torch.softmax(torch.randn(m, n, device="cuda", generator=g), -1).to(dtype)
                dy = torch.randn(m, n, device="cuda", generator=g).to(dtype)
                yd, dyd = y.double(), dy.double()
                want = yd * (dyd - (yd * dyd).sum(-1, keepdim=True))
                calls = {}
                for name, mode in MODES.items():
                    try:
                        got = op(y, dy, mode)
                    except RuntimeError as e:  # no shape of twice the threads at this length
                        print(f"  {dtype} {m}x{n} {name}: {str(e).splitlines()[0]}")
                        continue
                    err = (got.double() - want).abs().max().item()
                    tol = 4 * torch.finfo(dtype).eps * max(want.abs().max().item(), 1e-30)
                    if not err <= tol:
                        sys.exit(f"{dtype} {m}x{n} {name}: max error {err:.3g} over {tol:.3g}")
                    calls[name] = lambda mode=mode, y=y, dy=dy: op(y, dy, mode)
                timings = bench.time_rounds(calls, torch.device("cuda"))
                moved = 3 * m * n * y.element_size()
                rec = {"dtype": str(dtype).removeprefix("torch."), "m": m, "n": n,
                       **{k: round(bench.gbps(moved, t.median_ms), 1) for k, t in timings.items()}}
                records.append(rec)
                print(" ".join(f"{k}={v}" for k, v in rec.items()), flush=True)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))


if __name__ == "__main__":
    main()
