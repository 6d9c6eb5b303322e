"""notebook/studies/output_address.py: a kernel's time with its output at other addresses (GPU only; here the outputs'
layout, which runs on CPU tensors, the refusals, and on a GPU one short run whose outputs are compared with
each variant's output allocated apart)."""

import importlib.util
import sys

import pytest
import torch

from lab import resources
from lab.registry import variants

sys.path.insert(0, str(resources.ROOT / "scripts"))  # output_address imports interleave from beside it
spec = importlib.util.spec_from_file_location("output_address", resources.ROOT / "notebook" / "studies" / "output_address.py")
output_address = importlib.util.module_from_spec(spec)
spec.loader.exec_module(output_address)

SOFTMAX = [v.name for v in variants() if v.op == "softmax"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pool_views_start_at_their_offsets_on_16_byte_boundaries(dtype):
    x = torch.randn(3, 40).to(dtype)
    outs = output_address.outputs_at(x, 2, [64, 4])
    assert list(outs) == ["out_A", "out_B", "pool+0KB", "pool+4KB", "pool+64KB"]
    for out in outs.values():
        assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    base = outs["pool+0KB"].data_ptr()
    assert base % 16 == 0
    assert outs["pool+4KB"].data_ptr() - base == 4096 and outs["pool+64KB"].data_ptr() - base == 65536
    outs["pool+64KB"].fill_(1)  # every view lies within the pool: the last one can be written whole
    assert outs["out_A"].data_ptr() != outs["out_B"].data_ptr()


def test_no_pool_without_offsets():
    assert list(output_address.outputs_at(torch.zeros(2, 8), 1, [])) == ["out_A"]


def test_negative_counts_are_refused():
    with pytest.raises(ValueError, match="must not be negative"):
        output_address.outputs_at(torch.zeros(2, 8), 1, [-4])


# argparse's usage error exits with 2; the refusal without a GPU (below) exits with its message, so each of these
# is told apart from it on a machine without one.
@pytest.mark.parametrize("bad", [["--rounds", "0"], ["--separate", "-1"], ["--offsets-kb", "4,-8"]])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(SystemExit) as refused:
        output_address.main(["--variants", SOFTMAX[0], "--shape", "4x8", *bad])
    assert refused.value.code == 2


def test_variants_need_a_shape_and_offsets_need_variants():
    for argv in (["--variants", SOFTMAX[0]], ["--offsets-kb", "4"]):
        with pytest.raises(SystemExit) as refused:
            output_address.main(argv)
        assert refused.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        output_address.main(["--variants", SOFTMAX[0], "--shape", "4x8"])


@pytest.mark.gpu
def test_a_short_run_times_every_output_and_finds_them_equal_to_the_output_apart(capsys):
    """Two variants that take an `out` (from the registry) into three separate outputs and two views of a
    pool: exit 0 (checked, every output bit for bit the output allocated apart), one line per variant."""
    takers = [v.name for v in variants("softmax", backends=["cuda", "triton"])
              if v.writes_out and v.unavailable_on("cuda") is None][:2]
    assert takers, "no variant that takes an out tensor can run on this GPU"
    rc = output_address.main(["--variants", ",".join(takers), "--shape", "64x1000", "--dtype", "float32",
                              "--offsets-kb", "4", "--rounds", "1"])
    text = capsys.readouterr().out
    assert rc == 0, text
    for name in takers:
        [line] = [ln for ln in text.splitlines() if ln.startswith(f"64x1000  {name} ")]
        assert "out_A" in line and "pool+4KB" in line and "spread" in line, line
    assert "differs" not in text and "FAILED" not in text
