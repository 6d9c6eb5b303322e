"""Which kernel do compute-sanitizer's reports on lab.linear_cross_entropy's chunks belong to? One chunk's logits as
the head makes them (16 tokens x K = 64 times a 50264 x 64 classifier: cuBLAS's split-K kernels), then either a
PyTorch kernel reading them (`sum`) or the lab's cross-entropy kernel (`ce`). Run under each tool:
    compute-sanitizer --tool initcheck python notebook/sanitizers-on-the-head/probe.py sum
"""
import sys

import torch

import lab.losses

mode = sys.argv[1]
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(16, 64, device="cuda", dtype=torch.bfloat16, generator=g)
w = torch.randn(50264, 64, device="cuda", dtype=torch.bfloat16, generator=g)
logits = torch.mm(x, w.t())
if mode == "sum":
    print("sum of the matmul's logits:", logits.float().sum().item())
elif mode == "ce":
    target = torch.randint(0, 50257, (16,), device="cuda", generator=g)
    loss = lab.losses._ops().loss_and_grad(logits[:, :50257], target, None, -100, "sum", 0.0, 0.0, None,
                                             logits[:, :50257])
    print("loss from the matmul's logits:", loss.item())
elif mode == "ce_copied":  # the same logits through a host copy: written by a memcpy, not by cuBLAS
    logits = logits.cpu().cuda()
    target = torch.randint(0, 50257, (16,), device="cuda", generator=g)
    loss = lab.losses._ops().loss_and_grad(logits[:, :50257], target, None, -100, "sum", 0.0, 0.0, None,
                                             logits[:, :50257])
    print("loss from copied logits:", loss.item())
elif mode.startswith("float32_"):  # float32 rows of 50257 in a buffer of 50260 a row, made on the host: no cuBLAS
    rows = int(mode.split("_")[1])
    buffer = torch.randn(rows, 50260, generator=torch.Generator().manual_seed(0)).cuda()
    target = torch.randint(0, 50257, (rows,), device="cuda", generator=g)
    loss = lab.losses._ops().loss_and_grad(buffer[:, :50257], target, None, -100, "sum", 0.0, 0.0, None,
                                             buffer[:, :50257])
    print(f"float32 loss of {rows} rows:", loss.item())
torch.cuda.synchronize()
