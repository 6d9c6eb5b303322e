"""CUDA C++ variants: csrc/<operator>/<variant>.cu, bound by the extension lab._C as
torch.ops.lab.<variant> (softmax) or torch.ops.lab.<operator>_<variant> (the other operators).

Adding a CUDA variant is its .cu file (setup.py finds it and the bindings register it) plus its one
`_register` line below, which holds its facts for the harness: traffic, description, limits.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from lab import ops
from lab.dispatch import PACK_BYTES, pack_elements
from lab.inputs import Shape
from lab.registry import Traffic, Unavailable, Variant, register


def load_extension() -> None:
    """lab.ops.load_extension for the harness: lab._C's ops made ready, or Unavailable with the reason."""
    try:
        ops.load_extension()
    except ops.ExtensionUnavailable as e:
        raise Unavailable(str(e)) from e


def torch_op(op: str, name: str) -> str:
    """The torch.ops.lab name of a variant: softmax's keep their bare names."""
    return name if op == "softmax" else f"{op}_{name}"


def torch_op_names() -> list[str]:
    return [torch_op(op, name) for op, variants in CUDA_OPS.items() for name in variants] + [AUTO_OP]


def op_kernel(name: str, min_capability: tuple[int, int] | None = None, needs: str = ""):
    def build():
        load_extension()
        if not torch.cuda.is_available():
            raise Unavailable("compiled (lab._C); needs a GPU to run")
        if min_capability and torch.cuda.get_device_capability() < min_capability:
            major, minor = min_capability
            raise Unavailable(f"needs {needs} (compute capability {major}.{minor} or newer)")
        functional = getattr(torch.ops.lab, name).default
        with_out = getattr(torch.ops.lab, name).out

        def kernel(*inputs: torch.Tensor) -> torch.Tensor:
            """kernel(*operator inputs) or kernel(*operator inputs, out)."""
            if len(inputs) > arity:
                *args, out = inputs
                with_out(*args, out=out)  # returns nothing (see csrc/bindings.cpp)
                return out
            return functional(*inputs)

        arity = len(functional._schema.arguments)

        return kernel

    return build


AUTO_OP = "softmax"  # torch.ops.lab.softmax: the dispatching entry, registered as cuda.auto


class ClusterShape(NamedTuple):
    """A resident CTA shape of cuda.cluster, as torch.ops.lab_tune.cluster_shapes lists them."""

    threads: int
    elems: int  # elements of row data per thread
    stages: int  # rows staged ahead through shared memory (0: loaded straight into registers)
    packed: bool  # held as the 16-bit packs loaded, two elements per register (float16, bfloat16 only)
    # No row loop: one row per CTA, launched one cluster per row only (float16, bfloat16 only)
    one_row: bool = False

    def runs(self, dtype: torch.dtype) -> bool:
        """Whether the shape is compiled for `dtype` (a packed or one-row one for 16-bit dtypes only)."""
        return not (self.packed or self.one_row) or torch.empty((), dtype=dtype).element_size() == 2

    def launches(self, persistent: bool) -> bool:
        """Whether the shape takes that grid: a one-row shape takes one cluster per row only."""
        return not (persistent and self.one_row)

    def label(self) -> str:
        return f"{self.threads}x{self.elems}s{self.stages}{'P' if self.packed else ''}{'R' if self.one_row else ''}"


CLUSTER_SHAPE_FIELDS = len(ClusterShape._fields)


def cluster_shapes() -> list[ClusterShape]:
    """cuda.cluster's resident shapes compiled into lab._C, in the order the tuning ops index them."""
    load_extension()
    flat = list(torch.ops.lab_tune.cluster_shapes())
    n = CLUSTER_SHAPE_FIELDS
    if len(flat) % n:
        raise RuntimeError(f"lab._C lists its cluster shapes in {len(flat)} numbers, not {n} per shape: an older "
                           "build? Rebuild with bash build.sh")
    return [ClusterShape(*flat[i:i + 3], bool(flat[i + 3]), bool(flat[i + 4])) for i in range(0, len(flat), n)]


class BlockShape(NamedTuple):
    """A launch shape of cuda.register_cached compiled for tuning (torch.ops.lab_tune.register_cached_shapes):
    `threads` per row, `elems` per thread, `block` threads per block (block // threads rows per block)."""

    threads: int
    elems: int
    block: int
    packed: bool  # 16-bit elements held two to a register (else as floats); False for float32
    staged: bool  # the row's packs copied to shared memory by cp.async first, then read from there
    lean: bool = False  # the straight-line kernel (aligned rows of 32-bit offsets; else the shape's own kernel)

    def holds(self, n: int) -> bool:
        return n <= self.threads * self.elems

    def label(self) -> str:
        flags = ("P" if self.packed else "") + ("S" if self.staged else "") + ("L" if self.lean else "")
        return f"{self.threads}x{self.elems}/{self.block}{flags}"


BLOCK_SHAPE_FIELDS = len(BlockShape._fields)


def register_cached_shapes(dtype: torch.dtype) -> list[BlockShape]:
    """cuda.register_cached's tuning shapes for `dtype`, in the order torch.ops.lab_tune.register_cached_shape
    indexes them."""
    load_extension()
    flat = list(torch.ops.lab_tune.register_cached_shapes(dtype))
    n = BLOCK_SHAPE_FIELDS
    if len(flat) % n:
        raise RuntimeError(f"lab._C lists {len(flat)} ints of register_cached tuning shapes, not a multiple of "
                           f"BlockShape's {n} fields: the extension and lab/backends/cuda_variants.py disagree")
    return [BlockShape(*flat[i:i + 3], *map(bool, flat[i + 3:i + n])) for i in range(0, len(flat), n)]


def cluster_thresholds(dtype: torch.dtype) -> list[int]:
    """The longest row of each entry of cuda.cluster's launch table (for any number of rows), and past the last
    entry each length where the streaming path's cluster size grows, found by asking the launcher's own plan
    (torch.ops.lab_tune.cluster_plan) where it changes: between each two powers of two from 2^5 to 2^21 where the
    plans differ, bisected down to the last length of each plan. Entries end between powers of two too (float32
    12288, bfloat16 24576). A length inside a stretch whose two ends share a plan is not looked at: the table's
    neighbouring entries differ, so a plan does not come back after another."""
    load_extension()

    def plan(n: int) -> list[int]:
        return list(torch.ops.lab_tune.cluster_plan(n, dtype))

    ends: list[int] = []

    def split(lo: int, hi: int, at_lo: list[int], at_hi: list[int]) -> None:  # the plan changes in (lo, hi]
        if hi - lo == 1:
            ends.append(lo)
            return
        mid = (lo + hi) // 2
        at_mid = plan(mid)
        if at_mid != at_lo:
            split(lo, mid, at_lo, at_mid)
        if at_mid != at_hi:
            split(mid, hi, at_mid, at_hi)

    lengths = [2**k for k in range(5, 22)]
    plans = [plan(n) for n in lengths]
    for lo, hi, at_lo, at_hi in zip(lengths, lengths[1:], plans, plans[1:], strict=False):
        if at_lo != at_hi:
            split(lo, hi, at_lo, at_hi)
    return ends


def backward_cluster_shapes() -> list[tuple[int, int, int]]:
    """softmax_backward's cuda.cluster CTA shapes compiled into lab._C, in the order its tuning op indexes them:
    (threads, 16-byte packs of y and of dy per thread, dy in shared memory 1 or 0)."""
    load_extension()
    flat = list(torch.ops.lab_tune.softmax_backward_cluster_shapes())
    if len(flat) % 3:
        raise RuntimeError(f"lab._C lists its backward cluster shapes in {len(flat)} numbers, not 3 per shape: an "
                           "older build? Rebuild with bash build.sh")
    return [tuple(flat[i:i + 3]) for i in range(0, len(flat), 3)]


def backward_cluster_persistent_shapes(dtype: torch.dtype) -> list[tuple[Shape, int]]:
    """(shape, cluster size) at the longest row of each entry of softmax_backward's cuda.cluster table that launches
    a persistent grid, on more rows than twice the clusters one wave of the current GPU holds, so that every cluster
    loops over rows (the shapes of dy in shared memory copying each row into the slots the row before read). Its
    entries end at powers of two from 2^11, up to the last before two_pass (plan shape -1), asked of the launcher's
    own plan (torch.ops.lab_tune.softmax_backward_cluster_plan)."""
    load_extension()
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    shapes, n = [], 2048
    while (plan := list(torch.ops.lab_tune.softmax_backward_cluster_plan(n, dtype)))[0] >= 0:
        if plan[2]:
            shapes.append((Shape(2 * sms // plan[1] + 3, n), plan[1]))
        n *= 2
    return shapes


def auto_thresholds(dtype: torch.dtype) -> list[int]:
    """The row lengths of the dispatch table of this GPU model (lab/dispatch.py), and the default rule's."""
    from lab import dispatch

    return sorted({e[0] for e in dispatch.saved_entries("entries", dtype)} | {2048, 8192})


def rebuild_auto_table(results: list) -> None:
    """cuda.auto's `prepare`: the dispatch table from this run's results so far (lab/dispatch.py)."""
    from lab import dispatch, tabulate
    from lab.env import git_commit

    if torch.cuda.is_available():
        dispatch.install(tabulate.build_table(results, dispatch.current_gpu(), f"this run ({git_commit()})"))


# cuda.grid_split's launch (csrc/softmax/grid_split.cu: kThreads, kElems, kCtasPerSm, kMaxGrid): one CTA
# of 512 threads per SM, each holding at most 64 elements of its slice in registers.
GRID_SPLIT_THREADS, GRID_SPLIT_ELEMS, GRID_SPLIT_MAX_GRID = 512, 64, 1024
GRID_SPLIT_DEFAULT_SMS = 132  # the H200's, for the rule on a machine without a GPU


def grid_split_reason(shape: Shape, dtype: torch.dtype) -> str | None:
    """The rule its launcher enforces: with a grid of S CTAs (one per SM), a row gets G = S // M CTAs
    while M <= S // 2 (else 1), and each CTA's slice of ceil(N / K) 16-byte packs must fit its registers."""
    if shape.m == 0:
        return None  # nothing is launched
    sms = (torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
           if torch.cuda.is_available() else GRID_SPLIT_DEFAULT_SMS)
    grid = min(GRID_SPLIT_MAX_GRID, sms)
    parts = grid // shape.m if shape.m <= grid // 2 else 1
    k = pack_elements(dtype)
    slice_packs = ((shape.n + k - 1) // k + parts - 1) // parts
    if slice_packs <= GRID_SPLIT_THREADS * GRID_SPLIT_ELEMS // k:
        return None
    return (f"M = {shape.m} rows of N = {shape.n} do not fit the registers of {grid} CTAs: {parts} CTA(s) per row "
            f"hold at most {parts * GRID_SPLIT_THREADS * GRID_SPLIT_ELEMS} elements (Limits in grid_split.cu)")


def _register(name: str, traffic: Traffic, description: str, operator: str = "softmax",
              torch_name: str | None = None, min_capability: tuple[int, int] | None = None, needs: str = "",
              **limits) -> Variant:
    """Register the op of csrc/<operator>/<name>.cu as the variant cuda.<name> of `operator`. A
    row-length limit (max_n, max_n_reason) is the one its launcher enforces; the header of its .cu says
    why. min_capability: the GPU generation the kernels need (`needs` says what for)."""
    op_name = TORCH_OPS[(operator, f"cuda.{name}")] = torch_name or torch_op(operator, name)
    return register(Variant(
        op=operator, name=f"cuda.{name}", backend="cuda", description=description,
        build=op_kernel(op_name, min_capability, needs), traffic=traffic, writes_out=True, **limits,
    ))


TORCH_OPS: dict[tuple[str, str], str] = {}
"""Each CUDA variant's torch.ops.lab op, by its key (operator, variant name); cuda.auto's is
torch.ops.lab.softmax."""


# The order is the ladder's (the listing's order).
CUDA_VARIANTS = {v.name.removeprefix("cuda."): v for v in (
    _register("three_pass", Traffic(3, 1),
              "block per row; max, sum of exp, write: 3 sweeps, shared-memory tree reductions"),
    _register("warp_shuffle", Traffic(3, 1),
              "three_pass with two-level reductions (warp xor shuffles, then one warp)"),
    _register("online", Traffic(2, 1),
              "single sweep for (max, sum) with the online merge, then one write sweep"),
    _register("register_cached", Traffic(1, 1),
              "row held in registers (sub-warp/warp per short row, block per medium row; 16-bit types as "
              "their loaded words, two per register): 1 read, 1 write",
              max_n=16384, max_n_reason="the row must fit in one block's registers (kMaxCols in register_cached.cu)"),
    _register("tiled_rows", Traffic(1, 1),
              "short rows in tiles of consecutive rows staged through shared memory by 16-byte cp.async copies "
              "(whole packs whatever each row's alignment), a group of 1-32 lanes per row: 1 read, 1 write",
              max_n=512, max_n_reason="a row must fit one warp's registers, 16 elements a lane (kMaxCols in "
              "tiled_rows.cu)"),
    _register("cluster", Traffic(1, 1),
              "row split across a thread-block cluster (1-16 CTAs, slices in registers, one DSMEM exchange), "
              "one cluster per row, the first wave started in staggered groups (or a persistent grid with "
              "cp.async prefetch): 1 read, 1 write (2 reads past 512K elements, 1M in 16 bits)",
              min_capability=(9, 0), needs="thread-block clusters", thresholds=cluster_thresholds),
    _register("grid_split", Traffic(1, 1),
              "few long rows spread over every SM: a cooperative grid (one CTA per SM), G = SMs / M CTAs per row, "
              "slices in registers, partial (max, sum) merged after one grid barrier: 1 read, 1 write",
              shape_reason=grid_split_reason),
)}
# After the variants it dispatches to, so that the runner has timed them at a point before auto.
AUTO = _register("auto", Traffic(1, 1),
                 "torch.ops.lab.softmax: each (dtype, N, M) to the fastest CUDA variant measured on this GPU "
                 "(dispatch table), else a default rule", torch_name=AUTO_OP, prepare=rebuild_auto_table,
                 thresholds=auto_thresholds)

VECTOR_ADD_VARIANTS = {v.name.removeprefix("cuda."): v for v in (
    _register("grid_stride", Traffic(2, 1), "16-byte accesses, 4 packs of a and b in flight per thread, grid-stride "
              "loop over a few waves of blocks", operator="vector_add"),
)}
SOFTMAX_BACKWARD_VARIANTS = {v.name.removeprefix("cuda."): v for v in (
    _register("two_pass", Traffic(4, 1), "block per row: sum(dy * y), then dx = y * (dy - s): 2 reads of y and dy",
              operator="softmax_backward"),
    _register("register_cached", Traffic(2, 1), "y and dy rows in registers as loaded (2-32 lanes per short row, a "
              "block per medium row): 1 read of each, 1 write", operator="softmax_backward", max_n=16384,
              max_n_reason="two rows must fit in one block's registers (kMaxCols in register_cached.cu)"),
    _register("cluster", Traffic(2, 1), "y and dy rows split across a thread-block cluster (1-16 CTAs, slices in "
              "registers, sum(dy * y) exchanged once through DSMEM): 1 read of each, 1 write (2 reads past what 16 "
              "CTAs' registers hold: kMaxCols in cluster.cu)", operator="softmax_backward", min_capability=(9, 0),
              needs="thread-block clusters"),
)}


# cross_entropy: an op that writes the loss per row and dlogits and returns nothing; the reduction, the checks of the
# targets and the options it lacks are Python's (triton_kernels/cross_entropy.py, cross_entropy_fwd_bwd).
def require_cluster_kernel() -> None:
    """Raises Unavailable unless the cross-entropy cluster kernel can run here: built, a GPU, clusters (sm_90+)."""
    load_extension()
    if not torch.cuda.is_available():
        raise Unavailable("compiled (lab._C); needs a GPU to run")
    if torch.cuda.get_device_capability() < (9, 0):
        raise Unavailable("needs thread-block clusters (compute capability 9.0 or newer)")


def build_cross_entropy_cluster():
    require_cluster_kernel()
    from triton_kernels.cross_entropy import cross_entropy_fwd_bwd

    def cross_entropy_cluster(logits: torch.Tensor, target: torch.Tensor, options, out=None):
        return cross_entropy_fwd_bwd(logits, target, options, out, name="cuda.cluster", cuda=True)

    return cross_entropy_cluster


def build_cross_entropy_loss_cluster():
    require_cluster_kernel()
    from triton_kernels.cross_entropy import cross_entropy_loss

    def cross_entropy_loss_cluster(logits: torch.Tensor, target: torch.Tensor, options):
        return cross_entropy_loss(logits, target, options, name="cuda.cluster", cuda=True)

    return cross_entropy_loss_cluster


def _too_long(vocab: int, dtype: torch.dtype, aligned: bool) -> str | None:
    longest = torch.ops.lab.cross_entropy_cluster_max_cols(dtype, aligned)
    if vocab <= longest:
        return None
    return (f"V > {longest} for rows {'on' if aligned else 'off'} 16-byte boundaries: the launch tables keep no "
            "longer row in a cluster's registers")


def cross_entropy_cluster_reason(shape: Shape, dtype: torch.dtype) -> str | None:
    """Rows longer than the kernel takes (its own limit, asked of the extension), for rows as the suite lays
    them out: contiguous or with the shape's row stride, from the start of their storage."""
    if not hasattr(torch.ops.lab, "cross_entropy_cluster_max_cols"):
        return None  # not built: the variant is unavailable, and says so
    size = torch.empty(0, dtype=dtype).element_size()
    return _too_long(shape.n, dtype, ((shape.stride or shape.n) * size) % PACK_BYTES == 0)


def cross_entropy_cluster_launches(dtype: torch.dtype, aligned: bool, rows: int, loss_alone: bool = False
                                   ) -> dict[tuple[int, int, int], int]:
    """The longest row of each distinct launch, (shape, cluster size, persistent), that the CUDA cross-entropy
    kernel's launch tables give rows of up to its longest, for `rows` rows on 16-byte boundaries or off them, with the
    gradient or for the loss alone (torch.ops.lab_tune.cross_entropy_plan). The lengths that run every one of its
    launches (the GPU tests', the sanitizers')."""
    load_extension()
    plan = torch.ops.lab_tune.cross_entropy_plan
    launches = {}
    for n in range(1, torch.ops.lab.cross_entropy_cluster_max_cols(dtype, aligned) + 1):
        launches[tuple(plan(n, dtype, rows, aligned, not loss_alone)[:3])] = n
    return launches


def cross_entropy_cluster_options(logits: torch.Tensor, target: torch.Tensor, options) -> str | None:
    """The options it lacks, and rows longer than it takes where they lie (the randomized test's offsets)."""
    from triton_kernels.cross_entropy import rows_aligned

    if missing := options.extra_terms():
        return f"the CUDA kernel has no {', '.join(missing)} (the Triton kernel's)"
    return _too_long(logits.shape[1], logits.dtype, rows_aligned(logits))


TORCH_OPS[("cross_entropy", "cuda.cluster")] = torch_op("cross_entropy", "cluster")
CROSS_ENTROPY_VARIANTS = {"cluster": register(Variant(
    op="cross_entropy", name="cuda.cluster", backend="cuda", traffic=Traffic(1, 1), writes_out=True,
    description="softmax's cluster kernel writing the loss and dlogits: a row split over a thread-block cluster "
                "(1-16 CTAs) by its launch tables, held in registers, one read and one write (ignore_index, the "
                "reductions, class weights)",
    build=build_cross_entropy_cluster, shape_reason=cross_entropy_cluster_reason,
    case_reason=cross_entropy_cluster_options,
))}
# cross_entropy_loss: the same kernel (csrc/cross_entropy/cluster.cu) without dlogits, the loss alone.
TORCH_OPS[("cross_entropy_loss", "cuda.cluster")] = TORCH_OPS[("cross_entropy", "cuda.cluster")]
CROSS_ENTROPY_LOSS_CLUSTER = register(Variant(
    op="cross_entropy_loss", name="cuda.cluster", backend="cuda", traffic=Traffic(1, 0),
    description="cross_entropy's cuda.cluster without dlogits: the row's (max, sum) and the loss from one read",
    build=build_cross_entropy_loss_cluster, shape_reason=cross_entropy_cluster_reason,
    case_reason=cross_entropy_cluster_options,
))
# Every CUDA variant by operator and name: the files csrc/<operator>/<name>.cu.
CUDA_OPS = {"softmax": CUDA_VARIANTS, "vector_add": VECTOR_ADD_VARIANTS, "softmax_backward": SOFTMAX_BACKWARD_VARIANTS,
            "cross_entropy": CROSS_ENTROPY_VARIANTS}


