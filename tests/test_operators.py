"""Every operator of the harness (lab/operators/): its declarations agree, its torch baseline and every
variant that runs here pass its correctness suite, the checker catches planted wrong variants, and
the real CLI runs it. Operators and variants come from the registries, never from a list here."""

import subprocess
import sys

import pytest
import torch

from lab import check, measure, operators
from lab.backends import cuda_variants
from lab.env import ROOT
from lab.inputs import Shape
from lab.registry import variants

OPS = list(operators.operators().values())
IDS = [op.name for op in OPS]
# Under the interpreter bfloat16 is not checked (lab/backends/triton_variants.py says why).
DTYPES = [torch.float32, torch.float16]


def cpu_variants(op):
    """The variants that run on the CPU here; torch.compile (per_shape) for softmax only: it compiles for each
    shape, seconds apiece on the CPU, and the other operators' runs of it are the GPU tests'."""
    return [v for v in variants(op.name) if v.runs_on_cpu and v.availability() is None
            and (op.name == "softmax" or not v.per_shape)]


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_declarations(op):
    assert op.baseline in {v.name for v in variants(op.name)}, f"{op.name}: baseline {op.baseline} not registered"
    assert set(op.gpu_sweeps) <= set(op.sweeps) and {"quick", "cpu"} <= set(op.sweeps)
    assert set(op.tolerances) == {torch.float32, torch.float16, torch.bfloat16}
    shape = op.sweeps["cpu"][0]
    case = op.make_inputs(shape, torch.float32, "cpu", 0)
    if op.compute_bound:  # measured in FLOP/s against its matmuls, not in GB/s: no traffic model
        assert op.work(shape, torch.float32) == op.flops(shape) > 0 and op.ceiling is not None
        assert measure.shape_of(case, op) == shape
        assert all(v.traffic is None for v in variants(op.name))
        return
    # bytes_moved is min_traffic in units of one input's bytes
    assert op.bytes_moved(shape, torch.float32) == (op.min_traffic.reads + op.min_traffic.writes) * case[0].nbytes
    for v in variants(op.name):
        assert op.ceiling_fraction(v.traffic_for(torch.float32)) <= 1.0, v.name


def suite(op, dtype):
    for shape in op.edge_shapes:
        if shape.n <= op.cpu_edge_max_n:
            yield op.shape_label(shape), op.make_inputs(shape, dtype, "cpu", 3), None
    yield from op.special_cases(dtype, "cpu", 3)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_every_variant_that_runs_here_passes_the_suite(op, dtype):
    for v in cpu_variants(op):
        for label, case, row_labels in suite(op, dtype):
            if v.skip_reason(measure.shape_of(case, op), dtype) or v.case_skip_reason(*case):
                continue
            res = check.check(v.kernel(), case, v.writes_out, op.reference(*case), row_labels, op)
            assert res.ok, f"{op.name} {v.name} {dtype} {label}: {res.summary()}"


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_planted_wrong_variants_fail(op):
    baseline = next(v for v in variants(op.name) if v.name == op.baseline).kernel()
    case = op.make_inputs(op.sweeps["cpu"][0], torch.float32, "cpu", 5)
    if not all(r.numel() for r in check.as_tuple(op.reference(*case))):  # an output empty there (dbias without a
        case = next(c for _, c, _ in op.special_cases(torch.float32, "cpu", 5)  # bias): a case with every output
                    if all(r.numel() for r in check.as_tuple(op.reference(*c))))
    outputs = len(check.as_tuple(op.reference(*case)))
    assert check.check(baseline, case, False, op=op).ok
    for i in range(outputs):  # each output wrong alone (a loss and its gradient are checked apart)

        def one_element_off(*inputs, i=i):  # the largest element 0.1% off: above every operator's tolerance
            ys = list(check.as_tuple(baseline(*inputs)))
            ys[i] = ys[i].clone()
            ys[i].view(-1)[ys[i].abs().argmax()] *= 1.001
            return tuple(ys) if outputs > 1 else ys[0]

        def one_element_unwritten(*args, i=i):
            *inputs, out = args
            for j, (o, y) in enumerate(zip(check.as_tuple(out), check.as_tuple(baseline(*inputs)), strict=True)):
                o.view(-1)[: o.numel() - (j == i)] = y.reshape(-1)[: o.numel() - (j == i)]
            return out

        off = check.check(one_element_off, case, False, op=op)
        unwritten = check.check(one_element_unwritten, case, True, op=op)
        assert not off.ok and not unwritten.ok, (i, off.summary(), unwritten.summary())
        if outputs > 1:
            assert f"; {op.output_names[i]}:" in off.message and f"; {op.output_names[i]}:" in unwritten.message


def test_looped_backward_crosses_chunks():
    from triton_kernels.softmax_backward import softmax_backward_looped

    op = operators.get("softmax_backward")
    for shape in (Shape(3, 100), Shape(2, 257, 300), Shape(1, 64)):
        case = op.make_inputs(shape, torch.float32, "cuda" if torch.cuda.is_available() else "cpu", 1)
        res = check.check(lambda y, dy, out: softmax_backward_looped(y, dy, out, chunk=32), case, True, op=op)
        assert res.ok, f"{shape.label}: {res.summary()}"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_backward_register_cached_tuning_shapes_are_right_at_every_length(dtype):
    """softmax_backward's register_cached with its table's shape and with twice its threads per row (what its tuning
    op times beside each table entry), at every power-of-two length it takes and one element short of it, on more
    rows than one wave holds."""
    op = operators.get("softmax_backward")
    max_n = cuda_variants.SOFTMAX_BACKWARD_VARIANTS["register_cached"].max_n
    lengths = [2**k for k in range(5, max_n.bit_length())]
    ran = {False: 0, True: 0}
    for n in lengths:
        for shape in (Shape(2**22 // n + 3, n), Shape(7, n - 1)):
            case = op.make_inputs(shape, dtype, "cuda", 2)
            for twice in (False, True):
                try:
                    dx = torch.ops.lab_tune.softmax_backward_register_cached(*case, twice)
                except RuntimeError as e:  # no such shape at this length: under a pack a thread, or over a block
                    assert twice and "no shape of twice the threads" in str(e), str(e)
                    continue
                res = check.check(lambda y, dy, dx=dx: dx, case, False, op.reference(*case), None, op)
                assert res.ok, f"{dtype} {shape.label} twice_the_threads={twice}: {res.summary()}"
                ran[twice] += 1
    assert ran[False] == 2 * len(lengths) and ran[True] > 0, ran  # the table's shape at every length


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_backward_cluster_loops_over_rows_at_its_persistent_entries(dtype):
    """softmax_backward's cuda.cluster at the longest row of each entry of its table that launches a persistent grid,
    on more rows than twice the clusters one wave holds, so that every cluster takes row after row
    (cuda_variants.backward_cluster_persistent_shapes), against float64."""
    op = operators.get("softmax_backward")
    shapes = cuda_variants.backward_cluster_persistent_shapes(dtype)
    assert shapes, "no persistent entry: the loop over rows is not tested"
    for shape, _ in shapes:
        case = op.make_inputs(shape, dtype, "cuda", 3)
        res = check.check(torch.ops.lab.softmax_backward_cluster, case, False, op.reference(*case), None, op)
        assert res.ok, f"{dtype} {shape.label}: {res.summary()}"


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_cli_runs_the_operator(op):
    """Each operator end to end (but what cpu_variants leaves out), softmax by the README's own command (`python -m
    lab.test`: on the CPU its sweep is the quick one), every variant listed and all checks passed."""
    per_shape = [v.name for v in variants(op.name) if v not in cpu_variants(op) and v.per_shape]
    args = [] if op.name == "softmax" else ["--op", op.name, "--quick"]
    args += ["--skip", ",".join(per_shape)] if per_shape else []
    proc = subprocess.run([sys.executable, "-m", "lab.test", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{op.name}: " in proc.stdout and "all checks passed" in proc.stdout
    for v in variants(op.name, skip=per_shape or None):
        assert v.name in proc.stdout


def test_cli_lists_every_operator():
    proc = subprocess.run([sys.executable, "-m", "lab.test", "--op", "all", "--list"], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for op in OPS:
        assert f"{op.name}: {op.description}" in proc.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("op", [op for op in OPS if op.name != "softmax"], ids=lambda op: op.name)
def test_every_variant_passes_the_suite_on_the_gpu(op, dtype):
    """The operators beside softmax (whose variants tests/test_gpu.py covers in depth). torch.compile of an operator
    built on matmuls (a compile of tens of seconds for each case) is left to the lab run's own suite."""
    cases = [(shape.label, op.make_inputs(shape, dtype, "cuda", 3), None) for shape in op.edge_shapes]
    cases += list(op.special_cases(dtype, "cuda", 3))
    ran = 0
    for v in variants(op.name):
        if v.availability() is not None or (v.per_shape and op.compute_bound):
            continue
        for label, case, row_labels in cases:
            if v.skip_reason(measure.shape_of(case, op), dtype) or v.case_skip_reason(*case):
                continue
            res = check.check(v.kernel(), case, v.writes_out, op.reference(*case), row_labels, op)
            assert res.ok, f"{op.name} {v.name} {dtype} {label}: {res.summary()}"
            ran += 1
    assert ran, f"{op.name}: no variant ran"
