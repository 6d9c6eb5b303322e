"""What do dW's float32 sums over chunks cost on Llama 3's head at 16384 tokens? Times, on one GPU in one process
(median of do_bench, L2 flushed): lab.linear_cross_entropy forward + backward at 16384 tokens of (H, V) = (4096,
128256) in bfloat16 with 1, 2 and 4 chunks (chunk_tokens 16384, 8192, 4096; the default takes 4096) beside the
torch.compile of PyTorch's composition, with each one's peak memory above the inputs; and one chunk's dW matmul
alone: bfloat16 out, float32 out (mm's out_dtype) and added into a float32 sum (addmm's out_dtype), at 4096, 8192 and
16384 tokens.

    python notebook/linear-cross-entropy-dw-sums/measure.py
"""

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import lab  # noqa: E402
from lab import bench  # noqa: E402

H, V, N = 4096, 128256, 16384


def timed(fn) -> tuple[float, float]:
    """(median ms, peak GB allocated above what was allocated before) of fn."""
    fn()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 1e9
    return bench.time_gpu(fn).median_ms, peak


def main() -> None:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(N, H, device="cuda", generator=g) * 0.5).bfloat16().requires_grad_()
    w = (torch.randn(V, H, device="cuda", generator=g) * 0.02).bfloat16().requires_grad_()
    t = torch.randint(0, V, (N,), device="cuda", generator=g)
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; tokens {N}, H {H}, V {V}, bfloat16")

    def step(loss_fn):
        def run():
            x.grad = w.grad = None
            loss_fn().backward()
        return run

    compiled = torch.compile(lambda: F.cross_entropy((x @ w.t()).float(), t), fullgraph=True)
    rows = {"torch.compile": step(compiled)}
    for chunk in (16384, 8192, 4096):
        rows[f"lab, chunks of {chunk}"] = step(lambda c=chunk: lab.linear_cross_entropy(x, w, t, chunk_tokens=c))
    rows["lab, default"] = step(lambda: lab.linear_cross_entropy(x, w, t))
    for name, fn in rows.items():
        ms, gb = timed(fn)
        print(f"{name:24s} {ms:7.2f} ms  peak {gb:5.2f} GB")
    x.grad = w.grad = None
    for tokens in (4096, 8192, 16384):
        gc = torch.randn(tokens, V, device="cuda", generator=g).bfloat16()
        xc = x.detach()[:tokens]
        total = torch.zeros(V, H, device="cuda")
        bf16 = bench.time_gpu(lambda: torch.mm(gc.t(), xc)).median_ms
        f32 = bench.time_gpu(lambda: torch.mm(gc.t(), xc, out_dtype=torch.float32)).median_ms
        acc = bench.time_gpu(lambda: torch.addmm(total, gc.t(), xc, out_dtype=torch.float32, out=total)).median_ms
        tflop = 2 * tokens * V * H / 1e12
        print(f"dW of {tokens:5d} tokens: bfloat16 out {bf16:6.2f} ms ({tflop / bf16 * 1e3:4.0f} TFLOP/s), "
              f"float32 out {f32:6.2f} ms, added into a float32 sum {acc:6.2f} ms")
        del gc, total


if __name__ == "__main__":
    main()
