"""scripts/targets.py: auto's standing against the targets, from a results.json (no GPU)."""

import json
import sys

import scripts_loader

targets = scripts_loader.load("scripts/targets.py")


def record(sweep, variant, n, gbps, pct, status="ok"):
    return {"op": "softmax", "sweep": sweep, "variant": variant, "dtype": "bfloat16", "m": 4096, "n": n,
            "status": status, "gbps": gbps, "pct_copy": pct}


def test_counts_and_weakest(tmp_path, capsys, monkeypatch):
    results = [
        record("fixed", "cuda.auto", 1024, 3900, 96.0), record("fixed", "peer.quack", 1024, 3800, 93.6),
        record("fixed", "cuda.auto", 4096, 3000, 80.0), record("fixed", "peer.quack", 4096, 3600, 96.0),
        record("fixed", "triton.fused", 4096, 9999, 300.0, status="FAIL"),  # a failed check is never counted
        record("tutorial", "cuda.auto", 512, 1000, 90.0), record("tutorial", "torch.softmax", 512, 1005, 90.5),
        record("tutorial", "peer.liger", 8192, 1000, 90.0),  # auto not timed there: not a point
        record("tutorial", "cuda.auto", 16384, 1000, 90.0),  # auto alone: nothing to compare with
    ]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"operator": "softmax", "command": "python -m lab.test", "results": results}))
    rows = targets.points(results)
    assert [(r["sweep"], r["n"], r["best_other"]) for r in rows] == [
        ("fixed", 1024, "peer.quack"), ("fixed", 4096, "peer.quack"), ("tutorial", 512, "torch.softmax")]
    monkeypatch.setattr(sys, "argv", ["targets.py", str(path), "--markdown", str(tmp_path / "t.md")])
    targets.main()
    out = capsys.readouterr().out
    assert "auto >= 95% of the copy: 1 of 2 fixed-sweep points" in out
    assert "auto >= every other variant: 1 of 3 points (1 more within 1%, not re-measured)" in out
    assert ("auto >= each of the peers, torch.softmax and torch.compile: 1 of 3 points "
            "(1 more within 1%, not re-measured)") in out
    assert out.index("fixed bfloat16 4096x4096: 3000 GB/s, 80.0% of the copy, 0.833x peer.quack") < out.index(
        "tutorial bfloat16 4096x512")
    assert (tmp_path / "t.md").read_text().startswith("# cuda.auto against its targets")


def test_a_near_tie_is_decided_by_the_median_of_the_re_measures(tmp_path, capsys):
    run = [record("fixed", "cuda.auto", 1024, 3960, 95.0), record("fixed", "peer.quack", 1024, 4000, 96.0)]
    rows = targets.points(run)
    assert 0.99 <= rows[0]["ratio"] < 1.0
    again = [[{**record("custom", "cuda.auto", 1024, a, 95.0)}, {**record("custom", "peer.quack", 1024, q, 95.0)}]
             for a, q in ((4010, 4000), (3990, 4005), (4020, 3995))]  # medians: auto 4010, quack 4000
    lines = targets.remeasure(rows, again)
    assert rows[0]["ratio_remeasured"] == 4010 / 4000 and targets.counted(rows[0], "ratio")
    assert any("median of 3 re-measures: auto 4010 GB/s, peer.quack 4000: 1.002 (ahead)" in line for line in lines)
    text = targets.report(rows, "cmd", lines)
    assert "auto >= every other variant: 1 of 1 points (0 more within 1%)" in text
    behind = targets.points(run)
    targets.remeasure(behind, [[record("custom", "cuda.auto", 1024, 3900, 95.0),
                                record("custom", "peer.quack", 1024, 4000, 95.0)]])
    assert not targets.counted(behind[0], "ratio")


def test_near_ties_give_the_command_that_re_measures_them():
    results = [record("fixed", "lab.auto", 1024, 3960, 95.0), record("fixed", "triton.fused", 1024, 3970, 95.2),
               record("fixed", "peer.quack", 1024, 4000, 96.0),  # 0.990x: a near tie
               record("fixed", "lab.auto", 4096, 3000, 80.0), record("fixed", "peer.quack", 4096, 3600, 96.0),
               record("tutorial", "lab.auto", 512, 1000, 90.0), record("tutorial", "torch.compile", 512, 1001, 90.1)]
    rows = targets.points(results)
    assert [(r["sweep"], r["n"]) for r in targets.near_ties(rows)] == [("fixed", 1024), ("tutorial", 512)]
    assert targets.remeasure_command(rows) == (
        "python -m lab.test --only lab.auto,peer.quack,torch.compile --shape 4096x512 --shape 4096x1024 "
        "--output-json run_<i>.json --no-save")
    assert targets.remeasure_command(targets.points(results[3:5])) is None
    # the run's table routes auto at those points: those variants are timed too (the run rebuilds auto's table)
    table = {"lab_entries": {"bfloat16": [[1024, 4096, "triton.fused", 3970], [512, 4096, "cuda.cluster", 999]]},
             "entries": {"bfloat16": [[1024, 4096, "register_cached", 3900]], "float32": [[512, 4096, "online", 1]]}}
    assert targets.remeasure_command(rows, table).startswith(
        "python -m lab.test --only lab.auto,peer.quack,torch.compile,triton.fused,cuda.register_cached,cuda.cluster "
        "--shape")


def test_the_weakest_points_carry_the_times_of_a_call_where_the_run_recorded_them():
    """A gap in GB/s on a 4 us kernel is a few hundred nanoseconds: the times say so."""
    run = [{**record("tutorial", "lab.auto", 128, 400, 104.0), "median_ms": 0.0052},
           {**record("tutorial", "peer.quack", 128, 478, 124.0), "median_ms": 0.0044},
           record("fixed", "lab.auto", 4096, 3000, 80.0), record("fixed", "peer.quack", 4096, 3600, 96.0)]
    text = targets.report(targets.points(run), "cmd", [])
    assert "0.837x peer.quack (lab.auto 5.2 us, peer.quack 4.4)" in text
    assert "0.833x peer.quack\n" in text  # no times recorded: none printed


def test_a_comparison_with_the_kernel_of_autos_own_route_is_marked():
    """lab.auto against the variant it routes to (or cuda.auto running that CUDA kernel) is one kernel timed
    twice: the report says so, and only there."""
    run = [record("tutorial", "lab.auto", 512, 1000, 90.0),
           record("tutorial", "cuda.register_cached", 512, 1090, 98.1),
           record("tutorial", "lab.auto", 1024, 1000, 90.0), record("tutorial", "cuda.auto", 1024, 1040, 93.6),
           record("tutorial", "lab.auto", 2048, 1000, 90.0), record("tutorial", "peer.quack", 2048, 1050, 94.5),
           record("tutorial", "lab.auto", 4096, 1000, 90.0), record("tutorial", "cuda.auto", 4096, 1030, 92.7)]
    routes = [[n, 4096, "cuda.register_cached", 1] for n in (512, 1024, 2048)] + [[4096, 4096, "triton.multirow", 1]]
    table = {"lab_entries": {"bfloat16": routes},
             "entries": {"bfloat16": [[1024, 4096, "register_cached", 1], [4096, 4096, "cluster", 1]]}}
    rows = targets.points(run)
    twin = {r["n"]: targets.route_twin(r, r["best_other"], table) for r in rows}
    # 512: its route itself; 1024: cuda.auto picks the route's CUDA kernel; 2048: a peer; 4096: the route is
    # Triton, cuda.auto runs cluster
    assert twin == {512: True, 1024: True, 2048: False, 4096: False}
    assert not any(targets.route_twin(r, r["best_other"], None) for r in rows)  # no table, no claim
    text = targets.report(rows, "cmd", [], table)
    assert text.count(targets.TWIN) == 2
    assert f"0.917x cuda.register_cached{targets.TWIN}" in text and "0.952x peer.quack\n" in text
    # judged as cuda.auto: lab.auto is its twin only where lab.auto's route is cuda.auto's CUDA kernel
    as_cuda = targets.points([{**rec, "variant": "cuda.auto" if rec["variant"] == "lab.auto" else rec["variant"]}
                              for rec in run[:2]] + [record("tutorial", "lab.auto", 512, 1100, 99.0)], "cuda.auto")
    assert as_cuda[0]["auto"] == "cuda.auto" and as_cuda[0]["best_other"] == "lab.auto"
    table_512 = {"lab_entries": {"bfloat16": [[512, 4096, "triton.multirow", 1]]},
                 "entries": {"bfloat16": [[512, 4096, "register_cached", 1]]}}
    assert not targets.route_twin(as_cuda[0], "lab.auto", table_512)
    table_512["lab_entries"]["bfloat16"][0][2] = "cuda.register_cached"
    assert targets.route_twin(as_cuda[0], "lab.auto", table_512)
    assert targets.route_twin(as_cuda[0], "cuda.register_cached", table_512)


def test_a_host_bound_timing_is_named_in_the_weakest_points_and_the_summary():
    results = [record("tutorial", "cuda.auto", 512, 1000, 90.0), record("tutorial", "torch.compile", 512, 1100, 99.0),
               record("tutorial", "cuda.auto", 1024, 1000, 90.0), record("tutorial", "peer.quack", 1024, 1050, 94.5)]
    results[0]["host_bound"] = True  # auto's own timing held host time at N = 512
    rows = targets.points(results)
    assert [r["host_bound"] for r in rows] == [["cuda.auto"], []]
    text = targets.report(rows, "python -m lab.test")
    weakest = [line for line in text.splitlines() if line.startswith("  - tutorial")]
    assert weakest[0].endswith("host-bound: cuda.auto") and "host-bound" not in weakest[1]
    assert "timings that hold host time" in text and "tutorial bfloat16 4096x512 cuda.auto" in text


def test_the_points_lost_to_the_peers_and_pytorch_are_listed_widest_first_after_the_re_measures():
    run = [record("fixed", "lab.auto", 1024, 3960, 95.0), record("fixed", "peer.quack", 1024, 4000, 96.0),
           record("fixed", "lab.auto", 4096, 3000, 80.0), record("fixed", "torch.compile", 4096, 3100, 83.0),
           record("fixed", "lab.auto", 8192, 3990, 95.0), record("fixed", "peer.liger", 8192, 4000, 96.0),
           record("fixed", "lab.auto", 16384, 4000, 97.0), record("fixed", "triton.fused", 16384, 4100, 99.0),
           record("fixed", "peer.quack", 16384, 3900, 95.0)]  # lost to the lab's own Triton kernel, not a peer
    rows = targets.points(run)
    # 8192's near tie is re-measured ahead; 1024's stays behind
    again = [[record("custom", "lab.auto", n, a, 95.0), record("custom", peer, n, q, 95.0)]
             for n, peer, a, q in ((1024, "peer.quack", 3950, 4000), (8192, "peer.liger", 4010, 4000))]
    lines = targets.remeasure(rows, again)
    assert [(r["n"], r["best_outside"]) for r in targets.lost_outside(rows)] == [(4096, "torch.compile"),
                                                                              (1024, "peer.quack")]
    text = targets.report(rows, "cmd", lines)
    assert "- the 2 points where auto trails the peers or PyTorch" in text
    assert "  - fixed bfloat16 4096x4096: 0.968x torch.compile\n" in text
    assert "  - fixed bfloat16 4096x1024: 0.990x peer.quack, re-measured 0.988\n" in text
    listed = text.split("trails the peers or PyTorch")[1]
    assert "4096x8192" not in listed and "4096x16384" not in listed
