"""notebook/studies/neighbours.py, call_series.py and event_vs_kernel.py: how a timed call depends on the stretch
before it (the evidence behind bench.l2_reset), and what it holds besides its kernel. GPU only; here
their arguments and refusals, and on a GPU one small run of each."""

import importlib.util

import pytest
import torch

from lab import resources
from lab.registry import variants


def _script(name):
    spec = importlib.util.spec_from_file_location(name, resources.ROOT / "notebook" / "studies" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


neighbours = _script("neighbours")
call_series = _script("call_series")
SOFTMAX = [v.name for v in variants() if v.op == "softmax"]
CUDA = [v.name for v in variants(backends=["cuda"]) if v.op == "softmax"]
TORCH = [v.name for v in variants(backends=["torch"]) if v.op == "softmax"]


def test_an_unknown_neighbour_is_named():
    with pytest.raises(SystemExit, match="no softmax variant named nope.nothing"):
        neighbours.main(["--target", SOFTMAX[0], "--variants", "nope.nothing", "--shape", "4x8"])


@pytest.mark.parametrize("bad", [["--reps", "0"], ["--repeat", "0"], ["--reset", "-1"], ["--settle-ms", "-2"]])
def test_neighbours_refuses_bad_counts(bad):
    with pytest.raises(SystemExit, match="neighbours: "):
        neighbours.main(["--target", SOFTMAX[0], "--shape", "4x8", *bad])


@pytest.mark.parametrize("bad", [["--calls", "0"], ["--window", "0"]])
def test_call_series_refuses_bad_counts(bad):
    with pytest.raises(SystemExit, match="call_series: "):
        call_series.main(["--sequence", SOFTMAX[0], "--shape", "4x8", *bad])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_both_refuse_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        neighbours.main(["--target", SOFTMAX[0], "--shape", "4x8"])
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        call_series.main(["--sequence", SOFTMAX[0], "--shape", "4x8"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_neighbours_times_the_target_after_each(capsys):
    target, other = CUDA[0], TORCH[0]
    assert neighbours.main(["--target", target, "--variants", other, "--shape", "256x1000", "--reps", "5",
                            "--repeat", "2", "--reset", "2"]) == 0
    out = capsys.readouterr().out
    for n in (target, other, "copy"):  # each neighbour, the target itself and the copy, one line each
        line = next(line for line in out.splitlines() if line.strip().startswith(f"after {n} "))
        assert "median" in line and "output at" in line
    assert "2 L2 reset copies first" in out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_call_series_prints_each_stretch(capsys):
    seq = [CUDA[0], "l2-reset", "copy", "reset-persisting", CUDA[0]]
    assert call_series.main(["--sequence", ",".join(seq), "--shape", "256x1000", "--calls", "30",
                             "--window", "10"]) == 0
    out = capsys.readouterr().out
    heads = [line for line in out.splitlines() if line.startswith("== ")]
    assert [h.split(":")[0].removeprefix("== ") for h in heads] == seq
    assert sum("window medians by level" in line for line in out.splitlines()) == 3  # not for the resets


event_vs_kernel = _script("event_vs_kernel")


def test_event_vs_kernel_names_an_unknown_variant_and_refuses_bad_counts():
    with pytest.raises(SystemExit, match="no softmax variant named nope.nothing"):
        event_vs_kernel.main(["--variants", "nope.nothing", "--shape", "4x8"])
    with pytest.raises(SystemExit, match="event_vs_kernel: "):
        event_vs_kernel.main(["--variants", SOFTMAX[0], "--shape", "4x8", "--calls", "0"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_event_vs_kernel_splits_a_call_into_its_kernels_and_the_rest(capsys):
    assert event_vs_kernel.main(["--variants", CUDA[0], "--shape", "256x1000", "--calls", "20",
                                 "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{CUDA[0]}: event median" in out and "a call; outside them" in out
