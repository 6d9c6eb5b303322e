"""scripts/tune/stagger.py: the first-wave stagger of cuda.cluster timed over a grid (GPU only; here its
arguments, its refusals and one small point on a GPU)."""

import json

import pytest
import scripts_loader
import torch

stagger = scripts_loader.load("scripts/tune/stagger.py")


@pytest.mark.parametrize("bad, message", [(["--point", "256-262144"], "--point takes MxN"),
                                          (["--point", "0x64"], "at least 1"),
                                          (["--groups", "2,x"], "comma-separated whole numbers"),
                                          (["--step-ns", "-5"], "numbers of at least 0"),
                                          (["--config", "20-16"], "--config takes SHAPE:CLUSTER")])
def test_bad_arguments_are_refused(capsys, bad, message):
    with pytest.raises(SystemExit):
        stagger.main(bad)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("bad", [["--groups", "65"], ["--step-ns", "100001"], ["--rounds", "0"]])
def test_out_of_range_is_refused(bad):
    with pytest.raises(SystemExit, match="stagger: "):
        stagger.main(bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        stagger.main(["--point", "4x65536"])


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a GPU with thread-block clusters (sm_90)")
def test_times_a_small_grid(capsys, tmp_path):
    out_json = tmp_path / "s.json"
    assert stagger.main(["--point", "64x65536", "--dtype", "float32", "--groups", "2", "--step-ns", "300",
                         "--rounds", "2", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "float32 64x65536 plan" in out and "none " in out
    (record,) = json.loads(out_json.read_text())["records"]
    pairs = {(c["groups"], c["step_ns"]) for c in record["configs"]}
    assert {(1, 0), (2, 300), tuple(record["plan"][3:])} == pairs
    assert all(c["pct_copy"] > 0 for c in record["configs"])


def test_plot_from_an_earlier_run(tmp_path, capsys):
    """--plot-from draws the heatmaps of a saved run without a GPU: one panel per point, gains over none."""
    record = {"dtype": "bfloat16", "m": 256, "n": 262144, "plan": [31, 16, 0, 1, 0], "launch": [31, 16, 0],
              "copy_us": 68.0, "configs": [{"groups": 1, "step_ns": 0, "us": 75.0, "pct_copy": 90.7},
                                           {"groups": 4, "step_ns": 500, "us": 71.0, "pct_copy": 95.8},
                                           {"groups": 4, "step_ns": 1000, "us": 72.0, "pct_copy": 94.4}]}
    saved = tmp_path / "s.json"
    saved.write_text(json.dumps({"device": "NVIDIA H200", "records": [record, dict(record, dtype="float32")]}))
    png = tmp_path / "s.png"
    assert stagger.main(["--plot-from", str(saved), "--plot", str(png)]) == 0
    assert png.stat().st_size > 10_000 and f"wrote {png}" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [(["--plot-from", "x.json"], "needs --plot FILE"),
                                           (["--plot-from", "/nonexistent.json", "--plot", "p.png"], "cannot read")])
def test_plot_from_refuses_what_it_cannot_draw(args, message):
    with pytest.raises(SystemExit, match=message):
        stagger.main(args)
