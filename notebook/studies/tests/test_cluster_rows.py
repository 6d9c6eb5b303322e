"""notebook/studies/cluster_rows.py: cuda.cluster's share of a copy against the row count (GPU only; here its line
fit, its arguments and its refusals)."""

import importlib.util

import pytest
import torch

from lab import resources

spec = importlib.util.spec_from_file_location("cluster_rows", resources.ROOT / "notebook" / "studies" / "cluster_rows.py")
cluster_rows = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cluster_rows)


def test_fit_finds_the_line():
    a, b = cluster_rows.fit([100, 200, 400], [12.0 + 0.25 * m for m in (100, 200, 400)])
    assert a == pytest.approx(12.0) and b == pytest.approx(0.25)


@pytest.mark.parametrize("bad", [["--m", "0"], ["--m", "1,x"], ["--n", "0"]])
def test_bad_counts_are_refused(bad):
    with pytest.raises(SystemExit, match="cluster_rows: "):
        cluster_rows.main(bad)


def test_bad_config_is_refused(capsys):
    with pytest.raises(SystemExit):
        cluster_rows.main(["--config", "20-16"])
    assert "--config takes SHAPE:CLUSTER" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        cluster_rows.main(["--m", "4"])


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a GPU with thread-block clusters (sm_90)")
def test_times_the_plan_at_each_row_count(capsys):
    assert cluster_rows.main(["--n", "65536", "--m", "4,8", "--dtype", "float32"]) == 0
    out = capsys.readouterr().out
    assert out.count("M = ") == 2 and "plan, persistent" in out and "time = " in out
    assert out.count("*") >= 2  # the plan's own grid marked, in a line of each M at least


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0),
                    reason="needs a GPU with thread-block clusters (sm_90)")
def test_the_streaming_path_is_refused():
    with pytest.raises(SystemExit, match="streaming path"):
        cluster_rows.main(["--n", str(2**21), "--m", "1"])
