"""scripts/tune/tune_cluster.py: every launch shape of cuda.cluster timed (GPU only; here its arguments, its refusal
without a GPU, a point out of GPU memory faked on the CPU, and one small point per grid on a GPU with sm_90)."""

import json

import pytest
import scripts_loader
import torch

tune_cluster = scripts_loader.load("scripts/tune/tune_cluster.py")


@pytest.mark.parametrize("bad", [["--grid", "rows"], ["--shapes", "staged"], ["--dtype", "int8"], ["--rounds", "0"]])
def test_bad_arguments_are_refused(bad):
    with pytest.raises(SystemExit) as e:
        tune_cluster.main(bad)
    assert e.value.code == 2  # argparse's usage error, not the no-GPU exit


def test_each_grid_names_the_launches_it_times():
    assert tune_cluster.GRIDS == {"both": (True, False), "persistent": (True,), "one-per-row": (False,)}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        tune_cluster.main(["--grid", "one-per-row", "--shape", "8x16384"])


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a GPU with thread-block clusters (sm_90)")
@pytest.mark.parametrize(("grid", "rounds"), [("one-per-row", 1), ("persistent", 3)])
def test_one_small_point_times_only_the_grid_asked_for(tmp_path, grid, rounds):
    out = tmp_path / "tune.json"
    assert tune_cluster.main(["--dtype", "bfloat16", "--shape", "16x16384", "--grid", grid, "--rounds", str(rounds),
                              "--json", str(out)]) == 0
    [row] = json.loads(out.read_text())
    timed = [c for c in row["configs"] if "pct_copy" in c]
    assert timed, row["configs"]
    assert {c["persistent"] for c in row["configs"]} == {grid == "persistent"}
    assert row["rounds"] == rounds and row["copy_gbps"] > 0
    assert all(row[ref] > 0 for ref in ("cuda.cluster", "streaming", "torch.softmax"))


def test_a_point_out_of_gpu_memory_is_reported_and_the_rest_still_timed(monkeypatch, capsys, tmp_path):
    """The tune goes on past a point the GPU has no memory for (e.g. the float64 check of 4096x262144 on an
    80 GB H100), names it, keeps the others in the JSON, and exits 1. Faked on the CPU: measure_point raises
    for one shape and returns a row for the other."""
    def fake_point(sweep, shape, dtype, shapes, kinds, grid, rounds):
        if shape.n == 262144:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB.\nmore")
        return {"sweep": sweep, "m": shape.m, "n": shape.n, "plan": [0, 1, 0, 0], "configs": [],
                "cuda.cluster": 99.0, "streaming": 60.0, "torch.softmax": 50.0}

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tune_cluster, "load_extension", lambda: None)
    monkeypatch.setattr(tune_cluster, "cluster_shapes", lambda: [])
    monkeypatch.setattr(tune_cluster, "measure_point", fake_point)
    out = tmp_path / "tune.json"
    code = tune_cluster.main(["--dtype", "bfloat16", "--shape", "4096x262144", "--shape", "8x16384",
                              "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 1
    assert "4096x262144  NOT TIMED: out of GPU memory (CUDA out of memory. Tried to allocate 8.00 GiB.)" in text
    assert "1 not timed (out of GPU memory): custom bfloat16 4096x262144" in text
    assert [r["n"] for r in json.loads(out.read_text())] == [16384]
