"""Randomized differential testing (lab/fuzz.py): the quick CPU subset of the H200 run (torch variants,
Triton under the interpreter), reproducibility of a case, the lengths it draws, and a planted wrong
variant caught with the command that reproduces it."""

import subprocess
import sys

import pytest
import torch

from lab import fuzz, registry
from lab.env import ROOT
from lab.inputs import Shape
from lab.registry import Traffic, Variant, register, variants


def test_quick_subset_has_no_mismatch(tmp_path):
    """120 cases (N <= 3000, M * N <= 6000), every variant of the lab that runs here (the peers are other
    people's kernels: what the fuzz finds in them is reported by the trust run, not failed on here)."""
    out = tmp_path / "fuzz.json"
    peers = [v.name for v in variants("softmax") if v.backend == "peer"]
    code = fuzz.main(["--cases", "120", "--max-elements", "6000", "--max-n", "3000", "--skip", "torch.compile",
                      *(["--skip", ",".join(peers)] if peers else []), "--json", str(out)])
    assert code == 0
    import json

    counts = json.loads(out.read_text())["variants"]
    assert counts and all(c["cases"] > 0 and not c["mismatches"] for c in counts.values()), counts


@pytest.mark.parametrize("op", fuzz.LOSSES)
def test_cross_entropy_subset_has_no_mismatch(tmp_path, op):
    """cross_entropy's variants (and the loss alone's) that run here (Triton interpreted, PyTorch's) on 30 cases of
    drawn logits, targets and options: none mismatches; a variant that lacks a case's options, or PyTorch's where its
    gradient is NaN by its own definition, skips the case and counts it."""
    import json

    out = tmp_path / "fuzz.json"
    peers = [v.name for v in variants(op) if v.backend == "peer"]
    code = fuzz.main(["--op", op, "--cases", "30", "--max-elements", "3000", "--max-n", "1500",
                      "--skip", ",".join(["torch.compile", *peers]), "--json", str(out)])
    data = json.loads(out.read_text())
    assert code == 0 and data["op"] == op
    counts = data["variants"]
    assert counts and all(c["cases"] > 0 and not c["mismatches"] for c in counts.values()), counts
    case = fuzz.draw(0, 3, fuzz.lengths([], 3000), 6000, 3000, fuzz.CROSS_ENTROPY_KINDS)
    logits, target, options = fuzz.cross_entropy_inputs(case, fuzz.make(case, "cpu"))
    again = fuzz.cross_entropy_inputs(case, fuzz.make(case, "cpu"))
    assert torch.equal(target, again[1]) and options.label == again[2].label, "a case's inputs are its seed's"


def test_a_case_is_the_same_every_time():
    ns = fuzz.lengths([100, 4096], 5000)
    a, b = fuzz.draw(7, 123, ns, 10**5, 5000), fuzz.draw(7, 123, ns, 10**5, 5000)
    assert a == b
    xa, xb = fuzz.make(a, "cpu"), fuzz.make(b, "cpu")
    assert torch.equal(xa.nan_to_num(), xb.nan_to_num()) and xa.shape == (a.m, a.n)


def test_lengths_cover_both_sides_of_every_threshold_and_the_extremes():
    ns = fuzz.lengths([3000, 16384], fuzz.MAX_N)
    assert {1, 2999, 3000, 3001, 16383, 16384, 16385, 2**20 - 1, 2**20, 2**20 + 1} <= set(ns)
    assert 1048573 in ns, "primes"


def test_kinds_and_layouts_are_all_drawn():
    ns = fuzz.lengths([], 5000)
    drawn = [fuzz.draw(0, i, ns, 10**5, 5000) for i in range(600)]
    assert {c.kind for c in drawn} == set(fuzz.KINDS)
    assert {c.dtype for c in drawn} == {"float32", "float16", "bfloat16"}
    assert any(c.stride > c.n for c in drawn) and any(c.offset % 8 for c in drawn) and any(c.m == 0 for c in drawn)


@pytest.fixture
def planted():
    def wrong(x, out):
        out.copy_(torch.softmax(x.float(), -1).to(x.dtype))
        if x.shape[0] > 1 and x.shape[1] > 4:
            out[-1, 2] += 0.01  # wrong in one element of the last row
        return out

    v = register(Variant(op="softmax", name="torch.planted_wrong", backend="torch", description="planted",
                         build=lambda: wrong, traffic=Traffic(1, 1), writes_out=True, runs_on_cpu=True))
    yield v
    del registry._REGISTRY[v.key]


def test_a_mismatch_prints_the_command_that_reproduces_it(planted, capsys):
    code = fuzz.main(["--cases", "20", "--max-elements", "20000", "--max-n", "2000", "--only", planted.name])
    out = capsys.readouterr().out
    assert code == 1
    line = next(s for s in out.splitlines() if s.strip().startswith("reproduce: "))
    command = line.split("reproduce: ")[1]
    assert command.startswith("python -m lab.fuzz --seed 0 --case ") and f"--only {planted.name}" in command
    # The command as printed, limits included (a case is drawn from them too): the same case, the same failure.
    assert "--max-elements 20000 --max-n 2000" in command
    argv = command.removeprefix("python -m lab.fuzz ").split()
    assert fuzz.main(argv) == 1, "the printed command reproduces the mismatch"


def test_a_run_cut_short_keeps_the_cases_it_finished(tmp_path, monkeypatch, capsys):
    """A run stopped by a time limit (SIGINT) in the middle of a case, one variant through it and the other not,
    exits 130 and keeps the cases before that one, in its table and its JSON, for every variant alike."""
    out = tmp_path / "fuzz.json"
    real_run_case = fuzz.run_case

    def run_case(v, case, *rest):
        if case.index == 137 and v.name == "torch.naive":
            raise KeyboardInterrupt  # as a time limit would stop it, torch.softmax through this case already
        return real_run_case(v, case, *rest)

    monkeypatch.setattr(fuzz, "run_case", run_case)
    assert fuzz.main(["--cases", "1000", "--max-elements", "64", "--max-n", "16", "--only", "torch.softmax,torch.naive",
                      "--json", str(out)]) == 130
    import json

    data = json.loads(out.read_text())
    assert data["cases"] == 137 and data["asked"] == 1000 and data["commit"]  # the code the cases ran
    assert [data["variants"][name]["cases"] for name in ("torch.softmax", "torch.naive")] == [137, 137]
    assert "stopped after 137 of 1000 cases" in capsys.readouterr().out


def test_cli_runs():
    proc = subprocess.run([sys.executable, "-m", "lab.fuzz", "--cases", "5", "--max-elements", "5000", "--max-n",
                           "1000", "--only", "torch.softmax"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch.softmax" in proc.stdout


def test_a_variant_built_per_shape_takes_only_the_first_cases(tmp_path):
    """torch.compile compiles afresh for every case: it runs the first --per-shape-cases cases, the rest are
    counted as not drawn (and the count is in the JSON and the table)."""
    out = tmp_path / "fuzz.json"
    code = fuzz.main(["--cases", "5", "--per-shape-cases", "2", "--max-elements", "300", "--max-n", "100",
                      "--only", "torch.compile,torch.softmax", "--json", str(out)])
    import json

    data = json.loads(out.read_text())
    compiled, eager = data["variants"]["torch.compile"], data["variants"]["torch.softmax"]
    assert code == 0 and data["per_shape_cases"] == 2
    assert compiled["cases"] + compiled["skipped"] == 2 and compiled["not drawn"] == 3
    assert eager["not drawn"] == 0 and eager["cases"] + eager["skipped"] == 5


def test_a_run_split_with_start_draws_the_same_cases():
    """--start K runs cases K.. (a run split over calls): the same cases as one run, so the counts add up."""
    ns = fuzz.lengths([], 200)
    whole = list(fuzz.cases(3, 10, ns, 500, 200))
    assert list(fuzz.cases(3, 4, ns, 500, 200)) + list(fuzz.cases(3, 6, ns, 500, 200, start=4)) == whole


def test_a_case_keeps_its_strides_and_offset_on_any_device():
    """The view is taken on the device: a strided, misaligned case reaches a GPU kernel as drawn (moving a
    CPU view with .to(device) gave a contiguous copy). "meta" stands for a device other than the CPU."""
    ns = fuzz.lengths([], 500)
    case = next(c for c in (fuzz.draw(0, i, ns, 4000, 500) for i in range(1000))
                if c.m > 1 and c.stride > c.n and c.offset)
    for device in ("cpu", "meta"):
        x = fuzz.make(case, device)
        assert x.device.type == device and x.shape == (case.m, case.n)
        assert x.stride() == (case.stride, 1) and x.storage_offset() == case.offset


def test_the_shape_of_a_case_is_known_before_its_input_is_made():
    ns = fuzz.lengths([], 300)
    for case in (fuzz.draw(1, i, ns, 3000, 300) for i in range(300)):
        assert fuzz.case_shape(case) == Shape.of(fuzz.make(case, "meta"))


def test_a_case_no_selected_variant_takes_makes_no_input(monkeypatch):
    """A run --only variants limited to some shapes spends nothing on the cases none of them takes."""
    made = []
    real_make = fuzz.make
    monkeypatch.setattr(fuzz, "make", lambda case, device: made.append(case) or real_make(case, device))
    limited = register(Variant(op="softmax", name="torch.short_rows_only", backend="torch", description="planted",
                               build=lambda: lambda x: torch.softmax(x, -1), traffic=Traffic(1, 1),
                               runs_on_cpu=True, max_n=50))
    try:
        assert fuzz.main(["--cases", "60", "--max-elements", "400", "--max-n", "200", "--only", limited.name]) == 0
    finally:
        del registry._REGISTRY[limited.key]
    assert made and all(c.n <= 50 for c in made)


@pytest.mark.parametrize("case", ["15890", "31490"])
def test_a_gradient_among_the_subnormals_is_judged_from_the_variants_own_y(case):
    """Case 15890 (44145 x 8 float32, values up to +-1000): probabilities of 1e-45 hold one or two subnormal
    units, so the gradient of any softmax (torch's included) is off by units from the backward of the
    unrounded y. Case 31490 (219327 x 4 float32, wide uniform): a y of 3e-41 that the forward returns a few
    units off (within its tolerance, which scales with the row's largest y) fails the backward of y
    rounded to float32 as well (torch.softmax 1.3x, the CUDA ops 2.1x the tolerance on the H200). Against
    the exact backward of the y the variant returned, both agree."""
    assert fuzz.main(["--seed", "0", "--case", case, "--only", "torch.softmax", "--max-elements", "4194304"]) == 0


def test_backward_cases_take_both_sides_of_every_backward_threshold_within_a_variants_limits():
    """The compiled-backward cases (trust's cell, the GPU tests): both sides of every row length where the lab's
    backward changes kernel, in each dtype the variant takes, none beyond its limit."""
    from lab import ops

    lengths = fuzz.backward_row_lengths()
    for threshold in (ops.BACKWARD_SHORT_ROWS, ops.BACKWARD_TRITON_MAX_N):
        assert {threshold, threshold + 1} <= set(lengths)
    short = Variant(op="softmax", name="torch.short_rows", backend="torch", description="planted",
                    build=lambda: torch.softmax, traffic=Traffic(1, 1), dtypes=(torch.float32,), max_n=lengths[1])
    assert fuzz.backward_cases(short) == [(torch.float32, n) for n in lengths[:2]]


@pytest.mark.parametrize("index, variant, max_elements",
                         [(133, "torch.eager", 2000000), (208, "torch.eager", 2000000),
                          (214, "torch.eager", 2000000), (204, "torch.chunked", 2000000),
                          (70254, "torch.eager", 4194304), (71853, "torch.eager", 4194304),
                          (70247, "torch.chunked", 4194304)],
                         ids=["float16 equal 42x513", "float16 equal 8x17", "float32 tiny 4902x129",
                              "bfloat16 NaN in an ignored token 3x6", "float16 dW beyond float16 264218x15",
                              "float16 logits' loss 2x4", "float16 label smoothing over 4099 classes 3x5"])
def test_head_cases_where_pytorch_itself_mismatched_pass(tmp_path, index, variant, max_elements):
    """Head cases of the GPU fuzz where every variant, PyTorch's too, was held to a wrong error scale or answer: hidden
    states all equal in float16 (every token's dlogits rounded alike to the subnormal step after the mean's factor,
    and added up in dW), of 1e-38 in float32 (dW's products float32 subnormals), a NaN in an ignored token's (its
    row's 0 x NaN made every column of dW's scale NaN), a float16 dW summed over 264218 tokens beyond float16's
    largest value (-73062.8: the answer float16 holds is -inf, which every variant gave), or PyTorch's loss on upcast
    float16 logits (float32: the bar's recipe had rounded it to float16, 0.0005 from the exact one by chance, where
    the logits' own rounding moves it 0.0034); and torch.chunked's loss, which overflowed in float16 where label
    smoothing sums over the vocabulary (it upcasts each chunk's logits now, as torch.eager)."""
    import json

    out = tmp_path / "fuzz.json"
    code = fuzz.main(["--op", "linear_cross_entropy", "--seed", "0", "--case", str(index), "--max-elements",
                      str(max_elements), "--max-n", "8192", "--only", variant, "--json", str(out)])
    counts = json.loads(out.read_text())["variants"][variant]
    assert code == 0 and counts["cases"] == 1 and not counts["mismatches"], counts


@pytest.mark.parametrize("op", fuzz.LOSSES)
def test_a_variant_compiled_per_shape_takes_some_of_the_first_cases(op):
    """A variant built afresh for every shape runs only the first PER_SHAPE_CASES cases: with its case reasons it must
    still take some of them, drawn as the fuzz draws them (torch.compile of the head takes the default options only,
    and took none while it asked for the DEFAULT object itself, which no drawn case is)."""
    per_shape = [v for v in variants(op) if v.per_shape]
    assert per_shape
    max_n = 3000  # under a head's HEAD_MAX_HIDDEN too
    taken = dict.fromkeys((v.name for v in per_shape), 0)
    for case in fuzz.cases(0, fuzz.PER_SHAPE_CASES, fuzz.lengths(fuzz.variant_thresholds(variants(op)), max_n),
                           20000, max_n, None, 0, fuzz.case_kinds(op)):
        dtype = getattr(torch, case.dtype)
        inputs = fuzz.loss_inputs(op, case, fuzz.make(case, "cpu"), 20000)
        for v in per_shape:
            if (v.skip_reason(fuzz.case_shape(case, op, 20000), dtype, case.offset * dtype.itemsize) is None
                    and v.case_skip_reason(*inputs) is None):
                taken[v.name] += 1
    assert all(taken.values()), taken
