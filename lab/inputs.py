"""Shapes (the fixed and tutorial sweeps, a quick one, a CPU one, the edge set) and input tensors.

Inputs are irregular on purpose: per-row scale and offset, a few large outliers per row (so the
softmax is far from uniform), never zeros, never only powers of two. Padding past N in strided
inputs is NaN, so a kernel that reads beyond its row produces NaN and fails the check.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from lab.dispatch import pack_elements


@dataclass(frozen=True)
class Shape:
    m: int
    n: int
    row_stride: int | None = None  # elements between row starts; None means n (contiguous)
    k: int | None = None
    """The inner dimension of an operator built on a matmul (linear_cross_entropy's hidden size H: its M x K inputs
    times a N x K weight), None for the others."""

    @property
    def stride(self) -> int:
        return self.n if self.row_stride is None else self.row_stride

    @property
    def label(self) -> str:
        return (f"{self.m}x{self.n}" + ("" if self.row_stride in (None, self.n) else f"/{self.row_stride}")
                + ("" if self.k is None else f"xK{self.k}"))

    @staticmethod
    def of(x: torch.Tensor) -> Shape:
        """The shape of a 2-D tensor with contiguous rows: (M, N, the elements between row starts)."""
        m, n = x.shape
        return Shape(m, n, None if x.stride(0) == n else x.stride(0))

    @staticmethod
    def parse(text: str) -> Shape:
        """'4096x1000', '4096x1000/1024' (row stride 1024), '1000' (one row: a vector), or with an inner dimension
        'MxNxK<k>' (linear_cross_entropy's tokens x vocabulary x hidden size: '8192x128256xK4096'), as label writes
        them."""
        head, has_k, inner = text.lower().partition("xk")
        dims, slash, stride = head.partition("/")
        try:
            m, n = (int(v) for v in dims.split("x")) if "x" in dims else (1, int(dims))
            s = int(stride) if slash else None
            k = int(inner) if has_k else None
        except ValueError:
            raise ValueError(f"cannot read shape {text!r}: expected MxN, MxN/STRIDE, N or MxNxK<k>, e.g. 4096x1000"
                             ) from None
        if m < 0 or n < 1 or (s is not None and s < n) or (k is not None and k < 1):
            raise ValueError(f"shape {text!r}: need M >= 0, N >= 1, STRIDE >= N and K >= 1")
        return Shape(m, n, s, k)


def pack_stride(n: int, dtype: torch.dtype, aligned: bool) -> int:
    """A row stride for rows of n elements of `dtype` that starts every row on a 16-byte boundary (aligned: n
    rounded up to whole packs), or that starts rows off one (n where n is not whole packs, else one element more)."""
    pack = pack_elements(dtype)
    return -(-n // pack) * pack if aligned else n + (n % pack == 0)


FIXED_ELEMENTS = 64 * 2**20
FIXED_NS = (32, 64, 128, 256, 512, 1024, 4096, 16384, 65536, 262144)
TUTORIAL_M = 4096
TUTORIAL_NS = (128, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)

# Vocabularies of real models: Llama 2 and Mistral, GPT-2, Llama 3, Qwen 2, Gemma.
VOCABULARIES = (32000, 50257, 128256, 151936, 256000)
# A batch's rows at decode time: a softmax over the vocabulary per sequence, for sampling the next token.
DECODE_ROWS = (1, 2, 4, 8, 16, 32, 64)

SWEEPS: dict[str, tuple[Shape, ...]] = {
    "fixed": tuple(Shape(FIXED_ELEMENTS // n, n) for n in FIXED_NS),
    "tutorial": tuple(Shape(TUTORIAL_M, n) for n in TUTORIAL_NS),
    # Few rows of a vocabulary's length, as sampling at decode time gives (python -m lab.test -s decode): drawn
    # against M (BY_ROWS).
    "decode": tuple(Shape(m, v) for v in VOCABULARIES for m in DECODE_ROWS),
    # A few points across the range, for a fast look on a GPU.
    "quick": (Shape(65536, 128), Shape(16384, 1024), Shape(4096, 16384), Shape(256, 262144)),
    # Without a GPU: small enough for the CPU and for the Triton interpreter.
    "cpu": (Shape(256, 32), Shape(256, 128), Shape(128, 1000), Shape(64, 1024), Shape(16, 4096)),
}

BY_ROWS = ("decode",)
"""The sweeps drawn against M, a panel per N (report.plot_rows): a few row counts at each of a few lengths."""

# Every branch of every variant: M = 0 and 1, N = 1, odd N, N not a multiple of 4 or 8 (scalar
# tails), both sides of the CUDA threads-per-block steps (one 16-byte pack per thread, 32 to 512
# threads), of register_cached's row shapes (N = 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
# 16384) and of the Triton fused limit, row strides larger than N (aligned and misaligned).
EDGE_SHAPES: tuple[Shape, ...] = (
    Shape(0, 7), Shape(1, 1), Shape(3, 1), Shape(1, 1000), Shape(4, 2), Shape(5, 31), Shape(7, 33),
    Shape(5, 64), Shape(3, 65), Shape(3, 127), Shape(3, 129), Shape(3, 256, 264), Shape(3, 257), Shape(2, 513),
    Shape(9, 1023), Shape(4, 1025), Shape(3, 2049), Shape(2, 4097), Shape(2, 8191), Shape(6, 100, 133),
    Shape(5, 1024, 1040), Shape(3, 3000, 3007), Shape(2, 16383, 16390), Shape(2, 16384), Shape(2, 16385),
    Shape(2, 65536), Shape(2, 65537, 65600), Shape(2, 262147),
)
CPU_EDGE_MAX_N = 4097  # edge shapes past this are left to the GPU (the interpreter is slow)

SPECIAL_ROWS = ("-inf entries", "all -inf", "+inf entry", "NaN entry", "1e4 magnitudes")
SPECIAL_NS = (1, 7, 33, 1000, 4099)


def irregular(m: int, n: int, generator: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """float32 (m, n): normal values with a per-row scale and offset and a few outliers per row."""
    x = torch.randn(m, n, generator=generator, device=device)
    scale = torch.rand(m, 1, generator=generator, device=device) * 2.5 + 0.5
    offset = torch.randn(m, 1, generator=generator, device=device) * 3.0
    x = x * scale + offset
    if n > 1:
        outliers = max(1, n // 512)
        cols = torch.randint(0, n, (m, outliers), generator=generator, device=device)
        bump = torch.rand(m, outliers, generator=generator, device=device) * 6.0 + 4.0
        x.scatter_add_(1, cols, bump * scale)
    return x


def make_input(
    shape: Shape, dtype: torch.dtype, device: torch.device | str, seed: int = 0
) -> torch.Tensor:
    """An (M, N) tensor of irregular values; a view of an (M, stride) buffer padded with NaN."""
    g = torch.Generator(device=device).manual_seed(seed)
    buf = torch.full((shape.m, shape.stride), math.nan, dtype=dtype, device=device)
    buf[:, : shape.n] = irregular(shape.m, shape.n, g, device).to(dtype)
    return buf[:, : shape.n]


def special_input(
    n: int, dtype: torch.dtype, device: torch.device | str, seed: int = 0
) -> tuple[torch.Tensor, list[str]]:
    """Irregular rows interleaved with each SPECIAL_ROWS case; returns the tensor and row labels."""
    g = torch.Generator(device=device).manual_seed(seed)
    rows: list[torch.Tensor] = []
    labels: list[str] = []
    for kind in SPECIAL_ROWS:
        rows.append(irregular(1, n, g, device))
        labels.append("random")
        r = irregular(1, n, g, device)
        pick = torch.randint(0, n, (max(1, n // 7),), generator=g, device=device)
        if kind == "-inf entries":
            r[0, pick] = -math.inf
            if n > 1:
                r[0, 0] = 1.5  # keep one finite entry so the row is not all -inf
        elif kind == "all -inf":
            r.fill_(-math.inf)
        elif kind == "+inf entry":
            r[0, pick[0]] = math.inf
        elif kind == "NaN entry":
            r[0, pick[0]] = math.nan
        elif kind == "1e4 magnitudes":
            r = torch.where(r >= 0, 1e4, -1e4) + r  # exp(x) alone would overflow; ties near 1e4
        rows.append(r)
        labels.append(kind)
    return torch.cat(rows).to(dtype), labels
