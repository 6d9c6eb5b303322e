"""notebook/studies/primer.py: its flush stand-in and its refusals (the timings are the GPU's)."""

import importlib.util
import sys

import pytest
import torch

from lab import resources

sys.path.insert(0, str(resources.ROOT / "scripts"))
spec = importlib.util.spec_from_file_location("primer", resources.ROOT / "notebook" / "studies" / "primer.py")
primer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(primer)


def test_the_primer_runs_after_the_flush_write():
    order = []

    class Buf:
        def zero_(self):
            order.append("flush")

    primer.PrimedFlush(Buf(), lambda: order.append("primer")).zero_()
    primer.PrimedFlush(Buf()).zero_()
    assert order == ["flush", "primer", "flush"]


@pytest.mark.parametrize("flag", ["--rounds", "--reps", "--primer-rows", "--flush-mb"])
def test_counts_below_one_are_refused(flag):
    with pytest.raises(SystemExit, match="must be at least 1"):
        primer.main(["--variants", "torch.softmax", "--primers", "torch.softmax", "--shape", "8x64", flag, "0"])


def test_an_empty_primer_list_is_refused():
    with pytest.raises(SystemExit, match="each name at least one variant"):
        primer.main(["--variants", "torch.softmax", "--primers", " , ", "--shape", "8x64"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal on a machine without a GPU")
def test_without_a_gpu_it_says_so():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        primer.main(["--variants", "torch.softmax", "--primers", "torch.softmax", "--shape", "8x64"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_primed_timing_runs(capsys):
    assert primer.main(["--variants", "torch.softmax", "--primers", "torch.softmax", "--shape", "64x1000",
                        "--rounds", "1", "--reps", "3", "--dtype", "float32"]) == 0
    assert "behind primer torch.softmax" in capsys.readouterr().out
