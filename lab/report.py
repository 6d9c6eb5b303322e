"""Results: the record of one (variant, shape, dtype) point, terminal tables, CSV, JSON, a
markdown report and plots."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from dataclasses import asdict, dataclass, fields
from pathlib import Path


@dataclass
class Result:
    sweep: str
    variant: str
    backend: str
    dtype: str
    m: int
    n: int
    row_stride: int
    status: str  # "ok" (checked and timed), "checked" (not timed), "skipped", "failed"
    reason: str = ""
    worst_ratio: float | None = None  # worst |error| / tolerance in the check
    rel_norm: float | None = None
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    gbps: float | None = None  # 2 * M * N * itemsize / median time
    copy_gbps: float | None = None  # copy of the same bytes, same run
    pct_copy: float | None = None
    model_reads: float | None = None
    model_writes: float | None = None
    modeled_gbps: float | None = None  # copy_gbps * 2 / (reads + writes)
    pct_modeled: float | None = None
    speedup_vs_torch: float | None = None  # the operator's baseline (torch) median / this median
    op: str = "softmax"
    timing: str = ""  # how the median was taken (lab.bench.DO_BENCH, CUDAGRAPH or WALL_CLOCK)
    host_us: float | None = None  # host time of one call, back to back (GPU timing)
    flush_us: float | None = None  # GPU time of the L2 flush before each timed call
    long_flush_ms: float | None = None  # the median behind a longer flush, where host_us came near flush_us
    long_flush_mb: int | None = None  # that flush's size
    host_bound: bool | None = None  # faster behind the longer flush: the GPU waited on the launches (lab.bench)
    # The selection pass before auto is prepared (lab.measure.time_point): the median of this variant's own
    # rounds there, and its GB/s, from which the dispatch table is built; None where no pass ran.
    selection_ms: float | None = None
    selection_gbps: float | None = None
    # An operator built on matmuls (Operator.flops): the inner dimension, TFLOP/s, the same-run ceiling (its
    # matmuls alone) and this median's share of it, and the peak memory one call allocated above its inputs
    # (outputs included), in MB; None for the others.
    k: int | None = None
    tflops: float | None = None
    ceiling_ms: float | None = None
    pct_ceiling: float | None = None
    peak_mb: float | None = None

    @property
    def shape(self):
        from lab.inputs import Shape

        return Shape(self.m, self.n, None if self.row_stride == self.n else self.row_stride, self.k)

    @property
    def shape_label(self) -> str:
        return self.shape.label


def _fmt(v: float | None, spec: str = ".0f") -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _gbps(v: float | None) -> str:
    """GB/s with three significant digits below 100 (small CPU shapes move little), whole above."""
    return "" if v is None or math.isnan(v) else format(v, ".0f") if v >= 100 else format(v, ".3g")


METRICS = ("gbps", "pct_copy", "latency", "speedup", "accuracy", "tflops", "pct_ceiling", "memory")
"""What a table cell can show: GB/s, percent of the copy ceiling, the median time (microseconds, or milliseconds
from 10 ms), the speed-up over the operator's baseline, the worst error as a fraction of the tolerance; for an
operator built on matmuls, TFLOP/s, the ceiling's (its matmuls') time as a percent of the variant's, and the peak
memory a call allocated above its inputs."""


def metrics_for(op, chosen: list[str] | None) -> list[str]:
    """The table metrics: those chosen on the command line, else the operator's default_metrics."""
    return list(chosen) if chosen else list(op.default_metrics)


def _latency(ms: float | None) -> str:
    if ms is None:
        return ""
    return f"{ms:.1f}ms" if ms >= 10 else f"{ms * 1e3:.1f}us"


def _memory(mb: float | None) -> str:
    return "" if mb is None else f"{mb / 1e3:.2f}GB" if mb >= 1000 else f"{mb:.0f}MB"


def cell(r: Result, metrics: tuple[str, ...] | list[str] = ("gbps", "pct_copy")) -> str:
    if r.status == "ok":
        parts = {
            "gbps": _gbps(r.gbps),
            "pct_copy": f"({_fmt(r.pct_copy)}%)" if r.pct_copy is not None else "",
            "latency": _latency(r.median_ms),
            "speedup": f"{_fmt(r.speedup_vs_torch, '.2f')}x" if r.speedup_vs_torch else "",
            "accuracy": f"{_fmt(r.worst_ratio, '.2g')} of tol",
            "tflops": f"{_fmt(r.tflops)} TFLOP/s" if r.tflops is not None else "",
            "pct_ceiling": f"({_fmt(r.pct_ceiling)}%)" if r.pct_ceiling is not None else "",
            "memory": _memory(r.peak_mb),
        }
        return " ".join(parts[m] for m in metrics if parts[m])
    if r.status == "checked":  # checked, not timed: what was measured is the worst error, a share of the tolerance
        return f"ok, {_fmt(r.worst_ratio, '.2g')} of tol"
    return {"skipped": "-", "failed": "FAIL"}.get(r.status, r.status)


def grouped(results: list[Result]) -> dict[tuple[str, str], list[Result]]:
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        groups[(r.sweep, r.dtype)].append(r)
    return groups


def table_rows(results: list[Result], label=None, metrics: tuple[str, ...] | list[str] = ("gbps", "pct_copy"),
               ceiling_label: str = "copy") -> tuple[list[str], list[list[str]]]:
    """One row per shape: the ceiling (the copy's GB/s, or the time of an operator's matmuls: ceiling_label), then
    each variant's cell (by default GB/s and percent of the copy); no ceiling column where nothing was timed
    against one (checks only, interpreted kernels only).
    label(Shape) names a shape (the operator's; MxN[/stride] by default)."""
    variants = list(dict.fromkeys(r.variant for r in results))
    shapes = list(dict.fromkeys(r.shape for r in results))
    by_key = {(r.variant, r.shape): r for r in results}
    with_copy = any(r.copy_gbps for r in results)
    with_ceiling = any(r.ceiling_ms for r in results)
    header = ["shape", *(["copy GB/s"] if with_copy else []), *([f"{ceiling_label}"] if with_ceiling else []),
              *variants]
    rows = []
    for shape in shapes:
        same = [r for r in results if r.shape == shape]
        copy = next((r.copy_gbps for r in same if r.copy_gbps), None)
        ceiling = next((r.ceiling_ms for r in same if r.ceiling_ms), None)
        text = label(shape) if label else shape.label
        cells = (cell(by_key[(v, shape)], metrics) if (v, shape) in by_key else "" for v in variants)
        rows.append([text, *([_fmt(copy)] if with_copy else []), *([_latency(ceiling)] if with_ceiling else []),
                     *cells])
    return header, rows


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:  # first column left-aligned, numbers right-aligned
        return "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def rich_table(header: list[str], rows: list[list[str]], title: str):
    """The same table as text_table, as a rich Table (for a terminal)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_lines=False)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right", no_wrap=True)
    for r in rows:
        table.add_row(*r)
    return table


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def _write_long(results: list[Result], f) -> None:
    w = csv.writer(f)
    names = [fl.name for fl in fields(Result)]
    w.writerow(names)
    for r in results:
        w.writerow(["" if getattr(r, n) is None else getattr(r, n) for n in names])


def write_csv(results: list[Result], path: Path) -> None:
    """One row per (variant, shape, dtype): every field of Result."""
    with path.open("w", newline="") as f:
        _write_long(results, f)


def csv_text(results: list[Result]) -> str:
    buf = io.StringIO()
    _write_long(results, buf)
    return buf.getvalue()


def write_wide_csv(results: list[Result], path: Path) -> None:
    """triton.testing.perf_report's layout: one row per (operator, sweep, dtype, shape), the ceiling and one column
    per variant (empty where skipped or failed): GB/s and the copy's, or for an operator built on matmuls (whose
    results have a K) the median milliseconds and its matmuls'."""
    variants = list(dict.fromkeys(r.variant for r in results))
    compute = any(r.k is not None for r in results)
    rows: dict[tuple, dict] = {}
    for r in results:
        row = rows.setdefault((r.op, r.sweep, r.dtype, r.m, r.n, r.row_stride, r.k), {})
        if r.copy_gbps or r.ceiling_ms:
            row["ceiling"] = r.ceiling_ms if compute else r.copy_gbps
        if r.status == "ok" and (r.median_ms if compute else r.gbps) is not None:
            row[r.variant] = r.median_ms if compute else r.gbps
    spec = ".3f" if compute else ".1f"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["op", "sweep", "dtype", "M", "N", "row_stride", "K",
                    "ceiling ms" if compute else "copy GB/s", *variants])
        for key, row in rows.items():
            w.writerow([*key[:-1], "" if key[-1] is None else key[-1], _fmt(row.get("ceiling"), spec),
                        *(_fmt(row.get(v), spec) for v in variants)])


def write_json(results: list[Result], env: dict, extra: dict, path: Path) -> None:
    path.write_text(json.dumps({"environment": env, **extra, "results": [asdict(r) for r in results]}, indent=1))


def load_json(path: Path) -> tuple[dict, list[Result]]:
    data = json.loads(path.read_text())
    return data, [Result(**r) for r in data["results"]]


# How a variant's line looks: the line style and marker by backend, so that a colour shared by two
# variants (more variants than colours) still tells them apart; the fast entries (backend lab, or a
# name ending in .auto) drawn thick and on top.
BACKEND_STYLE = {"torch": (":", "x"), "triton": ("--", "s"), "cuda": ("-", "o"), "lab": ("-", "*"),
                 "peer": ("-.", "^")}


def is_fast_entry(r: Result) -> bool:
    return r.backend == "lab" or r.variant.endswith(".auto")


def _line_styles(results: list[Result]) -> dict[str, dict]:
    """matplotlib keyword arguments per variant, the same in every panel: a colour by order of first
    appearance, fast entries and peers first (tab10 for up to 10 variants; else tab20's dark hues, then
    its light ones), the backend's line style and marker, thicker for fast entries and peers."""
    import matplotlib

    first: dict[str, Result] = {}
    for r in results:
        first.setdefault(r.variant, r)
    if len(first) <= 10:
        palette = [matplotlib.colormaps["tab10"](i) for i in range(10)]
    else:
        tab20 = matplotlib.colormaps["tab20"]
        palette = [tab20(i) for i in (*range(0, 20, 2), *range(1, 20, 2))]
    # The fast entries and the peers take the first (strongest) colours, the others follow in order.
    ranked = sorted(first.items(), key=lambda kv: 0 if is_fast_entry(kv[1]) else 1 if kv[1].backend == "peer" else 2)
    styles = {}
    for i, (v, r) in enumerate(ranked):
        line, marker = BACKEND_STYLE.get(r.backend, ("-", "o"))
        fast = is_fast_entry(r)
        styles[v] = dict(color=palette[i % len(palette)], ls=line, marker=marker, ms=6 if fast else 3.5,
                         lw=2.6 if fast else 1.8 if r.backend == "peer" else 1.1, zorder=5 if fast else 2,
                         label=v)
    return styles


def _pyplot():
    """matplotlib.pyplot on the file-only backend (ImportError where matplotlib is missing)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(dtypes: list[str]):
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(dtypes), figsize=(7 * len(dtypes), 5), squeeze=False, sharey=True)
    return plt, fig, axes[0]


def _finish(plt, fig, axes, path: Path, y_label: str) -> None:
    axes[0].set_ylabel(y_label)
    # One legend for all panels (a variant may have points in one dtype only), beside them, not
    # over them: the lines fill every corner of the plot.
    legend = {label: h for ax in axes for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    fig.legend(legend.values(), legend.keys(), fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot(results: list[Result], path: Path, title: str, x_label: str = "N (row length)",
         bytes_formula: str = "2·M·N·itemsize") -> bool:
    """GB/s against N, one panel per dtype, one line per variant (styled by backend), the copy ceiling
    dashed."""
    try:
        plt, fig, axes = _figure(list(dict.fromkeys(r.dtype for r in results)))
    except ImportError:
        return False
    styles = _line_styles(results)
    for ax, dtype in zip(axes, dict.fromkeys(r.dtype for r in results), strict=True):
        rs = [r for r in results if r.dtype == dtype]
        copy = sorted({(r.n, r.copy_gbps) for r in rs if r.copy_gbps})
        if copy:
            ax.plot([n for n, _ in copy], [g for _, g in copy], "k--", lw=1.5, label="copy ceiling")
        for v in dict.fromkeys(r.variant for r in rs):
            pts = sorted((r.n, r.gbps) for r in rs if r.variant == v and r.status == "ok" and r.gbps)
            if pts:
                ax.plot([n for n, _ in pts], [g for _, g in pts], **styles[v])
        ax.set_xscale("log", base=2)
        ax.set_xlabel(x_label)
        ax.set_title(f"{title}, {dtype}")
        ax.grid(True, alpha=0.3)
    _finish(plt, fig, axes, path, f"GB/s  ({bytes_formula} / time)")
    return True


def entries_variants(results: list[Result]) -> list[str]:
    """The variants of the entries plot: the fast entries, the peers, and PyTorch's variants that move the
    bytes once (traffic model 1 read + 1 write: what a user would otherwise call)."""
    keep = [r.variant for r in results if is_fast_entry(r) or r.backend == "peer"
            or (r.backend == "torch" and r.model_reads == 1 and r.model_writes == 1)]
    return list(dict.fromkeys(keep))


def plot_entries(results: list[Result], path: Path, title: str, x_label: str = "N (row length)") -> bool:
    """Percent of the same-run copy against N for the fast entries, the peers and PyTorch's one-pass
    variants only (entries_variants), with the copy (100%) and 95% of it drawn: the plot to read the
    lab's standing from. False (no file) where matplotlib is missing or no fast entry was timed."""
    chosen = set(entries_variants(results))
    rs_all = [r for r in results if r.variant in chosen and r.status == "ok" and r.pct_copy]
    if not any(is_fast_entry(r) for r in rs_all):
        return False
    try:
        plt, fig, axes = _figure(list(dict.fromkeys(r.dtype for r in rs_all)))
    except ImportError:
        return False
    styles = _line_styles(rs_all)  # its own colours: few lines, each distinct
    for ax, dtype in zip(axes, dict.fromkeys(r.dtype for r in rs_all), strict=True):
        rs = [r for r in rs_all if r.dtype == dtype]
        ax.axhline(100, color="k", ls="--", lw=1.5, label="copy (100%)")
        ax.axhline(95, color="k", ls=":", lw=1, label="95% of the copy")
        for v in dict.fromkeys(r.variant for r in rs):
            pts = sorted((r.n, r.pct_copy) for r in rs if r.variant == v)
            ax.plot([n for n, _ in pts], [p for _, p in pts], **styles[v])
        ax.set_xscale("log", base=2)
        ax.set_xlabel(x_label)
        ax.set_title(f"{title}, {dtype}")
        ax.grid(True, alpha=0.3)
    _finish(plt, fig, axes, path, "% of the same-run copy (same bytes, same timing)")
    return True


def plot_rows(results: list[Result], path: Path, title: str) -> bool:
    """Percent of the same-run copy against M, a panel per row length N (a row of panels per dtype), one line per
    variant: for sweeps of a few row counts at each of a few lengths (inputs.BY_ROWS), where a line against N would
    zigzag."""
    dtypes = list(dict.fromkeys(r.dtype for r in results))
    ns = sorted({r.n for r in results})
    try:
        plt = _pyplot()
    except ImportError:
        return False
    fig, grid = plt.subplots(len(dtypes), len(ns), figsize=(4.2 * len(ns), 3.6 * len(dtypes)), squeeze=False,
                             sharey=True)
    styles = _line_styles(results)
    for row, dtype in zip(grid, dtypes, strict=True):
        for ax, n in zip(row, ns, strict=True):
            ax.axhline(100, color="k", ls="--", lw=1.5, label="copy (100%)")
            rs = [r for r in results if r.dtype == dtype and r.n == n]
            for v in dict.fromkeys(r.variant for r in rs):
                pts = sorted((r.m, r.pct_copy) for r in rs if r.variant == v and r.status == "ok" and r.pct_copy)
                if pts:
                    ax.plot([m for m, _ in pts], [p for _, p in pts], **styles[v])
            ax.set_xscale("log", base=2)
            ax.set_xlabel("M (rows)")
            ax.set_title(f"{title}, {dtype}: N={n}", fontsize=9)
            ax.grid(True, alpha=0.3)
    for row in grid:
        row[0].set_ylabel("% of the same-run copy")
    _finish(plt, fig, [ax for row in grid for ax in row], path, "% of the same-run copy")
    return True


def plot_compute(results: list[Result], path: Path, title: str, ceiling_label: str) -> bool:
    """For an operator built on matmuls, one dtype: the median time (top) and the peak memory a call allocated above
    its inputs (bottom) against M (the tokens), a column per (K, N) pair (a language model's head: hidden size,
    vocabulary), one line per variant, the ceiling (its matmuls alone) dashed on the times. False (no file) where
    matplotlib is missing or nothing was timed."""
    timed = [r for r in results if r.status == "ok" and r.median_ms]
    if not timed:
        return False
    try:
        plt = _pyplot()
    except ImportError:
        return False
    heads = sorted({(r.k, r.n) for r in timed}, key=lambda kn: (kn[0] or 0, kn[1]))
    fig, axes = plt.subplots(2, len(heads), figsize=(5.5 * len(heads), 8), squeeze=False)
    styles = _line_styles(timed)
    for col, (k, n) in enumerate(heads):
        rs = [r for r in results if (r.k, r.n) == (k, n)]
        ceiling = sorted({(r.m, r.ceiling_ms) for r in rs if r.ceiling_ms})
        top, bottom = axes[0][col], axes[1][col]
        if ceiling:
            top.plot([m for m, _ in ceiling], [t for _, t in ceiling], "k--", lw=1.5, label=ceiling_label)
        for v in dict.fromkeys(r.variant for r in rs):
            pts = sorted((r.m, r.median_ms, r.peak_mb) for r in rs if r.variant == v and r.status == "ok"
                         and r.median_ms)
            if pts:
                top.plot([m for m, _, _ in pts], [t for _, t, _ in pts], **styles[v])
                mem = [(m, mb / 1e3) for m, _, mb in pts if mb is not None]
                if mem:
                    bottom.plot([m for m, _ in mem], [g for _, g in mem], **styles[v])
        top.set_title(f"{title}: K={k}, N={n}")
        top.set_yscale("log")
        top.set_ylabel("ms a call (forward and backward)")
        bottom.set_ylabel("GB: peak above the inputs")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("M (tokens)")
            ax.grid(True, alpha=0.3)
    legend = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    fig.legend(legend.values(), legend.keys(), fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def sweep_plots(results: list[Result], op, out: Path) -> dict[str, list[Path]]:
    """Per sweep of `results` (one operator's), the plots drawn into `out`: `<sweep>.png` (plot) and, where a
    fast entry was timed, `<sweep>_entries.png` (plot_entries); for a sweep drawn against M (inputs.BY_ROWS),
    `<sweep>.png` alone (plot_rows); for an operator built on matmuls,
    `<sweep>_<dtype>.png` (plot_compute) per dtype. Nothing where matplotlib is missing."""
    from lab.inputs import BY_ROWS

    drawn: dict[str, list[Path]] = {}
    for sweep in dict.fromkeys(r.sweep for r in results):
        rs = [r for r in results if r.sweep == sweep]
        title = f"{op.name}, {sweep} sweep"
        files = drawn.setdefault(sweep, [])
        if op.compute_bound:
            for dtype in dict.fromkeys(r.dtype for r in rs):
                path = out / f"{sweep}_{dtype}.png"
                if plot_compute([r for r in rs if r.dtype == dtype], path, f"{title}, {dtype}", op.ceiling_label):
                    files.append(path)
            continue
        if sweep in BY_ROWS:
            if plot_rows(rs, out / f"{sweep}.png", title):
                files.append(out / f"{sweep}.png")
            continue
        if plot(rs, out / f"{sweep}.png", title, op.x_label, op.bytes_formula):
            files.append(out / f"{sweep}.png")
        if plot_entries(rs, out / f"{sweep}_entries.png", title, op.x_label):
            files.append(out / f"{sweep}_entries.png")
    return drawn


def redraw(results_json: Path, out: Path | None = None) -> list[Path]:
    """Draw the plots of a saved run again (e.g. after a change to the plotting), from its results.json:
    per sweep, the GB/s plot and the entries plot, into `out` (default: beside the JSON). Nothing is
    measured. Returns the files written."""
    from lab import operators

    data, results = load_json(results_json)
    drawn = sweep_plots(results, operators.get(data.get("operator", "softmax")), out or results_json.parent)
    return [path for files in drawn.values() for path in files]


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m lab.report", description=redraw.__doc__.split(":")[0])
    p.add_argument("results_json", type=Path, help="a results.json written by python -m lab.test")
    p.add_argument("--out", type=Path, help="folder for the plots (default: the JSON's)")
    args = p.parse_args(argv)
    if not args.results_json.exists():
        raise SystemExit(f"lab.report: {args.results_json} does not exist")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    written = redraw(args.results_json, args.out)
    print("\n".join(f"wrote {w}" for w in written) or "lab.report: nothing to draw (is matplotlib installed?)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
