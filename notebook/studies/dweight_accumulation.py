"""How far does dweight drift when a chunked linear cross-entropy adds it up over chunks of tokens in bfloat16,
against PyTorch's own bfloat16 dweight (one matmul over every token: float32 sums, rounded once)?

A head of V classes and H hidden units over N tokens: x ~ N(0, 1) and W ~ N(0, 1/H) in bfloat16, random targets, the
mean's dlogits = (softmax(x W^T) - onehot) / N rounded to bfloat16 (as the kernel writes them). dweight = dlogits^T x
three ways, against the float64 product of the float64 logits' gradient (the lab's reference):
  torch   the whole product in float32 sums, rounded to bfloat16 once (cuBLAS's bfloat16 matmul);
  fp32    each chunk's product added into a float32 total, rounded once at the end (accumulate=float32);
  bf16    each chunk's product added into a bfloat16 total, rounded after every chunk (addmm with beta=1 into a
          bfloat16 output: accumulate=the weight's dtype, the seed's design).
Prints, per number of chunks, the worst and the norm-wise error of each, and bf16's as a multiple of torch's (the
lab's bar for 16-bit gradients is twice PyTorch's error). CPU only; 20-50 s on two cores.

    python notebook/studies/dweight_accumulation.py [--tokens 65536] [--hidden 256] [--vocab 2048]
"""

from __future__ import annotations

import argparse

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=65536)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    n, h, v = args.tokens, args.hidden, args.vocab
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(n, h, generator=g).bfloat16()
    w = (torch.randn(v, h, generator=g) / h**0.5).bfloat16()
    target = torch.randint(0, v, (n,), generator=g)
    logits = x.double() @ w.double().t()
    grad64 = torch.softmax(logits, -1)
    grad64[torch.arange(n), target] -= 1.0
    grad64 /= n
    ref = grad64.t() @ x.double()  # the lab's reference: float64 throughout
    dl = grad64.bfloat16().double()  # the kernel's bfloat16 dlogits
    finest = 64
    size = n // finest
    parts = [dl[i * size:(i + 1) * size].t() @ x.double()[i * size:(i + 1) * size] for i in range(finest)]
    torch_w = torch.stack(parts).sum(0).float().bfloat16().double()

    def errors(dw: torch.Tensor) -> tuple[float, float]:
        d = dw - ref
        return d.abs().max().item(), (d.norm() / ref.norm()).item()

    t_max, t_norm = errors(torch_w)
    print(f"N={n} H={h} V={v}: torch's bfloat16 dweight: worst {t_max:.3e}, norm-wise {t_norm:.3e} "
          f"(max |ref| {ref.abs().max().item():.3e})")
    print(f"{'chunks':>6} {'tokens':>7} {'fp32 worst':>11} {'fp32 / torch':>12} {'bf16 worst':>11} "
          f"{'bf16 / torch':>12} {'bf16 norm / torch':>17}")
    for chunks in (1, 2, 4, 8, 16, 32, 64):
        step = finest // chunks
        sums = [torch.stack(parts[i:i + step]).sum(0) for i in range(0, finest, step)]  # each chunk's product
        acc32 = torch.zeros(v, h, dtype=torch.float32)
        acc16 = torch.zeros(v, h, dtype=torch.bfloat16)
        for s in sums:
            acc32 += s.float()
            acc16 = (acc16.float() + s.float()).bfloat16()
        f_max, _ = errors(acc32.bfloat16().double())
        b_max, b_norm = errors(acc16.double())
        print(f"{chunks:>6} {n // chunks:>7} {f_max:>11.3e} {f_max / t_max:>12.2f} {b_max:>11.3e} "
              f"{b_max / t_max:>12.2f} {b_norm / t_norm:>17.2f}")


if __name__ == "__main__":
    main()
