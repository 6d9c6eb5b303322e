"""lab.report's plots (no GPU: synthetic records): the styles, the entries plot's choice of variants, and
`python -m lab.report` redrawing a saved run."""

import json
from dataclasses import asdict

import pytest

from lab import report
from lab.report import Result

pytest.importorskip("matplotlib")


def record(variant, backend, n, pct, sweep="fixed", dtype="float32", reads=1, writes=1, status="ok"):
    return Result(sweep=sweep, variant=variant, backend=backend, dtype=dtype, m=64, n=n, row_stride=n,
                  status=status, gbps=40 * pct, copy_gbps=4000.0, pct_copy=pct, model_reads=reads,
                  model_writes=writes)


RUN = [record(v, b, n, p, reads=r, writes=w) for n in (256, 4096) for v, b, p, r, w in (
    ("torch.softmax", "torch", 60, 1, 1), ("torch.naive", "torch", 20, 5, 3), ("triton.fused", "triton", 90, 1, 1),
    ("cuda.cluster", "cuda", 85, 1, 1), ("cuda.auto", "cuda", 92, 1, 1), ("lab.auto", "lab", 97, 1, 1),
    ("peer.quack", "peer", 99, 1, 1))]


def test_the_entries_plot_takes_the_fast_entries_the_peers_and_pytorchs_one_pass_variants():
    assert report.entries_variants(RUN) == ["torch.softmax", "cuda.auto", "lab.auto", "peer.quack"]


def test_styles_set_fast_entries_and_peers_apart():
    styles = report._line_styles(RUN)
    colours = [s["color"] for s in styles.values()]
    assert len(set(colours)) == len(colours), "each variant its own colour (7 variants, 10 colours)"
    assert styles["lab.auto"]["lw"] > styles["peer.quack"]["lw"] > styles["cuda.cluster"]["lw"]
    assert styles["cuda.auto"]["lw"] == styles["lab.auto"]["lw"] and styles["lab.auto"]["zorder"] > 2
    assert styles["torch.softmax"]["ls"] == ":" and styles["triton.fused"]["ls"] == "--"
    # The first colours go to the fast entries and the peers, whatever the order of the records.
    first = {report._line_styles(RUN)[v]["color"] for v in ("cuda.auto", "lab.auto", "peer.quack")}
    assert first == {report._line_styles(RUN[::-1])[v]["color"] for v in ("cuda.auto", "lab.auto", "peer.quack")}


def test_plots_are_written(tmp_path):
    assert report.plot(RUN, tmp_path / "a.png", "softmax, fixed sweep")
    assert report.plot_entries(RUN, tmp_path / "b.png", "softmax, fixed sweep")
    assert (tmp_path / "a.png").stat().st_size > 10_000 and (tmp_path / "b.png").stat().st_size > 10_000
    others = [r for r in RUN if r.variant in ("triton.fused", "cuda.cluster", "peer.quack", "torch.softmax")]
    assert not report.plot_entries(others, tmp_path / "c.png", "t"), "no fast entry timed: no file"
    assert not (tmp_path / "c.png").exists()


def test_the_decode_sweep_is_drawn_against_the_rows(tmp_path):
    """The decode sweep (several M at each N): one panel per N with M on the x axis, instead of a line against N
    that would zigzag; another sweep of several M per N (cross_entropy's vocab) keeps the plots against N."""
    from dataclasses import replace

    from lab import operators

    def sweep(name):
        return [replace(r, sweep=name, m=m, n=n) for m in (1, 8, 64) for n in (32000, 128256) for r in RUN
                if r.n == 256]

    files = report.sweep_plots(sweep("decode") + sweep("vocab"), operators.get("softmax"), tmp_path)
    assert files == {"decode": [tmp_path / "decode.png"],
                     "vocab": [tmp_path / "vocab.png", tmp_path / "vocab_entries.png"]}
    assert (tmp_path / "decode.png").stat().st_size > 10_000


def test_redraw_a_saved_run(tmp_path, capsys):
    tutorial = [record(r.variant, r.backend, r.n, r.pct_copy, sweep="tutorial") for r in RUN]
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"operator": "softmax", "results": [asdict(r) for r in RUN + tutorial]}))
    assert report.main([str(path)]) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "fixed.png", "fixed_entries.png", "tutorial.png", "tutorial_entries.png"]
    assert capsys.readouterr().out.count("wrote ") == 4
    with pytest.raises(SystemExit, match="does not exist"):
        report.main([str(tmp_path / "missing.json")])


def head_record(variant, backend, m, ms, ceiling_ms, peak_mb, k=4096, n=128256):
    return Result(sweep="heads", variant=variant, backend=backend, dtype="bfloat16", m=m, n=n, row_stride=n,
                  status="ok", median_ms=ms, op="linear_cross_entropy", k=k, tflops=6 * m * n * k / ms / 1e9,
                  ceiling_ms=ceiling_ms, pct_ceiling=100 * ceiling_ms / ms, peak_mb=peak_mb)


HEADS_RUN = [head_record(v, b, m, ms * m / 4096, 18.0 * m / 4096, mb) for m in (4096, 8192)
             for v, b, ms, mb in (("torch.compile", "torch", 19.2, 2130), ("lab.auto", "lab", 19.3, 2130))]


def test_an_operator_built_on_matmuls_is_tabled_by_time_share_of_its_matmuls_and_memory():
    """Its table: the ceiling's time in its own column (no copy's GB/s), each cell the median, the ceiling's share
    and the peak memory; the shape labelled with its inner dimension, and the wide CSV in milliseconds with K."""
    from lab.operators import get

    op = get("linear_cross_entropy")
    header, rows = report.table_rows(HEADS_RUN, op.shape_label, report.metrics_for(op, None), op.ceiling_label)
    assert header == ["shape", "3 matmuls", "torch.compile", "lab.auto"]
    assert rows[0] == ["M=4096 K=4096 N=128256", "18.0ms", "19.2ms (94%) 2.13GB", "19.3ms (93%) 2.13GB"]
    assert report.metrics_for(op, ["tflops"]) == ["tflops"] and "TFLOP/s" in report.cell(HEADS_RUN[0], ["tflops"])


def test_the_wide_csv_of_an_operator_built_on_matmuls_is_in_milliseconds(tmp_path):
    import csv

    report.write_wide_csv(HEADS_RUN, tmp_path / "wide.csv")
    rows = list(csv.reader((tmp_path / "wide.csv").open()))
    assert rows[0] == ["op", "sweep", "dtype", "M", "N", "row_stride", "K", "ceiling ms", "torch.compile", "lab.auto"]
    assert rows[1][3:] == ["4096", "128256", "128256", "4096", "18.000", "19.200", "19.300"]


def test_an_operator_built_on_matmuls_is_drawn_as_time_and_memory_against_the_tokens(tmp_path):
    from lab.operators import get

    drawn = report.sweep_plots(HEADS_RUN, get("linear_cross_entropy"), tmp_path)
    assert drawn == {"heads": [tmp_path / "heads_bfloat16.png"]} and (tmp_path / "heads_bfloat16.png").stat().st_size
