"""The CI compile gate: every CUDA source compiles for sm_90 without spills, and the gate can fail.

Needs nvcc only (no GPU). Also: the built extension lab._C registers torch.ops.lab.* and rejects
CPU tensors with a clear message.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from lab import resources
from lab.backends import cuda_variants
from lab.dispatch import pack_elements

pytestmark = pytest.mark.skipif(resources.find_nvcc() is None, reason="nvcc not found (set CUDA_HOME)")
# Every torch.ops.lab op: one per CUDA variant of every operator, and softmax (cuda.auto).
OPS = cuda_variants.torch_op_names()
SOFTMAX_OPS = [*cuda_variants.CUDA_VARIANTS, cuda_variants.AUTO_OP]

# A kernel that keeps 64 floats live at once: under a 24-register cap ptxas must spill them.
SPILLING_KERNEL = r"""
__global__ void spill_kernel(const float* __restrict__ in, float* __restrict__ out, int k) {
  float a[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) a[i] = in[threadIdx.x + i * blockDim.x] * static_cast<float>(k + i);
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 64; ++j) s += a[j] * a[63 - j] + a[(j * 7 + k) & 63];
  out[threadIdx.x] = s;
}
"""

# What nvcc 13 prints with -Xptxas -v (two kernels, the second spills and uses no shared memory).
PTXAS_SAMPLE = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z10row_kernelPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z10row_kernelPKfPfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 136 bytes smem
ptxas info    : Compile time = 231.101 ms
ptxas info    : Compiling entry function '_Z12spill_kernelPKfPfi' for 'sm_90'
ptxas info    : Function properties for _Z12spill_kernelPKfPfi
    1120 bytes stack frame, 1024 bytes spill stores, 1280 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 1120 bytes cumulative stack size
ptxas info    : Compile time = 66.539 ms
"""


def short(name: str) -> str:
    return name.split("(")[0]


@pytest.fixture(scope="module")
def report() -> list[resources.KernelResources]:
    return resources.report_all()


# --- the real sources ---------------------------------------------------------------------------


def test_every_source_compiles(report):
    """Every variant's source compiles to kernels (report_all raises if any source fails to compile;
    csrc/softmax/dispatch/auto.cu, the dispatcher, has none of its own)."""
    sources = {f"csrc/{op}/{name}.cu" for op, names in cuda_variants.CUDA_OPS.items() for name in names}
    assert sources, "no CUDA variants registered"
    assert {k.source for k in report} == sources, "a variant's source without kernels"


def test_no_kernel_spills(report):
    offenders = [
        f"{k.source}: {k.kernel}: {k.registers} registers, {k.spill_store_bytes} bytes spill stores, "
        f"{k.spill_load_bytes} bytes spill loads"
        for k in report if k.spills
    ]
    assert not offenders, "kernels that spill:\n" + "\n".join(offenders)


def test_every_kernel_uses_registers(report):
    assert report
    for k in report:
        assert k.registers > 0, k
        assert k.registers <= 255, k


def test_every_kernel_is_instantiated_for_each_dtype(report):
    """The kernels are templated on the element type: float, half and bfloat16 each appear."""
    for source in {k.source for k in report}:
        names = " ".join(k.kernel for k in report if k.source == source)
        for t in ("float", "__half", "__nv_bfloat16"):
            assert t in names, (source, t)


def test_variant_lists_agree():
    """The CUDA variants registered in Python are the files csrc/<operator>/<variant>.cu (which setup.py
    lists for the bindings), operator by operator."""
    on_disk: dict[str, set[str]] = {}
    for path in resources.cuda_sources():
        on_disk.setdefault(path.parent.name, set()).add(path.stem)
    assert on_disk == {op: set(names) for op, names in cuda_variants.CUDA_OPS.items()}


# --- the gate can fail --------------------------------------------------------------------------


def test_syntax_error_raises_compile_error(tmp_path):
    src = tmp_path / "broken.cu"
    src.write_text("__global__ void broken(float* y) { y[0] = 1.0f }\n")
    with pytest.raises(resources.CompileError, match=r"broken\.cu failed to compile(.|\n)*error"):
        resources.compile_report(src)


def test_spilling_kernel_is_detected(tmp_path):
    src = tmp_path / "spill.cu"
    src.write_text(SPILLING_KERNEL)
    (k,) = resources.compile_report(src, extra_flags=("-maxrregcount=24",))
    assert short(k.kernel) in ("spill_kernel", "_Z12spill_kernelPKfPfi")
    assert k.source == "spill.cu"
    assert k.spill_store_bytes > 0 and k.spill_load_bytes > 0
    assert k.spills
    assert 0 < k.registers <= 24


def test_same_kernel_without_the_cap_does_not_spill(tmp_path):
    src = tmp_path / "spill.cu"
    src.write_text(SPILLING_KERNEL)
    (k,) = resources.compile_report(src)
    assert not k.spills and k.registers > 24


def test_spills_are_not_masked_by_a_device_function(tmp_path):
    src = tmp_path / "spill_with_helper.cu"
    helper = "__device__ __noinline__ float helper(const float* in, int k) { return in[k] * 2.0f; }\n"
    src.write_text(helper + SPILLING_KERNEL.replace("float s = 0.0f;", "float s = helper(in, k);"))
    kernels = resources.compile_report(src, extra_flags=("-maxrregcount=24",))
    spill = next(k for k in kernels if "spill_kernel" in k.kernel)
    assert spill.spills


# --- parse_ptxas on a literal sample ------------------------------------------------------------


def test_parse_ptxas_sample():
    row, spill = resources.parse_ptxas(PTXAS_SAMPLE, "sample.cu")
    assert short(row.kernel) in ("row_kernel", "_Z10row_kernelPKfPfi")
    assert (row.source, row.registers, row.shared_bytes, row.stack_bytes) == ("sample.cu", 40, 136, 0)
    assert (row.spill_store_bytes, row.spill_load_bytes, row.spills) == (0, 0, False)
    assert short(spill.kernel) in ("spill_kernel", "_Z12spill_kernelPKfPfi")
    assert (spill.registers, spill.shared_bytes, spill.stack_bytes) == (24, 0, 1120)
    assert (spill.spill_store_bytes, spill.spill_load_bytes, spill.spills) == (1024, 1280, True)
    assert spill.as_dict()["spill_store_bytes"] == 1024


def test_parse_ptxas_demangles():
    first_kernel = PTXAS_SAMPLE.split("ptxas info    : Compiling entry function '_Z12")[0]
    (k,) = resources.parse_ptxas(first_kernel, "s.cu")
    if shutil.which("cu++filt") or shutil.which("c++filt"):  # they place const differently
        expected = ("row_kernel(floatconst*,float*,int)", "row_kernel(constfloat*,float*,int)")
        assert k.kernel.replace(" ", "") in expected


def test_parse_ptxas_without_kernels():
    assert resources.parse_ptxas("ptxas info    : 0 bytes gmem\n", "empty.cu") == []


def test_parse_ptxas_shared_memory_after_the_stack_size():
    """A kernel with a stack frame: ptxas prints its shared memory after the stack size (nvcc 13)."""
    text = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
            "ptxas info    : Function properties for k\n"
            "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
            "ptxas info    : Used 32 registers, used 1 barriers, 8 bytes cumulative stack size, 4112 bytes smem\n")
    (k,) = resources.parse_ptxas(text, "k.cu")
    assert (k.registers, k.shared_bytes, k.stack_bytes, k.spill_store_bytes) == (32, 4112, 8, 4)


def test_parse_ptxas_minimal_used_line():
    text = ("ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
            "ptxas info    : Used 8 registers, 360 bytes cmem[0]\n")
    (k,) = resources.parse_ptxas(text, "k.cu")
    assert (k.registers, k.shared_bytes, k.stack_bytes, k.spills) == (8, 0, 0, False)


# --- the built extension ------------------------------------------------------------------------

BUILT = list((resources.ROOT / "lab").glob("_C*.so"))
needs_extension = pytest.mark.skipif(not BUILT, reason="lab._C is not built (bash build.sh)")


@needs_extension
def test_extension_imports_and_registers_ops():
    import lab._C  # noqa: F401

    for name in SOFTMAX_OPS:
        op = getattr(torch.ops.lab, name)
        assert str(op.default._schema) == f"lab::{name}(Tensor x) -> Tensor"
        # .out returns nothing: a custom op returning an alias of `out` cannot be functionalized
        # (torch.compile's AOT dispatch and opcheck's test_aot_dispatch_dynamic refuse it).
        assert str(op.out._schema) == f"lab::{name}.out(Tensor x, *, Tensor(a!) out) -> ()"


@needs_extension
def test_cluster_shapes_and_plans():
    """cuda.cluster's resident shapes as the tuning ops list them (scripts/tune/tune_cluster.py reads them):
    whole 16-byte packs per thread, packed ones (16-bit only) among them with at most 128 KiB of
    staging per CTA, one-row shapes (16-bit only) staging their one row at most, float32's plan never names a
    packed or one-row shape (they are not compiled for float32), and no persistent entry names a one-row shape."""
    shapes = cuda_variants.cluster_shapes()
    assert shapes and any(s.packed for s in shapes) and any(not s.packed for s in shapes)
    assert any(s.one_row for s in shapes), "no one-row shape: the GPU tests of them would be empty"
    for s in shapes:
        assert s.threads % 32 == 0 and s.threads <= 512 and s.elems % 8 == 0 and s.stages >= 0, s
        if s.packed or s.one_row:
            assert not s.runs(torch.float32) and s.runs(torch.bfloat16) and s.runs(torch.float16), s
            assert s.stages * s.threads * s.elems * 2 <= 128 * 1024, s
        if s.one_row:  # its one row staged at most, held as floats
            assert s.stages <= 1 and not s.packed, s
    for n in (2**k + d for k in range(5, 21) for d in (-1, 0, 1)):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            index, cluster, persistent, groups, step_ns = torch.ops.lab_tune.cluster_plan(n, dtype)
            assert groups >= 1 and step_ns >= 0, (n, dtype, groups, step_ns)
            if index >= 0:
                assert shapes[index].runs(dtype) and shapes[index].launches(persistent), (n, dtype, shapes[index])
                assert 1 <= cluster <= 16 and n <= cluster * shapes[index].threads * shapes[index].elems


@needs_extension
def test_decode_rows_take_entries_of_their_own_beyond_the_decode_sweeps_rows():
    """The tables' entries for a few rows of a vocabulary (kFewRows in csrc/softmax/cluster.cu) hold at every row
    count of the decode sweep (lab/inputs.py, DECODE_ROWS) and spread each row over at least as many CTAs as the entry
    for more rows; 16-bit 256000 and float32 151936 switch back at 64 rows, float32 256000 at 32, as measured."""
    from lab.inputs import DECODE_ROWS

    plan = torch.ops.lab_tune.cluster_plan
    # (dtype, N, the most rows the entry for few rows takes, whether the entry for many rows starts at the next)
    for dtype, n, last, switches in ((torch.bfloat16, 32000, max(DECODE_ROWS), False),
                                     (torch.bfloat16, 128256, max(DECODE_ROWS), False),
                                     (torch.bfloat16, 256000, 63, True), (torch.float32, 151936, 63, True),
                                     (torch.float32, 256000, 31, True)):
        few, many = list(plan(n, dtype, last)), list(plan(n, dtype, 4096))
        assert few == list(plan(n, dtype, 1)) and few != many, (n, dtype, few, many)
        assert few[1] >= many[1], (n, dtype, few, many)
        assert not switches or list(plan(n, dtype, last + 1)) == many, (n, dtype, last)


@needs_extension
def test_cluster_thresholds_are_every_entry_end():
    """cuda_variants.cluster_thresholds (the lengths the GPU tests, the fuzzer and the sanitize driver run on both
    sides of) finds every length where the plan changes, between powers of two too: a dense scan of lengths from 33
    to 2^21 finds each length's plan equal to the plan of the next threshold at or above it, and different from the
    plan of the length just past each threshold."""
    for dtype in (torch.float32, torch.bfloat16):
        ends = cuda_variants.cluster_thresholds(dtype)
        assert ends == sorted(set(ends)) and any(e & (e - 1) for e in ends), (dtype, ends)  # some between powers of 2

        def plan(n: int, dtype: torch.dtype = dtype) -> list[int]:
            return list(torch.ops.lab_tune.cluster_plan(n, dtype))

        for e in ends:
            assert plan(e) != plan(e + 1), (dtype, e)
        bounds = [*ends, 2**21]
        for n in range(33, 2**21, 251):
            upper = next(b for b in bounds if b >= n)
            assert plan(n) == plan(upper), (dtype, n, upper)


@needs_extension
def test_cluster_shifted_plans():
    """Rows off 16-byte boundaries (cluster_plan's aligned=False) take the shifted rows' own tables: a shape that loads
    straight into registers and holds a row a pack less one element longer in `cluster` CTAs, or the streaming path
    (-1), as past the last entry. Pinned where the measurement that set them was clearest (cluster.cu): float32
    4096x16385 on 128 threads x 32 elements over 6 CTAs (63% -> 97% of a copy), bfloat16 4096x40961 on 128 x 128
    packed over 3."""
    shapes = cuda_variants.cluster_shapes()
    resident = streamed = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        pack = pack_elements(dtype)
        for n in [*range(2049, 2**19, 997), *(2**k + d for k in range(11, 20) for d in (-1, 1)), 32001, 50257]:
            if n % pack == 0:
                continue
            shifted = list(torch.ops.lab_tune.cluster_plan(n, dtype, 4096, False))
            if shifted[0] < 0:
                streamed += 1
                continue
            s = shapes[shifted[0]]
            packs = (n + 2 * (pack - 1)) // pack  # of the longest shifted row, n + pack - 1 elements
            assert s.stages == 0 and s.runs(dtype), (n, dtype, shifted)
            assert 1 <= shifted[1] <= 16 and -(-packs // shifted[1]) <= s.threads * s.elems // pack, (n, dtype, shifted)
            resident += 1
        assert torch.ops.lab_tune.cluster_plan(2**20 + 1, dtype, 4096, False)[0] == -1, dtype  # past the last entry
    label = {(s.threads, s.elems, s.packed): i for i, s in enumerate(shapes) if s.stages == 0}
    assert torch.ops.lab_tune.cluster_plan(16385, torch.float32, 4096, False)[:2] == [label[(128, 32, False)], 6]
    assert torch.ops.lab_tune.cluster_plan(40961, torch.bfloat16, 4096, False)[:2] == [label[(128, 128, True)], 3]
    assert resident and streamed, "both kinds of entry"


@needs_extension
def test_register_cached_ragged_entries():
    """Ragged rows (off 16-byte boundaries, or N not a multiple of a pack): register_cached's PEELED kernels hold the
    whole packs of a row's body in its fragment and the edge beside them, so rows a few elements past an entry's
    end (2^k + 1 to 2^k + pack - 1: a class token, 1025 = 32 x 32 + 1) take that entry where it peels, and never an
    entry too short for the body; element by element, an entry holds the whole row. Past the limit: [0, 0]."""
    limit = cuda_variants.CUDA_VARIANTS["register_cached"].max_n
    shorter = 0
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        pack = pack_elements(dtype)
        for k in range(5, 15):
            end = 2**k
            end_entry, end_peels = torch.ops.lab_tune.register_cached_ragged(end, dtype)
            assert end_entry == end, (dtype, end, end_entry)  # the table has an entry ending at every power of two
            for n in [end + d for d in range(-pack, pack) if end + d <= limit] + [1, pack - 1]:
                entry, peeled = torch.ops.lab_tune.register_cached_ragged(n, dtype)
                assert entry >= max(n // pack * pack, 1) and (peeled or entry >= n), (dtype, n, entry, peeled)
                if end < n < end + pack:
                    next_entry = list(torch.ops.lab_tune.register_cached_ragged(2 * end, dtype))
                    expected = [end, 1] if end_peels else next_entry
                    assert [entry, peeled] == expected, (dtype, n, entry, peeled)
                    shorter += entry < n
        assert list(torch.ops.lab_tune.register_cached_ragged(limit + 1, dtype)) == [0, 0], dtype
    assert list(torch.ops.lab_tune.register_cached_ragged(1025, torch.bfloat16)) == [1024, 1]
    assert list(torch.ops.lab_tune.register_cached_ragged(209, torch.bfloat16)) == [208, 1]  # and at 208 in 16 bits
    assert shorter, "no ragged length takes an entry shorter than its row"


@needs_extension
@pytest.mark.parametrize("groups, step_ns", [(0, 0), (65, 100), (4, -1), (4, 100001)])
def test_cluster_stagger_out_of_range_is_refused(groups, step_ns):
    """The tuning op's first-wave stagger is checked before anything runs (on any device)."""
    with pytest.raises(RuntimeError, match="stagger_groups must be 1 to 64 and stagger_ns 0 to 100000"):
        torch.ops.lab_tune.cluster(torch.zeros(2, 64), 0, 1, False, groups, step_ns)


@needs_extension
@pytest.mark.parametrize("op", [op for op in cuda_variants.CUDA_OPS if op not in ("softmax", "cross_entropy")])
def test_other_operators_ops(op):
    """The other operators' ops: their schemas, and a CPU tensor rejected with a clear message."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from lab import operators

    cuda_variants.load_extension()
    inputs = operators.get(op).make_inputs(operators.get(op).sweeps["cpu"][0], torch.float32, "cpu", 0)
    for name in cuda_variants.CUDA_OPS[op]:
        torch_name = cuda_variants.torch_op(op, name)
        schema = getattr(torch.ops.lab, torch_name).default._schema
        assert schema.name == f"lab::{torch_name}" and len(schema.arguments) == len(inputs), schema
        assert str(getattr(torch.ops.lab, torch_name).out._schema).endswith("*, Tensor(a!) out) -> ()")
        with pytest.raises(RuntimeError, match=f"lab::{torch_name}: expected a CUDA tensor, got one on cpu"):
            getattr(torch.ops.lab, torch_name)(*inputs)
        with FakeTensorMode():
            fake = getattr(torch.ops.lab, torch_name)(*(torch.empty(t.shape, dtype=t.dtype) for t in inputs))
            assert fake.shape == inputs[0].shape and fake.dtype == inputs[0].dtype


@needs_extension
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: torch.randn(4, 10), id="2-D"),
        pytest.param(lambda: torch.randn(2, 3, 4), id="3-D"),
        pytest.param(lambda: torch.ones(4, 10, dtype=torch.int32), id="int32"),
    ],
)
@pytest.mark.parametrize("name", SOFTMAX_OPS)
def test_cpu_tensor_is_rejected(name, make):
    """The device check comes first: a CPU tensor gets a clear message, not the dispatcher's list."""
    import lab._C  # noqa: F401

    op = getattr(torch.ops.lab, name)
    with pytest.raises(RuntimeError, match=f"lab::{name}: expected a CUDA tensor, got one on cpu"):
        op(make())
    x = make()
    with pytest.raises(RuntimeError, match="expected a CUDA tensor"):
        op.out(x, out=torch.empty_like(x))


@needs_extension
@pytest.mark.skipif(shutil.which("readelf") is None, reason="readelf not found")
def test_extension_links_shared_libstdcxx():
    """lab._C uses torch's shared libstdc++, not a private static copy: linked by a g++ that took
    libstdc++.a (the H200 machines' CXX), error messages with numbers segfaulted (see setup.py)."""
    needed = subprocess.run(["readelf", "-d", str(BUILT[0])], capture_output=True, text=True).stdout
    assert "libstdc++.so" in needed, needed
    if shutil.which("nm"):
        defined = subprocess.run(["nm", "-C", "--defined-only", str(BUILT[0])], capture_output=True,
                                 text=True).stdout
        private = [line for line in defined.splitlines() if "basic_ostream" in line and "_M_insert" in line]
        assert not private, "libstdc++'s stream code is linked into lab._C:\n" + "\n".join(private[:5])


@needs_extension
def test_sanitizer_driver_loads_the_extension():
    """scripts/sanitize_driver.py (run under compute-sanitizer on the GPU) gets as far as the GPU here:
    its imports work in the order they are written (lab._C needs torch loaded first)."""
    proc = subprocess.run([sys.executable, str(resources.ROOT / "scripts" / "sanitize_driver.py")],
                          capture_output=True, text=True,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(resources.ROOT)},
                          cwd=resources.ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "lab._C loaded, but there is no CUDA GPU" in proc.stderr, proc.stderr


@needs_extension
def test_fake_implementations():
    """register_fake: shapes and dtypes without running anything (torch.compile, opcheck)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    cuda_variants.load_extension()
    for name in SOFTMAX_OPS:
        op = getattr(torch.ops.lab, name)
        with FakeTensorMode():
            y = op(torch.empty(3, 8, dtype=torch.bfloat16)[:, :5])
            assert (y.shape, y.dtype, y.stride()) == ((3, 5), torch.bfloat16, (5, 1))
        meta = op(torch.empty(3, 5, device="meta"))
        assert meta.shape == (3, 5) and meta.device.type == "meta"
        with FakeTensorMode():
            out = torch.empty(3, 5, dtype=torch.float16)
            assert op.out(torch.empty(3, 5, dtype=torch.float16), out=out) is None



@needs_extension
def test_cross_entropy_ops():
    """cross_entropy's ops: the targets' step writes the reduction's summary (and the first bad target, where asked),
    each variant's op the loss per row, dlogits (none: the loss alone) and the reduced loss; both return nothing:
    their schemas, a CPU tensor and a tensor that requires grad refused with clear messages, a fake kernel
    (torch.compile's) that returns nothing."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    cuda_variants.load_extension()
    targets = torch.ops.lab.cross_entropy_targets
    assert str(targets.default._schema) == (
        "lab::cross_entropy_targets(Tensor target, Tensor? weight, int vocab, int ignore_index, str reduction, *, "
        "Tensor(a!) summary, Tensor(b!)? found) -> ()")
    target = torch.tensor([1, -100, 39])
    with pytest.raises(RuntimeError, match="lab::cross_entropy_targets: expected target to be a contiguous 1-D int64 "
                                           "CUDA tensor, got Long of shape \\[3\\] on cpu"):
        targets(target, None, 40, -100, "mean", summary=torch.empty(2), found=None)
    for name in cuda_variants.CUDA_OPS["cross_entropy"]:
        torch_name = cuda_variants.torch_op("cross_entropy", name)
        op = getattr(torch.ops.lab, torch_name)
        assert str(op.default._schema) == (
            f"lab::{torch_name}(Tensor logits, Tensor target, Tensor? weight, Tensor summary, int ignore_index, "
            "str reduction, *, Tensor(a!) loss_rows, Tensor(b!)? dlogits, Tensor(c!) loss) -> ()")
        logits = torch.randn(3, 40)
        args = (logits, target, None, torch.empty(2), -100, "mean")
        outs = dict(loss_rows=torch.empty(3), dlogits=torch.empty(3, 40), loss=torch.empty(()))
        with pytest.raises(RuntimeError, match=f"lab::{torch_name}: expected a CUDA tensor, got one on cpu"):
            op(*args, **outs)
        with pytest.raises(RuntimeError, match=f"lab::{torch_name} cannot be differentiated.*no backward"):
            op(logits.requires_grad_(), *args[1:], **outs)
        with FakeTensorMode():
            fake = [torch.empty(t.shape, dtype=t.dtype) for t in (logits, target)]
            summary = torch.empty(2)
            assert targets(fake[1], None, 40, -100, "mean", summary=summary, found=None) is None
            assert op(fake[0], fake[1], None, summary, -100, "mean", loss_rows=torch.empty(3),
                      dlogits=torch.empty(3, 40), loss=torch.empty(())) is None


@needs_extension
def test_cross_entropy_cluster_limits():
    """The CUDA cross-entropy kernel takes rows as long as softmax's cluster launch tables keep resident, up to its
    kMaxCols (262144): rows on 16-byte boundaries all the way, rows off them up to the shifted tables' first
    streaming entry. A table that names a shape the kernel is not compiled for would shorten these (kShapes32 and
    kShapes16 in csrc/cross_entropy/cluster.cu)."""
    cuda_variants.load_extension()
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        assert torch.ops.lab.cross_entropy_cluster_max_cols(dtype, True) == 262144, dtype
        plan = torch.ops.lab_tune.cluster_plan
        streams = next(n for n in range(1, 2**19)
                       if min(plan(n, dtype, 4096, False)[0], plan(n, dtype, 1, False)[0]) < 0)
        assert torch.ops.lab.cross_entropy_cluster_max_cols(dtype, False) == min(streams - 1, 262144), dtype


@needs_extension
@pytest.mark.parametrize("name", [n for n in cuda_variants.torch_op_names() if not n.startswith("cross_entropy_")])
def test_opcheck_on_meta_tensors(name):
    """torch.library.opcheck of each op and its .out on meta tensors: the schema, the fake kernel and
    the autograd registration agree without a GPU (the aliasing of real outputs is checked on the GPU)."""
    cuda_variants.load_extension()
    op = getattr(torch.ops.lab, name)
    shape = (4, 33) if len(op.default._schema.arguments) != 2 or name.startswith("softmax_backward") else (129,)
    xs = tuple(torch.randn(shape, device="meta") for _ in op.default._schema.arguments)
    torch.library.opcheck(op.default, xs)
    torch.library.opcheck(op.out, xs, {"out": torch.empty(shape, device="meta")})

def test_library_sources_need_no_torch():
    """csrc/<operator>/** and csrc/include are framework-free: only bindings.cpp sees torch."""
    for path in resources.CSRC.rglob("*"):
        if path.is_file() and path.name != "bindings.cpp":
            text = path.read_text()
            assert not re.search(r"#include\s*[<\"](torch|ATen|c10)/", text), path


@needs_extension
def test_a_planted_variant_is_found_built_and_registered(tmp_path):
    """Adding a CUDA variant is one file (plus its registration line in Python): a copy of the sources
    with a planted csrc/vector_add/planted.cu builds (only that operator, LAB_OPS) into an extension
    that registers torch.ops.lab.vector_add_planted with its .out overload, and checks its inputs."""
    root = tmp_path / "lab-copy"
    shutil.copytree(resources.ROOT / "csrc", root / "csrc")
    shutil.copy(resources.ROOT / "setup.py", root / "setup.py")
    (root / "lab").mkdir()
    source = (root / "csrc" / "vector_add" / "grid_stride.cu").read_text()
    (root / "csrc" / "vector_add" / "planted.cu").write_text(
        source.replace("vector_add_grid_stride(", "vector_add_planted("))
    env = {**os.environ, "LAB_OPS": "vector_add", "MAX_JOBS": "2", "CUDA_HOME": resources.cuda_home()}
    build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=root, env=env,
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    header = (root / "build" / "generated" / "lab" / "variants.h").read_text()
    assert "X(grid_stride) X(planted)" in header and "LAB_HAS_SOFTMAX" not in header
    probe = subprocess.run(
        [sys.executable, "-c",
         "import torch, lab._C\n"
         "op = torch.ops.lab.vector_add_planted\n"
         "print(op.default._schema)\n"
         "print(op.out._schema)\n"
         "try:\n    op(torch.ones(3), torch.ones(3))\nexcept RuntimeError as e:\n    print(e)\n"
         "print(hasattr(torch.ops.lab, 'cluster'))"],
        # without PYTHONPATH: a checkout on it (its lab a regular package) would be imported before the copy's lab/
        cwd=root, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, capture_output=True, text=True)
    assert probe.returncode == 0, probe.stderr[-3000:]
    lines = probe.stdout.splitlines()
    assert lines[0] == "lab::vector_add_planted(Tensor a, Tensor b) -> Tensor"
    assert lines[1].startswith("lab::vector_add_planted.out(Tensor a, Tensor b, *, Tensor(a!) out)")
    assert lines[2].startswith("lab::vector_add_planted: expected a CUDA tensor, got one on cpu")
    assert lines[3] == "False", "only the operators named in LAB_OPS are built"


def test_every_cuda_variant_names_its_own_op():
    """TORCH_OPS (what scripts/trust.py calls opcheck on) holds the torch.ops.lab op of every CUDA variant of every
    operator (variant names repeat across operators: cuda.register_cached), one distinct op each but for the loss
    alone, which is cross_entropy's op without dlogits."""
    from lab import operators
    from lab.registry import variants

    keys = [v.key for op in operators.operators() for v in variants(op) if v.backend == "cuda"]
    assert sorted(keys) == sorted(cuda_variants.TORCH_OPS)
    shared = cuda_variants.TORCH_OPS.pop(("cross_entropy_loss", "cuda.cluster"))
    try:
        assert shared == cuda_variants.TORCH_OPS[("cross_entropy", "cuda.cluster")]
        assert sorted(cuda_variants.TORCH_OPS.values()) == sorted(cuda_variants.torch_op_names())
    finally:
        cuda_variants.TORCH_OPS[("cross_entropy_loss", "cuda.cluster")] = shared
