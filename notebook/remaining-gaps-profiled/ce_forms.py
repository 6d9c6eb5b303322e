"""The cross-entropy Triton kernel's gradient (pass 2, triton_kernels/cross_entropy.py) in several forms, timed
against each other in one process: interleaved rounds, the L2 flushed before every call (lab.bench.time_rounds).

Each form replaces the body of the checkout's _gradient (which picks a form by the logits' dtype) in a copy of the
kernel's source; every form is first checked against the checkout's kernel (dlogits within 2 ulps of the dtype, NaN
where it has NaN; a form that differs stops the run before anything is timed), then the kernels alone are launched
as the wrapper launches them (one program a row, its launch_config), with the default options (the mean, no
smoothing, no z-loss: the scalars that fold them are zeros).

    python notebook/remaining-gaps-profiled/ce_forms.py [--shapes 4096x32000,4096x128256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from lab import bench  # noqa: E402
from triton_kernels.looped import launch_config  # noqa: E402

SOURCE = ROOT / "triton_kernels" / "cross_entropy.py"
BODY = "    if FOLD:\n"  # the checkout's _gradient from here to its "    return g": the form by the logits' dtype
FORMS = {  # each form's g from _gradient's arguments; "checkout": the body as it is
    "checkout": None,
    "fold": "g = tl.where(is_target, g_y, e_scale * fast_exp(z - row_max) - w_scale * w)",
    "terms": "p = fast_exp(z - row_max) * inv_s; g = y_scale * (p - tl.where(is_target, 1.0, 0.0)) "
             "+ w_scale * (sum_w * p - w) + z_scale * p",
    "old": "g = e_scale * fast_exp(z - row_max) - tl.where(is_target, y_scale, 0.0) - w_scale * w",
    # old's expression with the target's own terms at the target: fold's values, another expression of them
    "old_fixed": "g = tl.where(is_target, g_y, e_scale * fast_exp(z - row_max) - tl.where(is_target, y_scale, 0.0) "
                 "- w_scale * w)",
}


def kernel_of(form: str, folder: Path):
    """cross_entropy_kernel of a copy of the module's source with the form's g in _gradient."""
    src = SOURCE.read_text()
    start = src.find(BODY, src.find("def _gradient("))
    end = src.find("    return g\n", start)
    if "def _gradient(" not in src or start < 0 or end < 0:
        sys.exit("ce_forms: the checkout's kernel has no _gradient with an `if FOLD:` body: the forms are of another "
                 "version")
    if FORMS[form] is not None:
        src = src[:start] + f"    {FORMS[form]}\n" + src[end:]
    start, end = src.index("@triton.jit\ndef _capped"), src.index("def check_inputs")
    path = folder / f"ce_form_{form}.py"
    path.write_text("import triton\nimport triton.language as tl\nfrom triton_kernels.common import fast_exp\n"
                    + src[start:end])
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cross_entropy_kernel


def launch(kernel, x, target, scale, loss_rows, dx):
    rows, vocab = x.shape
    block, warps = launch_config(vocab, x.element_size())
    kernel[(rows,)](x, target, x, scale, loss_rows, dx, x.stride(0), dx.stride(0), rows, vocab, -100, 0.0, 0.0, 1.0,
                    BLOCK=block, WHOLE_ROW=False, HAS_WEIGHT=False, SOFTCAP=False, WRITE_GRAD=True, num_warps=warps)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="4096x32000,4096x128256")
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU under TRITON_INTERPRET=1: a smoke test
    with tempfile.TemporaryDirectory() as folder:
        kernels = {form: kernel_of(form, Path(folder)) for form in FORMS}
        for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
            for shape in args.shapes.split(","):
                rows, vocab = map(int, shape.split("x"))
                x = (torch.randn(rows, vocab, device=device) * 3).to(dtype)
                target = torch.randint(0, vocab, (rows,), device=device)
                scale = torch.full((1,), 1.0 / rows, device=device)
                outs = {f: (torch.empty(rows, device=device), torch.empty_like(x)) for f in FORMS}
                for form, kernel in kernels.items():
                    launch(kernel, x, target, scale, *outs[form])
                ref_dx = outs["checkout"][1].float()
                tol = 2 * torch.finfo(dtype).eps * ref_dx.abs().clamp_min(1e-30)
                for form, (_, dx) in outs.items():  # NaN where the checkout has none (or the other way) differs
                    close = ((dx.float() - ref_dx).abs() <= tol) | (dx.float().isnan() & ref_dx.isnan())
                    if not close.all():
                        sys.exit(f"ce_forms: {form} differs from the checkout's kernel at {dtype} {shape} "
                                 f"({int((~close).sum())} elements of dlogits past 2 ulps): not timed")
                calls = {f: (lambda k=kernels[f], o=outs[f]: launch(k, x, target, scale, *o)) for f in FORMS}
                timings = bench.time_rounds(calls, x.device, rounds=args.rounds)
                gb = 2 * x.numel() * x.element_size() / 1e9  # read the logits (once, as the lab counts), write dx
                base = timings["old"].median_ms
                print(f"{str(dtype).removeprefix('torch.'):9} {shape:12}", "  ".join(
                    f"{f} {t.median_ms * 1000:7.1f} us {gb / t.median_ms * 1e3:6.0f} GB/s ({base / t.median_ms:.3f}x old)"
                    for f, t in timings.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
