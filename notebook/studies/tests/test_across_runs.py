"""notebook/studies/across_runs.py: auto's gaps across several runs' results.json (no GPU)."""

import importlib.util
import json
import subprocess
import sys

import pytest

from lab import resources

sys.path.insert(0, str(resources.ROOT / "scripts"))
spec = importlib.util.spec_from_file_location("across_runs", resources.ROOT / "notebook" / "studies" / "across_runs.py")
across = importlib.util.module_from_spec(spec)
spec.loader.exec_module(across)


def record(variant, n, gbps):
    return {"op": "softmax", "sweep": "tutorial", "variant": variant, "dtype": "bfloat16", "m": 4096, "n": n,
            "status": "ok", "gbps": gbps, "pct_copy": 90.0}


def run(commit, quack_512, quack_1024, triton_512):
    """A run where auto reads 1000 GB/s at both points, beside QuACK and the lab's Triton kernel."""
    return {"operator": "softmax", "environment": {"commit": commit}, "results": [
        record("cuda.auto", 512, 1000), record("peer.quack", 512, quack_512), record("triton.multirow", 512,
                                                                                      triton_512),
        record("cuda.auto", 1024, 1000), record("peer.quack", 1024, quack_1024)]}


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_verdicts_per_point_and_the_count(tmp_path, capsys):
    a = write(tmp_path, "a.json", run("aaa1111", 1010, 990, 900))
    b = write(tmp_path, "b.json", run("bbb2222", 1020, 1005, 1100))
    assert across.main([a, b, "--markdown", str(tmp_path / "across.md")]) == 0
    out = capsys.readouterr().out
    assert "| tutorial | bfloat16 | 4096x512 | 0.990 | 0.980 | 0.985 | behind in every run |" in out
    assert "| tutorial | bfloat16 | 4096x1024 | 1.010 | 0.995 | 1.003 | both |" in out
    assert out.index("4096x512") < out.index("4096x1024")  # the weakest median first
    assert "2 points in 2 runs: 1 behind in every run, 1 both, 0 ahead or level in every run" in out
    assert "| aaa1111 | bbb2222 |" in out  # each run named by its commit
    assert (tmp_path / "across.md").read_text().startswith("# auto across runs")


def test_against_every_variant_takes_the_lab_s_own_kernels_too(tmp_path, capsys):
    a = write(tmp_path, "a.json", run("aaa1111", 900, 900, 1100))
    b = write(tmp_path, "b.json", run("bbb2222", 900, 900, 1050))
    across.main([a, b, "--against", "all"])
    assert "4096x512 | 0.909 | 0.952 | 0.931 | behind in every run |" in capsys.readouterr().out


def test_verdict_edges():
    assert across.verdict([0.999, 0.98]) == "behind in every run"
    assert across.verdict([1.0, 1.2]) == "ahead or level in every run"
    assert across.verdict([0.999, 1.0]) == "both"


def test_a_run_from_git(capsys):
    head = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=resources.ROOT, capture_output=True)
    if head.returncode != 0 or not (resources.ROOT / "results" / "h200" / "softmax" / "results.json").exists():
        pytest.skip("no git history or committed H200 run here")
    label, data = across.load("HEAD:results/h200/softmax/results.json")
    assert label == data["environment"]["commit"] and data["operator"] == "softmax"


@pytest.mark.parametrize("args, message", [
    (["only-one.json"], "at least two runs"),
    (["nowhere.json", "nothing"], "neither a file nor REV:PATH"),
    (["no-such-rev-xyz:results.json", "x:y"], "git show no-such-rev-xyz:results.json failed"),
])
def test_bad_runs_are_refused(args, message):
    with pytest.raises(SystemExit, match=message):
        across.main(args)


def test_two_runs_of_one_commit_are_refused(tmp_path):
    a = write(tmp_path, "a.json", run("same", 1000, 1000, 1000))
    b = write(tmp_path, "b.json", run("same", 1000, 1000, 1000))
    with pytest.raises(SystemExit, match="share a label"):
        across.main([a, b])


def test_another_operator_is_refused(tmp_path):
    a = write(tmp_path, "a.json", {"operator": "vector_add", "results": []})
    b = write(tmp_path, "b.json", run("bbb2222", 1000, 1000, 1000))
    with pytest.raises(SystemExit, match="holds vector_add results"):
        across.main([a, b])
