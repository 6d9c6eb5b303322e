"""Every operator of the harness (lab/operators/): its declarations agree, its torch baseline and every
variant that runs here pass its correctness suite, the checker catches planted wrong variants, and
the real CLI runs it. Operators and variants come from the registries, never from a list here."""

import subprocess
import sys

import pytest
import torch

from lab import check, operators
from lab.env import ROOT
from lab.inputs import Shape
from lab.registry import variants

OPS = list(operators.operators().values())
IDS = [op.name for op in OPS]
# Under the interpreter bfloat16 is not checked (lab/backends/triton_variants.py says why).
DTYPES = [torch.float32, torch.float16]


def cpu_variants(op):
    return [v for v in variants(op.name) if v.runs_on_cpu and v.availability() is None]


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_declarations(op):
    assert op.baseline in {v.name for v in variants(op.name)}, f"{op.name}: baseline {op.baseline} not registered"
    assert set(op.gpu_sweeps) <= set(op.sweeps) and {"quick", "cpu"} <= set(op.sweeps)
    assert set(op.tolerances) == {torch.float32, torch.float16, torch.bfloat16}
    shape = op.sweeps["cpu"][0]
    first = op.make_inputs(shape, torch.float32, "cpu", 0)[0]
    # bytes_moved is min_traffic in units of one input's bytes
    assert op.bytes_moved(shape, torch.float32) == (op.min_traffic.reads + op.min_traffic.writes) * first.nbytes
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
            if v.skip_reason(Shape.of(case[0]) if case[0].dim() == 2 else Shape(1, case[0].numel()), dtype):
                continue
            res = check.check(v.kernel(), case, v.writes_out, op.reference(*case), row_labels, op)
            assert res.ok, f"{op.name} {v.name} {dtype} {label}: {res.summary()}"


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_planted_wrong_variants_fail(op):
    baseline = next(v for v in variants(op.name) if v.name == op.baseline).kernel()
    case = op.make_inputs(op.sweeps["cpu"][0], torch.float32, "cpu", 5)

    def one_element_off(*inputs):  # the largest element 0.1% off: above every operator's tolerance
        y = baseline(*inputs)
        y.view(-1)[y.abs().argmax()] *= 1.001
        return y

    def one_element_unwritten(*args):
        *inputs, out = args
        out.view(-1)[:-1] = baseline(*inputs).view(-1)[:-1]
        return out

    assert not check.check(one_element_off, case, False, op=op).ok
    assert not check.check(one_element_unwritten, case, True, op=op).ok
    assert check.check(baseline, case, False, op=op).ok


def test_looped_backward_crosses_chunks():
    from triton_kernels.softmax_backward import softmax_backward_looped

    op = operators.get("softmax_backward")
    for shape in (Shape(3, 100), Shape(2, 257, 300), Shape(1, 64)):
        case = op.make_inputs(shape, torch.float32, "cuda" if torch.cuda.is_available() else "cpu", 1)
        res = check.check(lambda y, dy, out: softmax_backward_looped(y, dy, out, chunk=32), case, True, op=op)
        assert res.ok, f"{shape.label}: {res.summary()}"


@pytest.mark.parametrize("op", OPS, ids=IDS)
def test_cli_runs_the_operator(op):
    """Each operator end to end, softmax by the README's own command (`python -m lab.test`: on the CPU its sweep is
    the quick one), every variant listed and all checks passed."""
    args = [] if op.name == "softmax" else ["--op", op.name, "--quick"]
    proc = subprocess.run([sys.executable, "-m", "lab.test", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{op.name}: " in proc.stdout and "all checks passed" in proc.stdout
    for v in variants(op.name):
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
    """The operators beside softmax (whose variants tests/test_gpu.py covers in depth)."""
    cases = [(shape.label, op.make_inputs(shape, dtype, "cuda", 3), None) for shape in op.edge_shapes]
    cases += list(op.special_cases(dtype, "cuda", 3))
    ran = 0
    for v in variants(op.name):
        if v.availability() is not None:
            continue
        for label, case, row_labels in cases:
            shape = Shape.of(case[0]) if case[0].dim() == 2 else Shape(1, case[0].numel())
            if v.skip_reason(shape, dtype):
                continue
            res = check.check(v.kernel(), case, v.writes_out, op.reference(*case), row_labels, op)
            assert res.ok, f"{op.name} {v.name} {dtype} {label}: {res.summary()}"
            ran += 1
    assert ran, f"{op.name}: no variant ran"
