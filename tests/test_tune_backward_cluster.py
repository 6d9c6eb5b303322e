"""scripts/tune/tune_backward_cluster.py: every launch of softmax_backward's cuda.cluster timed (GPU only; here the
candidates it times, its arguments, its refusal without a GPU, and one small point on a GPU with sm_90)."""

import json
import math

import pytest
import scripts_loader
import torch

from lab.dispatch import pack_elements

tune = scripts_loader.load("scripts/tune/tune_backward_cluster.py")

# (threads, packs, dy in shared memory) as the kernel lists them
SHAPES = [(128, 4, 0), (256, 4, 0), (512, 4, 0), (128, 8, 0), (256, 8, 0), (512, 8, 0), (384, 22, 1), (256, 32, 1)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n", [1024, 4097, 65536, 262144])
def test_candidates_hold_the_row_and_fill_a_quarter_of_the_registers(n, dtype):
    """Each (shape, cluster) timed holds its slice of the row in the shape's packs and fills at least a quarter of
    them; every cluster size the kernel launches that does so is among them."""
    pack = pack_elements(dtype)
    got = set(tune.candidates(n, dtype, SHAPES))
    want = {(i, c) for i, (threads, packs, _) in enumerate(SHAPES) for c in tune.CLUSTERS
            if 4 * math.ceil(math.ceil(n / pack) / c) >= threads * packs >= math.ceil(math.ceil(n / pack) / c)}
    assert got == want and got, (n, dtype, sorted(got))


@pytest.mark.parametrize("bad", [["--dtype", "int8"], ["--min-n", "many"]])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(SystemExit) as e:
        tune.main(bad)
    assert e.value.code == 2  # argparse's usage error, not the no-GPU exit


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        tune.main(["--dtype", "bfloat16"])


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a GPU with thread-block clusters (sm_90)")
def test_the_shapes_are_the_kernels_and_a_point_is_timed(tmp_path, monkeypatch):
    assert tune.backward_cluster_shapes() == SHAPES
    monkeypatch.setattr(tune.inputs, "SWEEPS", {"fixed": (tune.inputs.Shape(64, 65536),), "tutorial": ()})
    out = tmp_path / "tune.json"
    assert tune.main(["--dtype", "bfloat16", "--json", str(out)]) == 0
    [row] = json.loads(out.read_text())
    assert [c for c in row["configs"] if "pct_copy" in c] and not [c for c in row["configs"] if "error" in c]
