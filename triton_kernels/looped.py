"""looped: online softmax over BLOCK-sized chunks, for rows of any length.

Algorithm: one program per row. The first loop streams the row in chunks of BLOCK elements and keeps the
online state (running max m, running sum d of exp(x - m); Milakov & Gimelshein 2018) per lane: lane
i holds the state of elements i, i + BLOCK, i + 2 BLOCK, ... A new x either raises the lane's max
(d = d * exp(m_old - x) + 1) or does not (d = d + exp(x - m)); both terms are exp(-|x - m|), so
each element costs one exp, and the loop has no cross-lane reduction and no barrier, so warps keep
loads in flight independently. After the loop the lanes merge once: M = max(m), D = sum(d *
exp(m - M)). The second loop re-reads the row and writes exp(x - M) / D (as a multiply by 1 / D).

Special values, as torch gives them: a -inf x adds exp(-inf) = 0, and is tested for explicitly,
since a lane that has seen only -inf has m = -inf and x - m would be -inf - -inf = NaN; a row of
only -inf keeps M = -inf, so the merge's m - M is NaN and the row comes out NaN; a NaN x makes d
NaN, hence D and the whole row; a +inf x makes M = +inf and inf - inf makes the row NaN.

HBM sweeps: read x twice, write y once (the 2R + 1W of cuda.online). The second read can be served
from L2 when the row is still there, which is what the eviction hints are for (EVICTION_HINTS, a
constexpr: the wrapper's eviction_hints): the first read marks the row evict_last, to keep it in L2
for the second read, and the second read marks it evict_first, since nothing reads it again. The
second loop also walks the chunks backwards, so that it starts with the ones read last, which are
the most likely still in L2 when the rows in flight do not all fit there.

Launch: a grid of M programs. BLOCK = next power of two of N, capped at CHUNK_BYTES (16 KB) of x
per chunk: 4096 float32 or 8192 16-bit elements; num_warps so that each thread holds about 16
elements per chunk (four 16-byte loads in float32, two in 16-bit): 8 warps in float32, 16 in
16-bit for long rows, down to 4 for short ones. With the per-lane state ptxas gives 52 to 62
registers per thread (sm_90, no spills), so four float32 or two 16-bit programs share an SM: 64 or
32 KB of loads in flight per SM. The loads and stores are 16-byte vectors when N and the row strides
are multiples of 16 (Triton specializes integer arguments divisible by 16), scalar otherwise.
The parallelism is M: with fewer rows than about 2 x 132 (M = 256 at N = 262144 in the fixed sweep)
an H200's SMs hold fewer programs than they could, and a single row runs on one SM; splitting rows
across programs would be the cure, at the price of a cross-program merge.

Limits: none on N (every N >= 1: the chunk size does not depend on it); any M (including 0); row
strides different from N; 64-bit row offsets (row * stride can pass 2^31). float32, float16 and
bfloat16 in, float32 math.
"""

import torch
import triton
import triton.language as tl

from triton_kernels.autograd import differentiable
from triton_kernels.common import fast_exp, prepare

MAX_N = None  # no limit: rows longer than a chunk take more iterations
CHUNK_BYTES = 16384  # of x per chunk
ELEMENTS_PER_THREAD = 16


@triton.jit
def softmax_looped_kernel(
    x_ptr, y_ptr, x_row_stride, y_row_stride, n_cols, BLOCK: tl.constexpr, EVICTION_HINTS: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)  # 64-bit: row * stride passes 2^31 on large inputs
    x_row = x_ptr + row * x_row_stride
    y_row = y_ptr + row * y_row_stride
    cols = tl.arange(0, BLOCK)

    # Pass 1: per-lane online (max, sum).
    m = tl.full([BLOCK], -float("inf"), tl.float32)
    d = tl.zeros([BLOCK], tl.float32)
    for start in tl.range(0, n_cols, BLOCK):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < n_cols, other=-float("inf"),
                    eviction_policy="evict_last" if EVICTION_HINTS else "").to(tl.float32)
        # exp(-|x - m|) is the rescale exp(m - x) when x raises the max, else the term exp(x - m).
        # A -inf x adds nothing; testing it also avoids -inf - -inf = NaN in a lane still at m = -inf.
        # A NaN x fails both tests and makes d NaN (tl.maximum may drop it from m on the GPU).
        e = fast_exp(tl.where(x == -float("inf"), -float("inf"), -tl.abs(x - m)))
        d = tl.where(x > m, d * e + 1.0, d + e)
        m = tl.maximum(m, x)

    # Merge the lanes. Lanes still at m = -inf have d = 0 and add 0, unless the whole row is -inf:
    # then row_max = -inf, m - row_max is NaN and so is the row, as torch gives it.
    row_max = tl.max(m, axis=0)
    inv_sum = 1.0 / tl.sum(d * fast_exp(m - row_max), axis=0)

    # Pass 2: re-read (last chunk first: the most recently read, the likeliest in L2) and write.
    n_chunks = tl.cdiv(n_cols, BLOCK)
    for i in tl.range(0, n_chunks):
        offs = (n_chunks - 1 - i) * BLOCK + cols
        mask = offs < n_cols
        x = tl.load(x_row + offs, mask=mask, other=-float("inf"),
                    eviction_policy="evict_first" if EVICTION_HINTS else "").to(tl.float32)
        y = fast_exp(x - row_max) * inv_sum
        tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def launch_config(n_cols: int, itemsize: int) -> tuple[int, int]:
    """(BLOCK, num_warps): chunks of at most CHUNK_BYTES, about ELEMENTS_PER_THREAD per thread."""
    block = min(triton.next_power_of_2(n_cols), CHUNK_BYTES // itemsize)
    return block, min(16, max(4, block // (32 * ELEMENTS_PER_THREAD)))


@differentiable
def softmax_looped(
    x: torch.Tensor, out: torch.Tensor | None = None, eviction_hints: bool = True, *, block: int | None = None
) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor, any row length. `eviction_hints`: evict_last on the first read
    and evict_first on the second (False: no hints). `block` (a power of two) overrides the chunk size."""
    out = prepare(x, out, "triton.looped" if eviction_hints else "triton.looped_no_hints")
    n_rows, n_cols = x.shape
    if x.numel() == 0:
        return out
    chunk, num_warps = launch_config(n_cols, x.element_size())
    if block is not None:
        if block < 1 or block & (block - 1):
            raise ValueError(f"triton.looped: block must be a power of two, got {block}")
        chunk = block
    softmax_looped_kernel[(n_rows,)](
        x, out, x.stride(0), out.stride(0), n_cols, BLOCK=chunk, EVICTION_HINTS=eviction_hints, num_warps=num_warps
    )
    return out


@differentiable
def softmax_looped_no_hints(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """softmax_looped without eviction hints: the baseline that shows what the hints do."""
    return softmax_looped(x, out, eviction_hints=False)
