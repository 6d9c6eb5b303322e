"""One launch of a lab cluster kernel with 16 CTAs a row, its result checked against float64 on the CPU, for
compute-sanitizer to watch (synccheck raised an illegal memory access on such launches of many rows):
    compute-sanitizer --tool synccheck python notebook/synccheck-on-16-cta-clusters/probe.py softmax float32 16 50260
    ... probe.py softmax_tuned float32 16 65536   (the tuning op: the plan's CTAs, a cluster per row, no stagger)
    ... probe.py backward float32 16 65536        (the backward's cluster kernel: the plan's CTAs, a cluster per row)
    ... probe.py ce 16                            (the cross-entropy kernel, float32 rows of 50257 on a stride of 50260)
Prints the largest error against float64 and exits non-zero if it is over 1e-5 (float32) or 1e-2 (16-bit).
"""
import sys

import torch

import lab.losses  # noqa: F401  (loads lab._C: torch.ops.lab, torch.ops.lab_tune)

kind = sys.argv[1]
dtype = getattr(torch, sys.argv[2]) if kind != "ce" else torch.float32
rows = int(sys.argv[3] if kind != "ce" else sys.argv[2])
cols = int(sys.argv[4]) if kind != "ce" else 50257
gen = torch.Generator().manual_seed(0)
x = (torch.randn(rows, cols, generator=gen) * 3).to(dtype)
want = torch.softmax(x.double(), dim=-1)
if kind == "softmax":
    got = torch.ops.lab.cluster(x.cuda())
elif kind == "softmax_tuned":
    plan = list(torch.ops.lab_tune.cluster_plan(cols, dtype, rows))
    got = torch.ops.lab_tune.cluster(x.cuda(), plan[0], plan[1], False)
    print("plan", plan)
elif kind == "backward":
    dy = torch.randn(rows, cols, generator=gen).to(dtype)
    y = want.to(dtype)
    want = y.double() * (dy.double() - (dy.double() * y.double()).sum(-1, keepdim=True))
    plan = list(torch.ops.lab_tune.softmax_backward_cluster_plan(cols, dtype))
    got = torch.ops.lab_tune.softmax_backward_cluster(y.cuda(), dy.cuda(), plan[0], plan[1], False)
    print("plan", plan)
elif kind == "ce":
    buffer = torch.randn(rows, 50260, generator=gen)
    x = buffer[:, :cols]
    target = torch.randint(0, cols, (rows,), generator=gen)
    want = torch.nn.functional.cross_entropy(x.double(), target, reduction="sum")
    logits = buffer.cuda()[:, :cols]
    got = lab.losses._ops().loss_and_grad(logits, target.cuda(), None, -100, "sum", 0.0, 0.0, None, logits)
else:
    sys.exit(f"unknown kind {kind}")
err = (got.cpu().double() - want).abs().max().item()
bar = 1e-5 * max(1.0, want.abs().max().item()) if dtype == torch.float32 else 1e-2
print(f"{kind} {sys.argv[2:]}: largest error {err:.3g} (bar {bar:.3g})", flush=True)
sys.exit(0 if err <= bar else 1)
