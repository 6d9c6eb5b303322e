"""scripts/targets.py: auto's standing against the targets, from a results.json (no GPU)."""

import importlib.util
import json
import sys

from lab import resources

spec = importlib.util.spec_from_file_location("targets", resources.ROOT / "scripts" / "targets.py")
targets = importlib.util.module_from_spec(spec)
sys.modules["targets"] = targets
spec.loader.exec_module(targets)


def record(sweep, variant, n, gbps, pct, status="ok"):
    return {"op": "softmax", "sweep": sweep, "variant": variant, "dtype": "bfloat16", "m": 4096, "n": n,
            "status": status, "gbps": gbps, "pct_copy": pct}


def test_counts_and_weakest(tmp_path, capsys):
    results = [
        record("fixed", "cuda.auto", 1024, 3900, 96.0), record("fixed", "peer.quack", 1024, 3800, 93.6),
        record("fixed", "cuda.auto", 4096, 3000, 80.0), record("fixed", "peer.quack", 4096, 3600, 96.0),
        record("fixed", "triton.fused", 4096, 9999, 300.0, status="FAIL"),  # a failed check is never counted
        record("tutorial", "cuda.auto", 512, 1000, 90.0), record("tutorial", "torch.softmax", 512, 1005, 90.5),
        record("tutorial", "peer.liger", 8192, 1000, 90.0),  # auto not timed there: not a point
    ]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"operator": "softmax", "command": "python -m lab.test", "results": results}))
    rows = targets.points(results)
    assert [(r["sweep"], r["n"], r["best_other"]) for r in rows] == [
        ("fixed", 1024, "peer.quack"), ("fixed", 4096, "peer.quack"), ("tutorial", 512, "torch.softmax")]
    sys.argv = ["targets.py", str(path), "--markdown", str(tmp_path / "t.md")]
    targets.main()
    out = capsys.readouterr().out
    assert "auto >= 95% of the copy: 1 of 2 fixed-sweep points" in out
    assert "auto >= every other variant: 1 of 3 points (1 more within 1%)" in out
    assert "auto >= each of the peers, torch.softmax and torch.compile: 1 of 3 points (1 more within 1%)" in out
    assert out.index("fixed bfloat16 4096x4096: 3000 GB/s, 80.0% of the copy, 0.833x peer.quack") < out.index(
        "tutorial bfloat16 4096x512")
    assert (tmp_path / "t.md").read_text().startswith("# cuda.auto against its targets")
