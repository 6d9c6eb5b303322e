"""scripts/tune/tune_cross_entropy_cluster.py: every launch of the cross-entropy kernel timed, the loss alone or with
its gradient (GPU only; here its arguments and its refusal without a GPU, and one small point on a GPU with sm_90)."""

import json

import pytest
import scripts_loader
import torch

tune = scripts_loader.load("scripts/tune/tune_cross_entropy_cluster.py")


@pytest.mark.parametrize("bad", [["--dtype", "int8"], ["--shape", "4xV"], ["--staggered", "two"]])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(SystemExit) as e:
        tune.main(bad)
    assert e.value.code == 2  # argparse's usage error, not the no-GPU exit


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        tune.main(["--shape", "8x50257"])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a GPU with thread-block clusters (sm_90)")
@pytest.mark.parametrize("grad", [False, True], ids=["loss-alone", "with-gradient"])
def test_one_small_point_checks_and_times_its_launches_and_the_tables(tmp_path, grad):
    """Rows off 16-byte boundaries (odd V): every candidate launch is checked against float64 (the loss per row, and
    the gradient with --grad) and timed, none wrong, and the launch the kernel's table gives is among them."""
    out = tmp_path / "tune.json"
    assert tune.main(["--dtype", "bfloat16", "--shape", "64x50257", "--staggered", "1", "--json", str(out)]
                     + ["--grad"] * grad) == 0
    [row] = json.loads(out.read_text())
    assert row["grad"] == grad
    assert [c for c in row["configs"] if "pct_copy" in c], row["configs"]
    p = row["planned"]
    assert "pct_copy" in p and [p["shape"], p["cluster"], int(p["persistent"])] == row["plan"][:3]
