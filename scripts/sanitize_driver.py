"""Runs every CUDA variant of every operator on a few small shapes (tails, odd N, strided rows, every
launch path) so that compute-sanitizer can watch them: see scripts/sanitize.sh. Each result is
checked against its operator's float64 reference.

The inputs are made on the CPU and copied to the GPU as they are laid out (padding included), and
the outputs are copied back and checked on the CPU: the only kernels that touch the GPU's memory are
the lab's (but for lab.linear_cross_entropy's matmuls, whose section initcheck does not run). So
initcheck sees every byte the kernels read initialized by a copy it tracks, and reports only what a
kernel really reads uninitialized (memory written by kernels it does not watch would otherwise look
uninitialized to it).
"""

import argparse
import os
import sys

import torch

from lab import check, operators, registry
from lab.backends.cuda_variants import (
    AUTO,
    CUDA_OPS,
    backward_cluster_persistent_shapes,
    backward_cluster_shapes,
    cluster_shapes,
    cluster_thresholds,
    load_extension,
    register_cached_shapes,
)
from lab.dispatch import pack_elements, whole_packs
from lab.inputs import Shape, pack_stride
from lab.registry import dtype_name

load_extension()  # imports lab._C (after torch, whose libraries it links), registers torch.ops.lab.*
if not torch.cuda.is_available():
    sys.exit("sanitize_driver: lab._C loaded, but there is no CUDA GPU to run the kernels on")

# Tails, odd N, strided and misaligned rows, and every launch shape: sub-warp, warp and block groups
# of register_cached, 32 to 512 threads per block of the others, and cluster's paths: one CTA and
# clusters of 2 to 16 (resident, staged and direct), the streaming path (past 524288, misaligned rows);
# grid_split's split path (few rows, one grid barrier) and its persistent path (more rows than SMs / 2).
# register_cached takes an entry's few-rows shape where its grid is resident at once (bfloat16 N = 65 to 128,
# float32 N = 513 to 1024, 16-bit N = 257 to 512 with its exponentials in shared memory, and 16-bit N = 513 to
# 1024 at 32 registers with them, 16-bit N = 1025 to 2048 with the row kept in shared memory: 3x2000, 2x2047 of a
# wider buffer; the small M here); 20000x100 and 9000x600 are rows enough for its table's
# own shapes there, in blocks of 128 and one block per row. The lean shapes (register_cached_lean_kernel) take few
# rows of whole 16-byte packs: 5x120, 4x400, 3x776 (every dtype), 5x300 (float32); many such rows (more than one
# wave), 40000x64 and 30000x256 (every dtype), 20000x100, 9000x600 and 1300x4096 (float32). Contiguous rows of odd N
# (3001, 12001, 16383, 100003, 131071, 262147) take cluster's tables for shifted rows (cluster_plan: 1 to 16 CTAs,
# float32 262147 on a persistent grid, bfloat16 262147 streamed), 600001 its streaming path. The entries between
# the sweeps' powers of two: register_cached's 1536 (3x1536 lean few rows, 6000x1536 lean many), 3072 and 6144
# (1500x6144 lean many in 16 bits), cluster's 10240, 20480, 81920 and 151936 (float32 2 to 12 CTAs, bfloat16 3 to 10),
# 524288 one cluster per row and bfloat16 1048576 resident on 16 CTAs. cluster's entries for decode-time rows, 16 CTAs
# held as floats on a persistent grid: 2x131072 (16-bit, 256 x 32), 2x151936 (float32) and 2x200000 (256 x 64).
SHAPES = [Shape(3, 1), Shape(5, 33), Shape(7, 100, 133), Shape(5, 300), Shape(3, 700), Shape(4, 1025),
          Shape(3, 3000, 3007),
          Shape(2, 8191), Shape(2, 16384), Shape(2, 65537, 65600), Shape(3, 12001), Shape(2, 40000),
          Shape(2, 100003), Shape(2, 200000), Shape(2, 262147), Shape(1, 600001), Shape(300, 3001, 3005),
          Shape(20000, 100), Shape(9000, 600), Shape(3, 16383), Shape(2, 131071), Shape(20000, 200), Shape(9, 200),
          Shape(3, 2000), Shape(2, 2047, 2051), Shape(5, 120), Shape(4, 400), Shape(3, 776),
          Shape(40000, 64), Shape(30000, 256), Shape(1300, 4096),
          Shape(3, 1536), Shape(6000, 1536), Shape(2, 3072), Shape(2, 6144), Shape(1500, 6144), Shape(2, 10240),
          Shape(2, 20480), Shape(2, 81920), Shape(2, 131072), Shape(2, 151936), Shape(1, 524288), Shape(1, 1048576)]

# The other operators: their own edge shapes (vector lengths for vector_add).
CASES = {"softmax": SHAPES}
for op_name in CUDA_OPS:
    CASES.setdefault(op_name, list(operators.get(op_name).edge_shapes))
# cross_entropy's cluster kernel: each of its kernels (a launch shape, rows on or off 16-byte boundaries, in the
# plans of 2 rows with the gradient and in the loss alone's; the entries for many rows launch kernels these run too)
# at its longest row, in a cluster of one CTA and of several, in every dtype (the row lengths of bfloat16's tables,
# which float16 shares; float32's own). Rows on boundaries: a padded row stride where N is not whole packs; off
# them: an odd N, or a row stride one element longer.
def cross_entropy_cluster_cases() -> list[Shape]:
    from lab.backends.cuda_variants import cross_entropy_cluster_launches

    shapes = []
    for dtype in (torch.bfloat16, torch.float32):
        for aligned in (True, False):
            longest = {}
            for loss_alone in (False, True):  # softmax's plans and the loss alone's own
                for (shape, cluster, _), n in cross_entropy_cluster_launches(dtype, aligned, 2, loss_alone).items():
                    longest[shape, cluster > 1] = max(n, longest.get((shape, cluster > 1), 0))
            for n in sorted(longest.values()):
                stride = pack_stride(n, dtype, aligned)
                shapes.append(Shape(2, n, None if stride == n else stride))
    return shapes


if "cross_entropy" in CASES and hasattr(torch.ops.lab, "cross_entropy_cluster"):
    CASES["cross_entropy"] += cross_entropy_cluster_cases()

def to_gpu(t: torch.Tensor) -> torch.Tensor:
    """t on the GPU with its layout: the whole buffer it views is copied (host to device), padding too."""
    base = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage()).to("cuda")
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


parser = argparse.ArgumentParser(description=__doc__)
# linear_cross_entropy's CUDA kernels are cross_entropy's, run here through lab.linear_cross_entropy's chunks.
OPS = [*CUDA_OPS, "linear_cross_entropy"]
parser.add_argument("--op", action="append", choices=OPS, help="only this operator (repeatable)")
parser.add_argument("--variant", action="append", help="only this variant, e.g. cuda.tiled_rows (repeatable; the "
                    "sections of other variants' own paths are then skipped)")
parser.add_argument("--no-tuning-shapes", action="store_true",
                    help="skip the launch shapes compiled for tuning (torch.ops.lab_tune.*)")
parser.add_argument("--tuning-shapes-only", action="store_true",
                    help="only the launch shapes compiled for tuning (after a change to them alone)")
parser.add_argument("--tuning-label", action="append",
                    help="only the tuning shapes of this label (repeatable), e.g. 64x8/128P (register_cached) or "
                    "128x64s0P (cluster)")
args = parser.parse_args()
if args.tuning_shapes_only and (args.no_tuning_shapes or args.variant):
    parser.error("--tuning-shapes-only runs no variant's own sections, and needs the tuning shapes")
wanted = args.op or OPS

# The tool running the driver (scripts/sanitize.sh says). synccheck itself fails launches of 16 and of 64 clusters of
# more than 8 CTAs, the non-portable sizes (exchanging by st.async, as the lab does, at 9, 10, 12 and 16 CTAs; by plain
# stores at 12 and 16). 2 clusters run clean, and clusters of 2 and 8 CTAs at every count measured. So it does on
# the lab's cluster kernels (64 clusters of 12 CTAs, float32 196608's entry for many rows, which memcheck, racecheck and
# initcheck ran clean and which is right bare) and on a program of a few lines whose CTAs only exchange a float through
# distributed shared memory, which runs right bare and under racecheck (notebook/synccheck-on-16-cta-clusters).
# Under synccheck the sections below launch clusters of more than 8 CTAs on SYNCCHECK_ROWS rows at most.
TOOL = os.environ.get("SANITIZER_TOOL")
SYNCCHECK_ROWS = 2  # the most rows (one cluster each) a launch of clusters of more than 8 CTAs gets under synccheck


def synccheck_limits(cluster: int) -> bool:
    """Whether a plan's launch of clusters of this size is held to SYNCCHECK_ROWS rows (under synccheck, more than 8
    CTAs)."""
    return TOOL == "synccheck" and cluster > 8


def run_checked(op, label: str, fn, shape: Shape, dtype: torch.dtype) -> None:
    """fn on the GPU copy of op's inputs of that shape (tensors; cross_entropy's options as they are), each of its
    results checked on the CPU against op's float64 reference."""
    case = op.make_inputs(shape, dtype, "cpu", 0)
    ys = check.as_tuple(fn(*(to_gpu(t) if isinstance(t, torch.Tensor) else t for t in case)))
    ref = op.reference(*case)
    refs = check.as_tuple(ref)
    scales = check.as_tuple(op.error_scale(*case)) if op.error_scale else (None,) * len(refs)
    spec = check.output_spec(op, ref, dtype)
    held = check.held_to_dtypes(op, spec, dtype)
    for y, ref, d, h, scale in zip(ys, refs, spec.dtypes, held, scales, strict=True):
        res = check.compare(y.cpu(), ref, d, None, {d: op.tolerances[h]}, scale)
        assert res.ok, (label, op.name, shape, res.summary())


KNOWN = {v.name for variants in CUDA_OPS.values() for v in variants.values()} | {AUTO.name}
if unknown := sorted(set(args.variant or ()) - KNOWN):
    parser.error(f"--variant {', '.join(unknown)}: not a CUDA variant (one of {', '.join(sorted(KNOWN))})")


def only(name: str) -> bool:
    """Whether the section of variant `name`'s own paths runs (--variant; none with --tuning-shapes-only)."""
    return not args.tuning_shapes_only and (not args.variant or name in args.variant)


for op_name, variants in CUDA_OPS.items():
    if op_name not in wanted:
        continue
    op = operators.get(op_name)
    for variant in [*variants.values(), *([AUTO] if op_name == "softmax" else [])]:
        if not only(variant.name):
            continue
        kernel = variant.kernel()
        ran = 0
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            # Its limits (row length, per-shape reasons) may depend on the dtype: filter per dtype.
            for shape in (s for s in CASES[op_name] if variant.skip_reason(s, dtype) is None):
                run_checked(op, variant.name, kernel, shape, dtype)
                ran += 1
        print(f"{op_name} {variant.name}: ran {ran} shape and dtype cases", flush=True)


# cross_entropy_loss's cuda.cluster: the same kernel compiled without the gradient's write (the loss alone), on
# cross_entropy's cases.
if "cross_entropy" in wanted and only("cuda.cluster") and hasattr(torch.ops.lab, "cross_entropy_cluster"):
    op = operators.get("cross_entropy_loss")
    variant = registry.get("cross_entropy_loss", "cuda.cluster")
    kernel = variant.kernel()
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for shape in (s for s in CASES["cross_entropy"] if variant.skip_reason(s, dtype) is None):
            run_checked(op, "cuda.cluster, the loss alone", kernel, shape, dtype)
            ran += 1
    print(f"cross_entropy_loss cuda.cluster: ran {ran} shape and dtype cases", flush=True)


# lab.cross_entropy in place (dlogits written over the logits) on the cluster kernel's contiguous cases, and its
# backward's scale_rows with one scale for every row: 1 (each block returns at once) and 0.5.
if "cross_entropy" in wanted and only("cuda.cluster") and hasattr(torch.ops.lab, "cross_entropy_cluster"):
    import lab

    op = operators.get("cross_entropy")
    variant = registry.get("cross_entropy", "cuda.cluster")
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for shape in (s for s in CASES["cross_entropy"] if variant.skip_reason(s, dtype) is None and s.stride == s.n):
            logits, target, options = op.make_inputs(shape, dtype, "cpu", 0)
            _, ref = op.reference(logits, target, options)
            _, scale = op.error_scale(logits, target, options)
            for upstream in (1.0, 0.5):
                x = to_gpu(logits).requires_grad_()
                (lab.cross_entropy(x * 1, to_gpu(target), inplace=True) * upstream).backward()
                res = check.compare(x.grad.cpu(), ref * upstream, dtype, None, {dtype: op.tolerances[dtype]},
                                    scale * upstream)
                assert res.ok, ("lab.cross_entropy in place", shape, dtype, upstream, res.summary())
                ran += 1
    print(f"cross_entropy lab.cross_entropy in place: ran {ran} shape, dtype and upstream cases", flush=True)


# lab.linear_cross_entropy over chunks of 16 tokens (three here): each chunk's logits from cuBLAS, the cluster kernel's
# loss and gradient written over them, dx and dW (summed in float32) by matmuls, the backward's scale_rows; at
# vocabularies of the cluster kernel, 50257 padded to whole 16-byte rows of logits. Not under initcheck: it does not
# see what cuBLAS's Hopper kernels store, so every read of a matmul's output, PyTorch's own copy kernel's too, looks
# uninitialized to it (notebook/sanitizers-on-the-head); the cluster kernel's reads are initcheck's in the sections
# above, on copied logits.
# Under synccheck the chunks are of SYNCCHECK_ROWS tokens (a chunk's rows are launched as one cluster each).
if TOOL == "initcheck" and "linear_cross_entropy" in wanted:
    print("linear_cross_entropy: not run under initcheck (it does not see cuBLAS's stores)", flush=True)
if ("linear_cross_entropy" in wanted and TOOL != "initcheck" and only("cuda.cluster")
        and hasattr(torch.ops.lab, "cross_entropy_cluster")):
    from lab.backends.lab_variants import lab_head
    from lab.operators.linear_cross_entropy import train_step

    op = operators.get("linear_cross_entropy")
    chunk_tokens = SYNCCHECK_ROWS if TOOL == "synccheck" else 16
    kernel = train_step(lambda *case: lab_head(*case, chunk_tokens=chunk_tokens))
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for shape in (Shape(40, 50257, None, 64), Shape(33, 32000, None, 48)):
            print(f"linear_cross_entropy: {dtype_name(dtype)} {shape.label}, chunks of {chunk_tokens}", flush=True)
            run_checked(op, "lab.linear_cross_entropy in chunks", kernel, shape, dtype)
            ran += 1
    print(f"linear_cross_entropy lab.linear_cross_entropy in chunks: ran {ran} shape and dtype cases", flush=True)


# register_cached's PEELED kernels (ragged rows: off 16-byte boundaries, or N not a multiple of a pack), which its
# variant takes on the shapes above only where they are odd: odd N on both sides of every power of two up to its
# limit (2^k + 1 on the entry of 2^k), 197 and 209 (the 208 entry's), and 2^k + 6 (heads and tails of 6 elements),
# every distance from a boundary in 9 rows, and in up to 20000 rows of at most 4M elements (the table's own shapes
# in blocks of 128 where the rows are short enough; the sanitizers slow every access, so no more).
if "softmax" in wanted and only("cuda.register_cached"):
    op = operators.get("softmax")
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in [*(2**k + d for k in range(5, 15) for d in (-1, 1) if 2**k + d <= 16384), 38, 1030, 8198, 197, 209]:
            for rows in (9, min(20000, 4_000_000 // n)):
                run_checked(op, "register_cached peeled", torch.ops.lab.register_cached, Shape(rows, n), dtype)
                ran += 1
    print(f"softmax register_cached peeled rows: ran {ran} shape and dtype cases", flush=True)


# cluster's launch-table entries for many rows (min_rows in cluster.cu), which the shapes above, a few rows each, never
# reach: at each row length where the plan for 4096 rows differs from the plan for few, that launch (its shape, cluster
# and grid, through the tuning op) on 64 rows of it, and 1024 rows through the variant where the plan for 1024 rows
# differs too (more rows cost the CPU's float64 reference and the sanitizers' slowdown, not coverage: the kernel is
# the same). Under synccheck a plan of more than 8 CTAs a row runs on SYNCCHECK_ROWS rows, not through the variant.
# These plans are for rows on 16-byte boundaries: where the entry's longest row is not whole packs (32767), a
# contiguous input's rows would be shifted rows, which their own table takes, so the longest row of the entry that is
# whole packs runs instead (the entry's plans checked to hold there).
if "softmax" in wanted and only("cuda.cluster"):
    op = operators.get("softmax")
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in cluster_thresholds(dtype):
            few, some, many = (list(torch.ops.lab_tune.cluster_plan(n, dtype, rows)) for rows in (0, 1024, 4096))
            if few == many:
                continue
            n = whole_packs(n, dtype)
            assert [list(torch.ops.lab_tune.cluster_plan(n, dtype, rows)) for rows in (0, 1024, 4096)] == [
                few, some, many], (n, dtype)
            run_checked(op, f"cluster many rows {many}",
                        lambda t, p=many: torch.ops.lab_tune.cluster(t, p[0], p[1], bool(p[2]), p[3], p[4]),
                        Shape(SYNCCHECK_ROWS if synccheck_limits(many[1]) else 64, n), dtype)
            ran += 1
            if some != few and not synccheck_limits(some[1]):
                run_checked(op, "cluster 1024 rows", torch.ops.lab.cluster, Shape(1024, n), dtype)
                ran += 1
    print(f"softmax cluster entries for many rows: ran {ran} shape and dtype cases", flush=True)


# tiled_rows' tiles: contiguous rows of odd N, whose tiles start at every distance from a 16-byte boundary, over
# several tiles (the last partial), into a contiguous output (in place in shared memory) and into one an element
# off (y's image in a buffer of its own).
if "softmax" in wanted and only("cuda.tiled_rows"):
    op = operators.get("softmax")
    ran = 0

    def tiled_rows_into_offset(t: torch.Tensor) -> torch.Tensor:
        out = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)[1:].view(t.shape)
        torch.ops.lab.tiled_rows.out(t, out=out)
        return out

    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in (1, 7, 17, 63, 197, 511):
            for rows in (9, 300):
                run_checked(op, "tiled_rows", torch.ops.lab.tiled_rows, Shape(rows, n), dtype)
                run_checked(op, "tiled_rows into an offset output", tiled_rows_into_offset, Shape(rows, n), dtype)
                ran += 2
    print(f"softmax tiled_rows odd rows: ran {ran} shape, dtype and output cases", flush=True)


SMEM_PER_BLOCK = 227 * 1024  # the most dynamic shared memory a CTA may have on sm_90

# The launch shapes compiled for tuning, which no variant's table may take today: register_cached's
# (every one on the shapes above that it holds) and cluster's resident shapes (each on 3 rows split over
# 2 CTAs, the last pack of each CTA's slice partly empty, and the direct ones also on 9 rows of an odd
# length, shifted, on a persistent grid and one cluster per row;
# a shape whose staging exceeds a CTA's shared memory in a dtype is refused there, launching nothing).
if "softmax" in wanted and not args.no_tuning_shapes and not args.variant:
    op = operators.get("softmax")
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for index, rc in enumerate(register_cached_shapes(dtype)):
            if args.tuning_label and rc.label() not in args.tuning_label:
                continue
            for shape in (s for s in SHAPES if rc.holds(s.n)):
                run_checked(op, f"register_cached {rc.label()}",
                            lambda t, i=index: torch.ops.lab_tune.register_cached_shape(t, i), shape, dtype)
                ran += 1
    print(f"softmax register_cached tuning shapes: ran {ran} shape, dtype and launch cases", flush=True)
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        size = dtype.itemsize
        pack = pack_elements(dtype)
        for index, cs in enumerate(cluster_shapes()):
            smem = cs.stages * cs.threads * cs.elems * size
            if not cs.runs(dtype) or smem > SMEM_PER_BLOCK:
                continue  # compiled for 16-bit types only, or staging more than a CTA may have in this dtype
            if args.tuning_label and cs.label() not in args.tuning_label:
                continue
            n = 2 * cs.threads * cs.elems - 3 * pack  # whole packs: the rows stay 16-byte aligned
            # An odd length too where the shape loads straight into registers: rows off 16-byte boundaries,
            # taken shifted (cluster.cu, SHIFTED), every distance from a boundary in 9 rows.
            for shape in [Shape(3, n)] + ([Shape(9, n - 1)] if cs.stages == 0 else []):
                for persistent in (p for p in (True, False) if cs.launches(p)):  # one-row shapes: one per row
                    run_checked(op, f"cluster {cs.label()} c2 persistent={persistent}",
                                lambda t, i=index, p=persistent: torch.ops.lab_tune.cluster(t, i, 2, p), shape, dtype)
                    ran += 1
    print(f"softmax cluster tuning shapes: ran {ran} shape, dtype and launch cases", flush=True)

# softmax_backward's cluster shapes (csrc/softmax_backward/cluster.cu), through its tuning op: each on 3 rows split
# over 2 CTAs (the last pack of each slice partly empty) and 9 rows of an odd length (shifted: every distance from a
# boundary), and once over 16 CTAs (the largest cluster), on a persistent grid and one cluster per row.
if "softmax_backward" in wanted and not args.no_tuning_shapes and not args.variant:
    op = operators.get("softmax_backward")
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        pack = pack_elements(dtype)
        for index, (threads, packs, _) in enumerate(backward_cluster_shapes()):  # the third: dy in shared memory
            n = 2 * threads * packs * pack - 3 * pack
            for shape, c in ((Shape(3, n), 2), (Shape(9, n - 1), 2), (Shape(2, 8 * threads * packs * pack + 5), 16)):
                for persistent in (True, False):
                    run_checked(op, f"softmax_backward cluster {threads}x{packs} c{c} persistent={persistent}",
                                lambda y, dy, i=index, c=c, p=persistent:
                                torch.ops.lab_tune.softmax_backward_cluster(y, dy, i, c, p), shape, dtype)
                    ran += 1
    print(f"softmax_backward cluster tuning shapes: ran {ran} shape, dtype and launch cases", flush=True)

# softmax_backward's cluster at the longest row of each entry of its table that launches a persistent grid, on more
# rows than twice the clusters one wave holds: each cluster loops over rows.
if "softmax_backward" in wanted and only("cuda.cluster"):
    op = operators.get("softmax_backward")
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for shape, cluster in backward_cluster_persistent_shapes(dtype):
            run_checked(op, f"softmax_backward cluster persistent c{cluster}",
                        torch.ops.lab.softmax_backward_cluster, shape, dtype)
            ran += 1
    print(f"softmax_backward cluster, persistent entries on many rows: ran {ran} shape and dtype cases", flush=True)

# softmax_backward's register_cached (csrc/softmax_backward/register_cached.cu) with the table's shape and with twice
# its threads per row, through its tuning op, at every power-of-two length it takes: 3 rows one pack short of the
# length, 5 rows of an odd length (element by element past the first row).
if "softmax_backward" in wanted and not args.no_tuning_shapes and not args.variant:
    op = operators.get("softmax_backward")
    max_n = CUDA_OPS["softmax_backward"]["register_cached"].max_n  # the kernel the tuning op launches
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        pack = pack_elements(dtype)
        for n in (2**k for k in range(5, max_n.bit_length())):
            for shape in (Shape(3, n - pack), Shape(5, n - 1)):
                for twice in (False, True):
                    try:
                        run_checked(op, f"softmax_backward register_cached twice_the_threads={twice}",
                                    lambda y, dy, t=twice:
                                    torch.ops.lab_tune.softmax_backward_register_cached(y, dy, t), shape, dtype)
                        ran += 1
                    except RuntimeError as e:
                        if "no shape of twice the threads" not in str(e):
                            raise
    print(f"softmax_backward register_cached tuning shapes: ran {ran} shape, dtype and launch cases", flush=True)


# cluster's launches of 16 CTAs a row on 8 and 16 rows: the table's entries for the longest rows and its entries for
# few rows (decode), with more clusters at once than the shapes above launch. Not under synccheck (see TOOL).
if "softmax" in wanted and only("cuda.cluster") and TOOL == "synccheck":
    print("softmax cluster on 16 CTAs, 8 and 16 rows: not run under synccheck (it faults on 16 clusters of 16 CTAs, "
          "the lab's and a few-line exchange alike, and on a few-line exchange from 9 CTAs; 8 clusters not measured)",
          flush=True)
elif "softmax" in wanted and only("cuda.cluster"):
    op = operators.get("softmax")
    ran = 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for n in cluster_thresholds(dtype):
            for rows in (8, 16):
                if list(torch.ops.lab_tune.cluster_plan(n, dtype, rows))[1] == 16:
                    print(f"softmax cluster on 16 CTAs: {dtype_name(dtype)} {rows}x{n}", flush=True)
                    run_checked(op, f"cluster on 16 CTAs, {rows} rows", torch.ops.lab.cluster, Shape(rows, n), dtype)
                    ran += 1
    print(f"softmax cluster on 16 CTAs, 8 and 16 rows: ran {ran} shape and dtype cases", flush=True)
