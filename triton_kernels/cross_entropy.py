"""cross_entropy: a language model's loss over given logits and its gradient, in one kernel, as a training step
takes them (the gradient is written in the forward; a backward only scales it by the upstream gradient).

Algorithm: one program per row. The row's target is read first: an ignored row writes a zero gradient and a zero
loss and reads nothing else. Otherwise the logits z (after soft-capping, z = cap * tanh(x / cap), where set) give
the online (max, sum) state per lane (as triton_kernels/looped.py) and the sum of the class weights, and the
target's logit z_y (one load); the lanes merge into lse. Then

    loss = w_y (1 - s) (lse - z_y) + s / V sum_j w_j (lse - z_j) + lambda lse^2
    dz_j = c * cap'(x_j) * [w_y (1 - s) (p_j - [j = y]) + s / V (p_j sum w - w_j) + 2 lambda lse p_j]

with p_j = exp(z_j - lse), s the label smoothing, w the class weights (1 without), lambda the z-loss and c the
reduction's factor (1 / the mean's denominator, computed from the targets beforehand by targets_kernel, one
program, which also finds the first target out of range). fused holds the whole row in registers (block = next
power of two of V) and writes dz from them; looped streams the row in chunks twice.

HBM sweeps: fused reads the logits once and writes dz once (1R + 1W); looped reads them twice (2R + 1W, the second
read last chunk first, from L2 where the row still is); the loss, targets and weights are O(M + V).
Launch: a grid of M programs; looped's chunks and warps are triton_kernels/looped.py's launch_config.
Limits: fused takes V <= FUSED_MAX_V (the row must fit one program's registers); looped any V. Targets must be in
[0, V) or ignore_index: the wrapper raises for one after the launches, having waited for targets_kernel alone
(_run), or leaves that wait to lab.cross_entropy's backward (TargetCheck); a target out of range that reaches the
kernel unchecked (lab.cross_entropy under torch.compile or in a CUDA graph's capture) makes its row's loss and
gradient NaN, and nothing is read at it. 64-bit row offsets; float32 arithmetic whatever the dtype.
"""

import contextlib
import functools

import torch
import triton
import triton.language as tl
from torch.library import triton_op

from lab.dispatch import PACK_BYTES, pack_elements
from triton_kernels.common import DTYPES, check_device, fast_exp, traceable
from triton_kernels.looped import launch_config

FUSED_MAX_V = 16384  # one row of float32 logits and its exponentials in one program's registers


@triton.jit
def _capped(x, softcap, SOFTCAP: tl.constexpr):
    """(z, dz/dx): cap * tanh(x / cap) and 1 - tanh^2, or x and 1. tanh as 1 - 2 / (exp(2u) + 1): exact at the
    ends (+-1 for +-inf, -cap for a -inf logit, as PyTorch's tanh gives)."""
    if SOFTCAP:
        t = 1.0 - 2.0 / (fast_exp(2.0 * x / softcap) + 1.0)
        return softcap * t, 1.0 - t * t
    else:
        return x, tl.full(x.shape, 1.0, tl.float32)


@triton.jit
def _weights(weight_ptr, offs, inside, HAS_WEIGHT: tl.constexpr):
    """The class weights of a chunk (1 without weights), 0 past the row."""
    if HAS_WEIGHT:
        return tl.load(weight_ptr + offs, mask=inside, other=0.0).to(tl.float32)
    else:
        return tl.where(inside, 1.0, 0.0)


@triton.jit
def _online(z, m, d):
    """One chunk into the per-lane online (max, sum): exp(-|z - m|) is the rescale when z raises the max, else the
    term; a -inf z adds nothing (and avoids -inf - -inf in a lane still at -inf)."""
    e = fast_exp(tl.where(z == -float("inf"), -float("inf"), -tl.abs(z - m)))
    return tl.maximum(m, z), tl.where(z > m, d * e + 1.0, d + e)


@triton.jit
def _gradient(z, w, is_target, row_max, inv_s, sum_w, y_scale, w_scale, z_scale, e_scale, g_y, FOLD: tl.constexpr):
    """dz / cap'(x) at a pass's elements: y_scale (p - [j = y]) + w_scale (sum_w p - w) + z_scale p, p = exp(z -
    row_max) / s. Each term's own difference first, as PyTorch's autograd takes them: where p is near 1 the first two
    vanish and z-loss's term is the gradient, which one sum of the scalars times p, less the target's and w's, would
    leave to a float32 cancellation (a vocabulary of one with z-loss: 1 - 1.46e-4 - 1, 4e-4 of the gradient off, a
    float16 ulp). FOLD (16-bit logits): off the target the factors of p fold into one scalar, e_scale, and the target
    takes g_y, its gradient in that form, computed once a row; float32 logits take the terms at every element. Each
    dtype's form is the faster of the two there, by the code Triton makes of them (H200, the streamed pass at rows of
    32000 and 128256, the default options: folded, bfloat16 1.09-1.10x the terms, float32 0.92-1.00x; float16 and the
    whole-row pass take the same forms untimed; notebook/remaining-gaps-profiled/)."""
    if FOLD:
        g = tl.where(is_target, g_y, e_scale * fast_exp(z - row_max) - w_scale * w)
    else:
        p = fast_exp(z - row_max) * inv_s
        g = y_scale * (p - tl.where(is_target, 1.0, 0.0)) + w_scale * (sum_w * p - w) + z_scale * p
    return g


@triton.jit
def cross_entropy_kernel(x_ptr, target_ptr, weight_ptr, scale_ptr, loss_ptr, dx_ptr, x_stride, dx_stride, n_rows,
                         n_cols, ignore_index, smoothing, z_loss, softcap, BLOCK: tl.constexpr, WHOLE_ROW: tl.constexpr,
                         HAS_WEIGHT: tl.constexpr, SOFTCAP: tl.constexpr, WRITE_GRAD: tl.constexpr):
    for row in tl.range(tl.program_id(0).to(tl.int64), n_rows, tl.num_programs(0)):  # 64-bit: row * stride
        _cross_entropy_row(x_ptr, target_ptr, weight_ptr, scale_ptr, loss_ptr, dx_ptr, x_stride, dx_stride, row,
                           n_cols, ignore_index, smoothing, z_loss, softcap, BLOCK, WHOLE_ROW, HAS_WEIGHT, SOFTCAP,
                           WRITE_GRAD)


@triton.jit
def _cross_entropy_row(x_ptr, target_ptr, weight_ptr, scale_ptr, loss_ptr, dx_ptr, x_stride, dx_stride, row, n_cols,
                       ignore_index, smoothing, z_loss, softcap, BLOCK: tl.constexpr, WHOLE_ROW: tl.constexpr,
                       HAS_WEIGHT: tl.constexpr, SOFTCAP: tl.constexpr, WRITE_GRAD: tl.constexpr):
    x_row, dx_row = x_ptr + row * x_stride, dx_ptr + row * dx_stride
    cols = tl.arange(0, BLOCK)
    target = tl.load(target_ptr + row)
    if target == ignore_index:
        if WRITE_GRAD:
            for start in tl.range(0, n_cols, BLOCK):
                offs = start + cols
                tl.store(dx_row + offs, tl.zeros([BLOCK], tl.float32).to(dx_ptr.dtype.element_ty), mask=offs < n_cols)
        tl.store(loss_ptr + row, 0.0)
    elif (target < 0) | (target >= n_cols):  # out of range: NaN, not a read out of bounds
        if WRITE_GRAD:
            for start in tl.range(0, n_cols, BLOCK):
                offs = start + cols
                tl.store(dx_row + offs, tl.full([BLOCK], float("nan"), tl.float32).to(dx_ptr.dtype.element_ty),
                         mask=offs < n_cols)
        tl.store(loss_ptr + row, float("nan"))
    else:
        # Pass 1: the online (max, sum) per lane and the sum of the weights, over the row.
        # The target's z is taken from the lanes as they read the row (zy: z at the target's lane, 0 elsewhere), not
        # read again from memory: where dx is the logits themselves (the gradient written over them), a read after
        # the reductions races the other warps' pass-2 stores, nothing ordering them.
        m = tl.full([BLOCK], -float("inf"), tl.float32)
        d = tl.zeros([BLOCK], tl.float32)
        sw = tl.zeros([BLOCK], tl.float32)
        zy = tl.zeros([BLOCK], tl.float32)
        if WHOLE_ROW:  # one block: the row stays in registers for pass 2
            inside = cols < n_cols
            x = tl.load(x_row + cols, mask=inside, other=-float("inf")).to(tl.float32)
            z_row, dcap_row = _capped(x, softcap, SOFTCAP)
            z_row = tl.where(inside, z_row, -float("inf"))
            m, d = _online(z_row, m, d)
            zy = tl.where(cols == target, z_row, zy)
            w_row = _weights(weight_ptr, cols, inside, HAS_WEIGHT)
            sw = w_row
        else:
            for start in tl.range(0, n_cols, BLOCK):
                offs = start + cols
                inside = offs < n_cols
                x = tl.load(x_row + offs, mask=inside, other=-float("inf"), eviction_policy="evict_last"
                            ).to(tl.float32)
                z, _ = _capped(x, softcap, SOFTCAP)
                m, d = _online(tl.where(inside, z, -float("inf")), m, d)
                zy = tl.where(offs == target, z, zy)
                sw += _weights(weight_ptr, offs, inside, HAS_WEIGHT)
        # lse = row_max + log(s), kept apart: the loss takes log(s) + (row_max - z_y) and p = exp(z - row_max) / s,
        # exact where z is near the max (an lse of 1e4 would lose z's last digits), and p without log(s)'s rounding
        # (u * |log s| absolute, several ulps of p). Lanes still at -inf add 0 unless the whole row is -inf: then
        # s is 0 and the loss NaN, as PyTorch's is.
        row_max = tl.max(m, axis=0)
        s = tl.sum(d * fast_exp(m - row_max), axis=0)
        log_s = tl.log(s)
        lse = row_max + log_s
        sum_w = tl.sum(sw, axis=0)
        z_y = tl.sum(zy, axis=0)  # one lane's z, zeros elsewhere: exact (-inf and NaN too)
        w_y = tl.load(weight_ptr + target).to(tl.float32) if HAS_WEIGHT else 1.0
        nll_scale = w_y * (1.0 - smoothing)
        smooth_scale = smoothing / n_cols

        # Pass 2: dz = cap'(x) * c * (nll_scale (p - [j = y]) + smooth_scale (sum_w p - w) + 2 z_loss lse p)
        # (_gradient), p = exp(z - row_max) / s, and label smoothing's sum of w * (row_max - z), whose terms are all
        # >= 0.
        c = tl.load(scale_ptr)
        inv_s = 1.0 / s
        y_scale = c * nll_scale
        w_scale = c * smooth_scale
        z_scale = c * 2.0 * z_loss * lse
        e_scale = (y_scale + w_scale * sum_w + z_scale) * inv_s
        p_y = fast_exp(z_y - row_max) * inv_s
        g_y = y_scale * (p_y - 1.0) + w_scale * (sum_w * p_y - w_y) + z_scale * p_y
        fold: tl.constexpr = x_ptr.dtype.element_ty != tl.float32
        below = tl.zeros([BLOCK], tl.float32)
        if WHOLE_ROW:
            if WRITE_GRAD:
                g = _gradient(z_row, w_row, cols == target, row_max, inv_s, sum_w, y_scale, w_scale, z_scale, e_scale,
                              g_y, fold)
                tl.store(dx_row + cols, (dcap_row * g).to(dx_ptr.dtype.element_ty), mask=cols < n_cols)
            below = tl.where(w_row != 0.0, w_row * (row_max - z_row), 0.0)
        else:
            n_chunks = tl.cdiv(n_cols, BLOCK)
            if not WRITE_GRAD:  # noqa: SIM102  a constexpr test, then a run-time one (Triton keeps them apart)
                if smoothing == 0.0:  # the loss alone: no second pass
                    n_chunks = 0
            for i in tl.range(0, n_chunks):  # the last chunk first: the most recently read, the likeliest in L2
                offs = (n_chunks - 1 - i) * BLOCK + cols
                inside = offs < n_cols
                x = tl.load(x_row + offs, mask=inside, other=-float("inf"), eviction_policy="evict_first"
                            ).to(tl.float32)
                z, dcap = _capped(x, softcap, SOFTCAP)
                w = _weights(weight_ptr, offs, inside, HAS_WEIGHT)
                if WRITE_GRAD:
                    g = _gradient(z, w, offs == target, row_max, inv_s, sum_w, y_scale, w_scale, z_scale, e_scale, g_y,
                                  fold)
                    tl.store(dx_row + offs, (dcap * g).to(dx_ptr.dtype.element_ty), mask=inside)
                below += tl.where(w != 0.0, w * (row_max - z), 0.0)
        loss = nll_scale * (log_s + (row_max - z_y)) + z_loss * lse * lse
        if smoothing != 0.0:
            loss += smooth_scale * (sum_w * log_s + tl.sum(below, axis=0))
        tl.store(loss_ptr + row, loss)


def check_inputs(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, name: str) -> None:
    """What the kernel can take, checked on the host without a sync: 2-D float logits whose vocabulary is
    contiguous, contiguous int64 targets of one per row on their device, class weights of one per class."""
    check_device(logits, name, "logits")
    if logits.dim() != 2:
        raise ValueError(f"{name}: expected logits of 2 dims (rows, vocabulary), got {logits.dim()}")
    if logits.dtype not in DTYPES:
        raise TypeError(f"{name}: expected float32, float16 or bfloat16 logits, got {logits.dtype}")
    rows, vocab = logits.shape
    if vocab > 1 and logits.stride(1) != 1:
        raise ValueError(f"{name}: the vocabulary dimension must be contiguous (stride 1), got {logits.stride()}")
    if target.dtype != torch.int64 or target.shape != (rows,) or target.device != logits.device:
        raise ValueError(f"{name}: target must be int64 of shape ({rows},) on {logits.device}, got "
                         f"{target.dtype} of shape {tuple(target.shape)} on {target.device}")
    if rows > 1 and target.stride(0) != 1:
        raise ValueError(f"{name}: target must be contiguous (the kernels read one target after another), got "
                         f"stride {target.stride(0)}")
    if weight is not None and (weight.shape != (vocab,) or weight.device != logits.device
                               or not weight.is_floating_point()):
        raise ValueError(f"{name}: weight must be a floating-point tensor of shape ({vocab},) on {logits.device}")


def whole_row_fits(vocab: int) -> bool:
    """Whether a row of `vocab` logits is held in one program (the fused kernel), the choice of the lab's entry:
    at every length it can take, the fused kernel reads the row once where the looped one reads it twice."""
    return vocab <= FUSED_MAX_V


def rows_like(logits: torch.Tensor) -> torch.Tensor:
    """An empty tensor of the logits' shape whose rows lie as the logits' rows do: the same row stride and as far
    past a 16-byte boundary (storage is allocated on such a boundary), so that the CUDA kernel moves whole packs
    of both; a contiguous tensor for contiguous logits."""
    rows, vocab = logits.shape
    stride = logits.stride(0)  # even of one row: the kernel's test of the rows' places reads it
    if (stride == vocab and logits.storage_offset() * logits.element_size() % PACK_BYTES == 0) or (
            rows > 1 and stride < vocab):  # rows that overlap (an expanded tensor): dlogits' may not
        return torch.empty_like(logits, memory_format=torch.contiguous_format)
    shift = logits.storage_offset() % pack_elements(logits.dtype)
    buf = logits.new_empty(shift + max(rows - 1, 0) * stride + vocab)
    return buf.as_strided((rows, vocab), (stride, 1), shift)


def rows_match(logits: torch.Tensor, dx: torch.Tensor) -> bool:
    """Whether dlogits' rows lie as the logits' do, as rows_like lays them out (the CUDA kernel's condition)."""
    size = logits.element_size()
    return ((logits.storage_offset() - dx.storage_offset()) * size % PACK_BYTES == 0
            and (logits.stride(0) - dx.stride(0)) * size % PACK_BYTES == 0)


def rows_aligned(logits: torch.Tensor) -> bool:
    """Whether every row of the logits starts on a 16-byte boundary (storage is allocated on one)."""
    size = logits.element_size()
    return logits.storage_offset() * size % PACK_BYTES == 0 and logits.stride(0) * size % PACK_BYTES == 0


@functools.cache
def cuda_longest(dtype: torch.dtype, aligned: bool, device: int) -> int:
    """The longest row the CUDA kernel takes on this device (0: none), asked of the extension once: rows on 16-byte
    boundaries (aligned) or off them, laid out as rows_like lays out dlogits."""
    if not hasattr(torch.ops.lab, "cross_entropy_cluster") or torch.cuda.get_device_capability(device)[0] < 9:
        return 0
    return torch.ops.lab.cross_entropy_cluster_max_cols(dtype, aligned)


def cuda_takes(logits: torch.Tensor, dx: torch.Tensor | None, smoothing: float, z_loss: float,
               softcap: float | None) -> bool:
    """Whether the lab's entry runs the CUDA cluster kernel (csrc/cross_entropy/cluster.cu): rows longer than the
    fused kernel holds and that the CUDA kernel takes, dlogits written beside the logits (rows_like), over them (in
    place: the kernel holds each CTA's slice of a row in registers before any of the row is written) or not at all
    (dx None: the loss alone), the options it takes, the extension built with it, a Hopper GPU or newer."""
    vocab = logits.shape[1]
    if (vocab <= FUSED_MAX_V or smoothing or z_loss or softcap is not None
            or logits.device.type != "cuda" or (dx is not None and not rows_match(logits, dx))):
        return False
    return vocab <= cuda_longest(logits.dtype, rows_aligned(logits), logits.device.index or 0)


@triton.jit
def targets_kernel(target_ptr, weight_ptr, summary_ptr, bad_ptr, rows, vocab, ignore_index, HAS_WEIGHT: tl.constexpr,
                   MEAN: tl.constexpr, BLOCK: tl.constexpr):
    """One program over the targets: summary = (the mean's denominator, the gradient's factor c): PyTorch's
    denominator, the counted rows (neither ignored nor out of range) or the sum of their targets' class weights, and
    c = 1 / it for the mean, else 1; bad = (the first row whose target is neither ignore_index nor in [0, vocab),
    that target), or (-1, 0)."""
    total = tl.zeros([BLOCK], tl.float32)
    first = tl.full([BLOCK], rows, tl.int64)
    for start in range(0, rows, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < rows
        t = tl.load(target_ptr + offs, mask=inside, other=ignore_index)
        counted = inside & (t != ignore_index)
        valid = counted & (t >= 0) & (t < vocab)
        if HAS_WEIGHT:
            total += tl.load(weight_ptr + t, mask=valid, other=0.0).to(tl.float32)
        else:
            total += valid.to(tl.float32)
        first = tl.minimum(first, tl.where(counted & ~valid, offs.to(tl.int64), rows))
    denominator = tl.sum(total, 0)
    tl.store(summary_ptr, denominator)
    if MEAN:
        tl.store(summary_ptr + 1, 1.0 / denominator)
    else:
        tl.store(summary_ptr + 1, 1.0)
    row = tl.min(first, 0)
    tl.store(bad_ptr, tl.where(row < rows, row, -1))
    tl.store(bad_ptr + 1, tl.load(target_ptr + row, mask=row < rows, other=0))


def below_autograd():
    """The lab's ops called past their autograd kernels (lab/ops.py: Python functions that refuse an input that
    requires grad), straight to their CUDA kernels: the callers here hand them no such input (lab.cross_entropy's
    autograd is its own), and each autograd kernel cost 40 µs of host time a call (cProfile, H200 host), most of a
    short call's."""
    return torch._C._AutoDispatchBelowAutograd()


TARGETS_BLOCK = 1024  # targets_kernel's chunk: 8 KiB of int64 targets a step


class TargetCheck:
    """A call's check of its targets, launched on the GPU (or run, on the CPU) and not yet looked at: the first row
    whose target is neither ignore_index nor in [0, vocab), and that target, land in `found` ([row, target], row -1
    where none is; pinned host memory on a GPU) when the event `landed`, recorded right after the targets' step that
    writes it (before the loss's kernel), completes. wait() waits for that alone and raises the ValueError `name`
    gives. Dropped without a wait, it waits then: the GPU writes `found` until the event, and freed pinned memory is
    handed out again."""

    def __init__(self, name: str, found: torch.Tensor, vocab: int, ignore_index: int):
        self.name, self.found, self.vocab, self.ignore_index = name, found, vocab, ignore_index
        self.landed = torch.cuda.Event() if found.is_pinned() else None
        if self.landed is not None:
            self.landed.record()

    def wait(self) -> None:
        """Raise for a bad target, once the check has landed (at most once: a second wait is a no-op)."""
        found, self.found = self.found, None
        if found is None:
            return
        if self.landed is not None:
            self.landed.synchronize()
        row, target = found.tolist()
        if row >= 0:
            raise out_of_range(self.name, target, row, self.vocab, self.ignore_index)

    def __del__(self):
        if self.found is not None and self.landed is not None:
            with contextlib.suppress(Exception):  # at interpreter exit, CUDA may be gone
                self.landed.synchronize()


def _run(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int, reduction: str,
         smoothing: float, z_loss: float, softcap: float | None, dx: torch.Tensor | None, whole_row: bool,
         wrap=lambda kernel: kernel, config: tuple[int, int, int] | None = None, cuda: bool = False,
         check: str | None = None) -> torch.Tensor:
    """The loss (reduced), with dlogits written into dx unless dx is None (_launch), and, where check names the
    caller, the wait for the targets' step and a ValueError with that name if a target is out of range (the kernels
    write NaN in its row and read nothing at it). The wait is for the targets' step alone, after the loss's kernels
    are launched: the GPU is not left idle while Python runs, as a sync before the launches would leave it. None: no
    check (under torch.compile and in a CUDA graph's capture, where a bad target's row is NaN)."""
    loss, pending = _launch(logits, target, weight, ignore_index, reduction, smoothing, z_loss, softcap, dx,
                            whole_row, wrap, config, cuda, check)
    if pending is not None:
        pending.wait()
    return loss


def _launch(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
            reduction: str, smoothing: float, z_loss: float, softcap: float | None, dx: torch.Tensor | None,
            whole_row: bool, wrap, config: tuple[int, int, int] | None, cuda: bool, check: str | None
            ) -> tuple[torch.Tensor, TargetCheck | None]:
    """_run's launches, three steps: the targets (the reduction's factor, the first bad target), the kernel, the
    reduction; returns the loss and the check of the targets not yet waited for (None without one). wrap: how the
    Triton kernels are launched (traceable in an op); cuda: the CUDA cluster kernel instead of the Triton one, its
    ops doing the targets' step and the kernel with the reduction (csrc/bindings.cpp; dx not the logits, or None:
    the loss alone; no label smoothing, z-loss or soft-capping)."""
    rows, vocab = logits.shape
    if check is not None and logits.is_cuda and torch.cuda.is_current_stream_capturing():
        check = None  # a CUDA graph being captured: nothing may wait, and the replays check nothing either
    loss_rows = torch.empty(rows, dtype=torch.float32, device=logits.device)
    summary = torch.empty(2, dtype=torch.float32, device=logits.device)
    # The bad target: written straight into pinned host memory where it is checked on a GPU (a copy after the step
    # costs more: csrc/bindings.cpp, cross_entropy_targets_out), else into a tensor of the logits' device.
    found = None if check is None else torch.empty(2, dtype=torch.int64, pin_memory=logits.is_cuda)
    cuda = cuda and logits.numel() > 0
    if cuda:
        weight = None if weight is None else weight.float().contiguous()
        with below_autograd():
            torch.ops.lab.cross_entropy_targets(target, weight, vocab, ignore_index, reduction, summary=summary,
                                                found=found)
    else:
        bad = found if found is not None else torch.empty(2, dtype=torch.int64, device=logits.device)
        wrap(targets_kernel)[(1,)](target, weight if weight is not None else summary, summary, bad, rows, vocab,
                                   ignore_index, HAS_WEIGHT=weight is not None, MEAN=reduction == "mean",
                                   BLOCK=TARGETS_BLOCK)
    pending = TargetCheck(check, found, vocab, ignore_index) if check is not None else None
    if cuda:
        loss = torch.empty((), dtype=torch.float32, device=logits.device)
        with below_autograd():
            torch.ops.lab.cross_entropy_cluster(logits, target, weight, summary, ignore_index, reduction,
                                                loss_rows=loss_rows, dlogits=dx, loss=loss)
        return loss_rows if reduction == "none" else loss, pending
    if logits.numel():
        block, num_warps = ((triton.next_power_of_2(vocab), 4 if vocab <= 2048 else 8 if vocab <= 8192 else 16)
                            if whole_row else launch_config(vocab, logits.element_size()))
        programs = rows
        if config is not None:  # (block, warps, programs): a tuner's
            block, num_warps, programs = config[0], config[1], min(rows, config[2])
        wrap(cross_entropy_kernel)[(programs,)](
            logits, target, weight if weight is not None else logits, summary[1:], loss_rows,
            dx if dx is not None else logits, logits.stride(0), dx.stride(0) if dx is not None else 0, rows,
            vocab, ignore_index, float(smoothing), float(z_loss), float(softcap or 1.0), BLOCK=block,
            WHOLE_ROW=whole_row, HAS_WEIGHT=weight is not None, SOFTCAP=softcap is not None,
            WRITE_GRAD=dx is not None, num_warps=num_warps)
    else:  # no vocabulary: every counted row's loss is NaN (log of an empty sum), as PyTorch's
        loss_rows = torch.where(target != ignore_index, float("nan"), 0.0)
    if reduction == "none":
        return loss_rows, pending
    return (loss_rows.sum() / summary[0] if reduction == "mean" else loss_rows.sum()), pending


def out_of_range(name: str, target: int, row: int, vocab: int, ignore_index: int) -> ValueError:
    """The error for a target outside [0, vocab) that is not ignore_index (the first such, at `row`)."""
    return ValueError(f"{name}: a target is out of range ({target}, row {row}): targets must be in [0, {vocab}) or "
                      f"ignore_index ({ignore_index})")


def _check_variant(logits: torch.Tensor, target: torch.Tensor, options, whole_row: bool, name: str, cuda: bool
                   ) -> None:
    """What a variant's kernel takes: the inputs (check_inputs), the options (the CUDA kernel's), the row (fused's)."""
    check_inputs(logits, target, options.weight, name)
    if cuda and (options.label_smoothing or options.z_loss or options.softcap is not None):
        raise ValueError(f"{name}: the CUDA kernel has no label smoothing, z-loss or soft-capping (the Triton "
                         "kernel's)")
    if whole_row and logits.shape[1] > FUSED_MAX_V:
        raise ValueError(f"{name}: rows of {logits.shape[1]} logits exceed the {FUSED_MAX_V} that fit in one program")


def cross_entropy_fwd_bwd(logits: torch.Tensor, target: torch.Tensor, options, out=None, whole_row: bool = False,
                          name: str = "triton.looped", cuda: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, dlogits) of the options' cross-entropy (lab/operators/cross_entropy.py's CrossEntropyOptions: any
    object with ignore_index, reduction, label_smoothing, z_loss, softcap and weight); out: a (loss, dlogits) pair
    to write into."""
    _check_variant(logits, target, options, whole_row, name, cuda)
    dx = rows_like(logits) if out is None or (cuda and not rows_match(logits, out[1])) else out[1]
    loss = _run(logits, target, options.weight, options.ignore_index, options.reduction, options.label_smoothing,
                options.z_loss, options.softcap, dx, whole_row, cuda=cuda, check=name)
    if out is None:
        return loss, dx
    if dx is not out[1]:  # an `out` whose rows lie otherwise than the logits': the CUDA kernel wrote beside it
        out[1].copy_(dx)
    out[0].copy_(loss)
    return out


def cross_entropy_fused(logits: torch.Tensor, target: torch.Tensor, options, out=None):
    return cross_entropy_fwd_bwd(logits, target, options, out, whole_row=True, name="triton.fused")


def cross_entropy_looped(logits: torch.Tensor, target: torch.Tensor, options, out=None):
    return cross_entropy_fwd_bwd(logits, target, options, out, whole_row=False, name="triton.looped")


def cross_entropy_loss(logits: torch.Tensor, target: torch.Tensor, options, whole_row: bool = False,
                       name: str = "triton.looped", cuda: bool = False) -> tuple[torch.Tensor]:
    """(loss,): the options' loss alone, as evaluation computes it: the kernels without dlogits read the logits once
    and write nothing of their size (looped: twice with label smoothing, whose sum over the row needs lse first)."""
    _check_variant(logits, target, options, whole_row, name, cuda)
    return (_run(logits, target, options.weight, options.ignore_index, options.reduction, options.label_smoothing,
                 options.z_loss, options.softcap, None, whole_row, cuda=cuda, check=name),)


def cross_entropy_loss_fused(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor]:
    return cross_entropy_loss(logits, target, options, whole_row=True, name="triton.fused")


def cross_entropy_loss_looped(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor]:
    return cross_entropy_loss(logits, target, options, whole_row=False, name="triton.looped")


# --- the ops of lab.cross_entropy: opaque to torch.compile, their kernels traced through wrap_triton -------------
# The inputs are checked by the entry (lab/losses.py); these check what the kernel needs without a sync.


def loss_and_grad(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                  reduction: str, label_smoothing: float, z_loss: float, softcap: float | None, dx: torch.Tensor | None,
                  wrap=lambda kernel: kernel, check: bool = False) -> torch.Tensor:
    """The loss, dlogits written into dx (None: not written; the logits themselves: over them), with the kernel the
    lab's entry takes for the row length (whole_row_fits). The ops below run it traced; lab.cross_entropy runs it
    directly when not compiled (an op's Python dispatch costs host time on every call). check: raise for a target
    out of range, waiting for the targets' step alone (TargetCheck; not under torch.compile)."""
    loss, pending = loss_and_grad_checked_later(logits, target, weight, ignore_index, reduction, label_smoothing,
                                                z_loss, softcap, dx, wrap, check)
    if pending is not None:
        pending.wait()
    return loss


def loss_and_grad_checked_later(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                                ignore_index: int, reduction: str, label_smoothing: float, z_loss: float,
                                softcap: float | None, dx: torch.Tensor | None, wrap=lambda kernel: kernel,
                                check: bool = True) -> tuple[torch.Tensor, TargetCheck | None]:
    """loss_and_grad's launches, the check of the targets (where check) launched and not waited for: (the loss, the
    check or None), which the caller waits for where it needs the answer (lab.cross_entropy's backward). A wait in
    the forward would hold the host until the GPU had done all the work queued before the loss
    (notebook/cross-entropy-host-time/)."""
    check_inputs(logits, target, weight, "lab.cross_entropy")
    return _launch(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, dx,
                   whole_row_fits(logits.shape[1]), wrap, None,
                   cuda_takes(logits, dx, label_smoothing, z_loss, softcap), "lab.cross_entropy" if check else None)


@triton_op("lab_triton::cross_entropy", mutates_args=())
def cross_entropy_op(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
                     reduction: str, label_smoothing: float, z_loss: float, softcap: float | None, with_grad: bool
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, dlogits): dlogits of the loss written by the same kernel where with_grad, else an empty tensor (the
    loss alone reads the logits once and writes nothing of their size)."""
    dx = rows_like(logits) if with_grad else None
    loss = loss_and_grad(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, dx,
                         traceable)
    return loss, dx if dx is not None else logits.new_empty(0)


@triton_op("lab_triton::cross_entropy_", mutates_args=("logits",))
def cross_entropy_inplace_op(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None,
                             ignore_index: int, reduction: str, label_smoothing: float, z_loss: float,
                             softcap: float | None, check: bool = False) -> torch.Tensor:
    """The loss, with dlogits written over the logits (each element read before it is written, by one program).
    check: raise for a target out of range (eagerly; the logits then hold what the kernel wrote, NaN in that row)."""
    return loss_and_grad(logits, target, weight, ignore_index, reduction, label_smoothing, z_loss, softcap, logits,
                         traceable, check)


def _setup_context(ctx, inputs, output):
    ctx.with_grad = inputs[-1]
    ctx.save_for_backward(output[1])


def _backward(ctx, grad_loss, _grad_dlogits):
    """The logits' gradient: the one the forward wrote (with_grad), scaled in place by the loss's gradient."""
    (dlogits,) = ctx.saved_tensors
    if not ctx.with_grad:
        raise RuntimeError("lab_triton::cross_entropy: the forward ran without with_grad, so no gradient was written")
    torch.ops.lab_triton.scale_rows_(dlogits, grad_loss)
    return (dlogits,) + (None,) * 8


torch.library.register_autograd("lab_triton::cross_entropy", _backward, setup_context=_setup_context)


@triton.jit
def scale_rows_kernel(g_ptr, scale_ptr, g_stride, scale_stride, n_cols, BLOCK: tl.constexpr):
    """g[row] *= scale[row * scale_stride], skipped (nothing read or written) where the scale is 1: the upstream
    gradient of a loss at the end of a graph."""
    row = tl.program_id(0).to(tl.int64)
    s = tl.load(scale_ptr + row * scale_stride)
    if s != 1.0:
        cols = tl.arange(0, BLOCK)
        for start in tl.range(0, n_cols, BLOCK):
            offs = start + cols
            inside = offs < n_cols
            g = tl.load(g_ptr + row * g_stride + offs, mask=inside).to(tl.float32)
            tl.store(g_ptr + row * g_stride + offs, (g * s).to(g_ptr.dtype.element_ty), mask=inside)


def scale_rows(g: torch.Tensor, scale: torch.Tensor, wrap=lambda kernel: kernel) -> None:
    """g (M x V) scaled in place by the upstream gradient of the loss: a scalar (mean, sum) or one per row (none).
    The CUDA kernel where the extension has it (csrc/cross_entropy/cluster.cu, scale_rows: a Triton launch from the
    autograd thread cost about 0.8 ms of host time a call on an H100), else the Triton one."""
    if g.numel():
        scale = scale.float()
        if g.is_cuda and hasattr(torch.ops.lab, "cross_entropy_scale_rows_"):
            with below_autograd():
                torch.ops.lab.cross_entropy_scale_rows_(g, scale)
            return
        wrap(scale_rows_kernel)[(g.shape[0],)](g, scale, g.stride(0), 0 if scale.dim() == 0 else scale.stride(0),
                                              g.shape[1], BLOCK=4096, num_warps=8)


@triton_op("lab_triton::scale_rows_", mutates_args=("g",))
def scale_rows_(g: torch.Tensor, scale: torch.Tensor) -> None:
    """scale_rows as an op torch.compile traces."""
    scale_rows(g, scale, traceable)
