"""scripts/tune/tune_multirow.py: its configurations and refusals, and its kernel under the interpreter."""

import os
import sys

import pytest
import scripts_loader
import torch

from lab import resources

sys.path.insert(0, str(resources.ROOT / "scripts"))
tune_multirow = scripts_loader.load("scripts/tune/tune_multirow.py")


def test_configurations_are_parsed():
    assert tune_multirow.parse_configs("4x4, 1x1,16x8") == [(4, 4), (1, 1), (16, 8)]
    assert len(tune_multirow.parse_configs(tune_multirow.DEFAULT_CONFIGS)) == 10


@pytest.mark.parametrize("bad, message", [
    ("4", "expected ROWSxWARPS"), ("ax4", "expected ROWSxWARPS"), ("3x4", "power of two"), ("4x3", "warps must be"),
    (" , ", "no configuration")])
def test_bad_configurations_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        tune_multirow.parse_configs(bad)
    with pytest.raises(SystemExit, match="tune_multirow: "):
        tune_multirow.main(["--shape", "8x64", "--configs", bad])


def test_rows_past_the_kernel_s_limit_are_refused():
    with pytest.raises(SystemExit, match="do not fit one program"):
        tune_multirow.main(["--shape", f"2x{tune_multirow.MAX_N + 1}", "--configs", "1x4"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal on a machine without a GPU")
def test_without_a_gpu_it_says_so():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        tune_multirow.main(["--shape", "8x64", "--configs", "1x4"])


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                    reason="the kernel runs on a GPU or under TRITON_INTERPRET=1")
@pytest.mark.parametrize("rows, warps", [(1, 1), (4, 2), (8, 4)])
def test_each_configuration_computes_softmax(rows, warps):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    x = torch.randn(13, 100, device=device)
    y = tune_multirow.multirow_at(rows, warps)(x)
    torch.testing.assert_close(y.double(), torch.softmax(x.double(), dim=1), rtol=1e-5, atol=1e-6)
