"""scripts/interleave.py: variants timed in interleaved rounds (GPU only; here its arguments and refusals)."""

import importlib.util

import pytest
import torch

from lab import resources
from lab.registry import variants

spec = importlib.util.spec_from_file_location("interleave", resources.ROOT / "scripts" / "interleave.py")
interleave = importlib.util.module_from_spec(spec)
spec.loader.exec_module(interleave)

SOFTMAX = [v.name for v in variants() if v.op == "softmax"]


def test_unknown_variant_is_named():
    with pytest.raises(SystemExit, match="no softmax variant named nope.nothing"):
        interleave.main(["--variants", f"{SOFTMAX[0]},nope.nothing", "--shape", "4x8"])


@pytest.mark.parametrize("bad", [["--rounds", "0"], ["--reps", "0"], ["--flush-mb", "0"], ["--flush-mb", "1.5"]])
def test_bad_counts_are_refused(bad):
    with pytest.raises(SystemExit, match="interleave: "):
        interleave.main(["--variants", SOFTMAX[0], "--shape", "4x8", *bad])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        interleave.main(["--variants", SOFTMAX[0], "--shape", "4x8"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_times_each_variant_each_round(capsys):
    names = [v.name for v in variants(backends=["torch"]) if v.op == "softmax"][:1] + \
            [v.name for v in variants(backends=["cuda"]) if v.op == "softmax"][:1]
    assert interleave.main(["--variants", ",".join(names), "--shape", "64x100", "--shape", "8x1000",
                            "--dtype", "bfloat16", "--rounds", "2", "--reps", "5", "--flush-mb", "8"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("flush")]
    assert len(lines) == 2 * len(names), lines
    for line in lines:
        assert "median" in line and "host" in line, line  # timed, not skipped or failed
