"""notebook/studies/overhead.py: host time per call of the fast entries (GPU only; here its refusal and arguments)."""

import importlib.util

import pytest
import torch

from lab import resources

spec = importlib.util.spec_from_file_location("overhead", resources.ROOT / "notebook" / "studies" / "overhead.py")
overhead = importlib.util.module_from_spec(spec)
spec.loader.exec_module(overhead)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        overhead.main(["--shape", "4x8", "--calls", "1"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_times_each_entry(tmp_path, capsys):
    import json

    out = tmp_path / "o.json"
    assert overhead.main(["--shape", "64x128", "--dtype", "bfloat16", "--calls", "10", "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["commit"] and saved["dispatch_table"]  # what was timed, with which table
    row = saved["rows"][0]
    assert set(row["us_per_call"]) >= {"lab.softmax", "torch.ops.lab.softmax", "torch.softmax"}
    assert all(v > 0 for v in row["us_per_call"].values())
