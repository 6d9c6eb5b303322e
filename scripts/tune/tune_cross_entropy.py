"""Times launches of the Triton cross-entropy kernel (triton_kernels/cross_entropy.py) beside a copy of the same
bytes and the default launch, at the vocabularies of real models: the grid (one program per row, or a persistent
grid of a few programs per SM looping over rows), the warps and the chunk (looped), and the whole row in one
program (fused) past its limit. Each launch is checked against the default's loss and gradient first.

    python scripts/tune/tune_cross_entropy.py [--rows 4096] [--json tune.json]

Prints GB/s (2*M*V*itemsize / median time) and percent of the same-run copy per launch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lab import bench  # noqa: E402
from lab.inputs import Shape  # noqa: E402
from lab.operators.cross_entropy import DEFAULT, make_inputs  # noqa: E402
from triton_kernels import cross_entropy as ce  # noqa: E402


def launches(vocab: int, sms: int) -> dict[str, tuple[bool, tuple[int, int, int] | None]]:
    """name -> (whole_row, (block, warps, programs) or None for the default)."""
    out: dict[str, tuple[bool, tuple[int, int, int] | None]] = {"looped default": (False, None)}
    for per_sm in (1, 2, 4):
        for warps in (16, 32):
            for block in (4096, 8192, 16384):
                out[f"looped {per_sm}/SM w{warps} b{block}"] = (False, (block, warps, per_sm * sms))
    if vocab <= 65536:
        block = triton.next_power_of_2(vocab)
        for warps in (16, 32):
            out[f"fused w{warps}"] = (True, (block, warps, 1 << 30))
            out[f"fused 2/SM w{warps}"] = (True, (block, warps, 2 * sms))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--vocab", type=int, nargs="+", default=[32000, 50257, 128256, 256000])
    p.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    p.add_argument("--rep", type=float, default=40.0)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    device = torch.device("cuda")
    records = []
    for dtype_name in args.dtype:
        dtype = getattr(torch, dtype_name)
        for vocab in args.vocab:
            logits, target, _ = make_inputs(Shape(args.rows, vocab), dtype, "cuda", 0)
            nbytes = 2 * logits.numel() * logits.element_size()
            calls, want = {}, None
            for name, (whole_row, config) in launches(vocab, sms).items():
                def call(whole_row=whole_row, config=config, logits=logits, target=target):
                    dx = torch.empty_like(logits)
                    return ce._run(logits, target, None, DEFAULT.ignore_index, "mean", 0.0, 0.0, None, dx,
                                   whole_row, config=config), dx
                try:
                    got = call()
                    torch.cuda.synchronize()
                except Exception as e:  # a launch that cannot compile (registers, shared memory) is reported
                    print(f"{dtype_name} {args.rows}x{vocab} {name}: {type(e).__name__}: {str(e)[:120]}")
                    continue
                if want is None:
                    want = got
                elif not (torch.allclose(got[0], want[0], rtol=1e-4)
                          and torch.allclose(got[1].float(), want[1].float(), rtol=1e-2, atol=1e-6)):
                    print(f"{dtype_name} {args.rows}x{vocab} {name}: differs from the default launch")
                    continue
                calls[name] = call
            calls["copy"] = bench.copy_call(nbytes, device)
            timings = bench.time_rounds(calls, device, rep_ms=args.rep, rounds=3, host_check=False)
            copy = bench.gbps(nbytes, timings["copy"].median_ms)
            ranked = sorted(((bench.gbps(nbytes, t.median_ms), n) for n, t in timings.items() if n != "copy"),
                            reverse=True)
            print(f"\n{dtype_name} {args.rows}x{vocab}: copy {copy:.0f} GB/s")
            for gbps, name in ranked:
                print(f"  {name:<28} {gbps:7.0f} GB/s {100 * gbps / copy:5.1f}% of copy")
                records.append(dict(dtype=dtype_name, m=args.rows, v=vocab, launch=name, gbps=gbps, copy_gbps=copy))
    if args.json:
        args.json.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), records=records), indent=1))


if __name__ == "__main__":
    main()
