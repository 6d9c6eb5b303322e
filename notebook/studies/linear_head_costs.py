"""What does a language model head's loss cost, forward and backward, and in memory, per way of computing it?

A head of H hidden units and V classes over N tokens (bfloat16 by default, mean loss, gradients for x and W): the
time of one forward + backward (median of CUDA-event timings after a warm-up) and its peak memory above the inputs
(torch.cuda.max_memory_allocated, the gradients included), for
  matmuls     the three matmuls alone (x W^T, dlogits W, dlogits^T x): the floor of any design that makes the logits
  torch       F.cross_entropy(x @ W.T, target) and its autograd backward
  compile     the same under torch.compile
  lab/C/acc   lab.linear_cross_entropy with chunks of C tokens, dweight added up in acc (float32 or bfloat16)
GPU only. A few seconds a point plus torch.compile's compile.

    python notebook/studies/linear_head_costs.py [--hidden 4096] [--vocab 128256] [--tokens 4096 8192]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F


def timed(fn, reps: int = 5) -> tuple[float, float]:
    """(median ms, peak MB above what was allocated before) of fn()."""
    fn()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 1e6
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2], peak


def main() -> None:
    import lab

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--vocab", type=int, default=128256)
    p.add_argument("--tokens", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--chunks", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    args = p.parse_args()
    h, v = args.hidden, args.vocab
    g = torch.Generator(device="cuda").manual_seed(0)
    w = (torch.randn(v, h, device="cuda", generator=g) / h**0.5).bfloat16().requires_grad_()

    def loss_torch(x, t):
        return F.cross_entropy((x @ w.t()).float(), t)

    compiled = torch.compile(loss_torch)
    for n in args.tokens:
        x = torch.randn(n, h, device="cuda", generator=g).bfloat16().requires_grad_()
        t = torch.randint(0, v, (n,), device="cuda", generator=g)
        dl = torch.randn(n, v, device="cuda", generator=g).bfloat16()
        flop = 6 * n * h * v

        def matmuls():
            logits = x.detach() @ w.detach().t()
            return logits, dl @ w.detach(), dl.t() @ x.detach()

        def step(loss_fn):
            def run():
                x.grad = w.grad = None
                loss_fn(x, t).backward()
            return run

        ways = {"matmuls": matmuls, "torch": step(loss_torch), "compile": step(compiled)}
        for c in args.chunks:
            for acc in (torch.float32, torch.bfloat16):
                ways[f"lab/{c}/{str(acc).removeprefix('torch.')}"] = step(
                    lambda x, t, c=c, acc=acc: lab.linear_cross_entropy(x, w, t, chunk_tokens=c, accumulate=acc))
        print(f"N={n} H={h} V={v} bfloat16: 6NHV = {flop / 1e12:.1f} TFLOP")
        floor = None
        for name, fn in ways.items():
            try:
                ms, mb = timed(fn)
            except torch.OutOfMemoryError:
                print(f"  {name:<22} out of memory")
                torch.cuda.empty_cache()
                continue
            floor = floor or ms
            print(f"  {name:<22} {ms:8.2f} ms  {flop / ms / 1e9:6.0f} TFLOP/s  {ms / floor:5.2f}x matmuls  "
                  f"peak {mb:8.0f} MB", flush=True)
        x.grad = w.grad = None
        del x, t, dl
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
