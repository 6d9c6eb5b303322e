"""Where the float32 loss of the linear cross-entropy's fuzz mismatches comes from: the logits' matmul, the loss's
kernel, or the reduction. For each case (python -m lab.fuzz --op linear_cross_entropy --max-elements 4194304
--max-n 8192, seed 0): the logits of one cuBLAS matmul against float64's (their largest error over the row's
largest |x| . |w|), each row's loss by lab.cross_entropy on logits exact to float32 against float64's, its mean
with the gradient (the kernel's own reduction, as one chunk of the head takes it), and lab.linear_cross_entropy's
loss three times without the gradient and three times with it (the training path), against the float64 reference.

    python notebook/linear-cross-entropy-fuzz-mismatches/diagnose.py 71082 71255 71484 71589
"""

import sys

import torch

from lab import fuzz, losses
from lab.operators import cross_entropy, linear_cross_entropy

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU with TRITON_INTERPRET=1

for index in map(int, sys.argv[1:]):
    case = next(fuzz.cases(0, 1, fuzz.lengths([], 8192), 4194304, 8192, index, 0, fuzz.HEAD_KINDS))
    x, w, t, b, o = fuzz.head_inputs(case, fuzz.make(case, DEVICE), 4194304)
    print(f"== {case.describe()}: V {w.shape[0]}, bias {b is not None}, {o}")
    exact = x.double() @ w.double().t() + (b.double() if b is not None else 0.0)
    scale = (x.double().abs() @ w.double().abs().t()).amax(-1, keepdim=True)
    mm = torch.nn.functional.linear(x, w, b)
    print(f"  logits: largest error {((mm.double() - exact).abs() / scale).max().item():.2e} of the row's "
          f"largest |x|.|w| (float32's eps: {torch.finfo(torch.float32).eps:.2e})")
    rows = cross_entropy.loss_of(exact, t, linear_cross_entropy._per_chunk(o))
    kernel = losses.cross_entropy(exact.float(), t, ignore_index=o.ignore_index, reduction="none",
                                  label_smoothing=o.label_smoothing, z_loss=o.z_loss, softcap=o.softcap)
    err = (kernel.double() - rows).abs()
    print(f"  rows' loss by the kernel on exact logits: largest error {err.max().item():.2e}, mean signed "
          f"{(kernel.double() - rows).mean().item():+.2e} (losses {rows.abs().mean().item():.3g})")
    mean = losses.cross_entropy(exact.float().requires_grad_(), t, ignore_index=o.ignore_index, reduction=o.reduction,
                                label_smoothing=o.label_smoothing, z_loss=o.z_loss, softcap=o.softcap)
    counted = int((t != o.ignore_index).sum())
    print(f"  the kernel's {o.reduction} with the gradient: {mean.item():.6f} against the rows' "
          f"{(rows.sum() / (counted if o.reduction == 'mean' else 1)).item():.6f}")
    ref = linear_cross_entropy.reference(x, w, t, b, o)[0]
    for with_grad in (False, True):
        got = [losses.linear_cross_entropy(x.detach().requires_grad_(with_grad), w, t, b, ignore_index=o.ignore_index,
                                           reduction=o.reduction, label_smoothing=o.label_smoothing,
                                           z_loss=o.z_loss, softcap=o.softcap).item() for _ in range(3)]
        print(f"  lab.linear_cross_entropy {'with' if with_grad else 'without'} the gradient: "
              f"{', '.join(f'{g:.6f}' for g in got)} against {ref.item():.6f} "
              f"(relative {max(abs(g - ref.item()) for g in got) / abs(ref.item()):.2e})")
    eager = torch.nn.functional.cross_entropy(mm.float(), t, ignore_index=o.ignore_index, reduction=o.reduction,
                                              label_smoothing=o.label_smoothing) if not o.z_loss else None
    if eager is not None:
        print(f"  F.cross_entropy on the float32 logits: {eager.item():.6f}")
