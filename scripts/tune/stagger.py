"""Tune cuda.cluster's first-wave stagger: how its first clusters' starts are spread.

A launch of one cluster per row starts as many clusters as fit on the GPU at once; they all load in
the same microsecond, every CTA's slice lands when the whole wave has been read, and nothing is written
until then (the fixed cost that notebook/studies/cluster_rows.py fits). cluster.cu can start the first wave's
clusters in G groups T ns apart (cluster r of the first wave waits (r mod G) x T). This script times,
at each point, the launch table's shape and cluster size (or each --config SHAPE:CLUSTER, indices into
cuda.cluster's resident shapes, one cluster per row; SHAPE:CLUSTER:p on a persistent grid, all of whose
clusters are the first wave) with every (G, T) of the grid asked for, all
in interleaved rounds with the copy of the same bytes, each checked against float64 first, and prints
them best first as % of the copy, the table's own (G, T) marked. A launch of fewer clusters than fit at
once (fewer rows than that, one cluster per row) is never staggered: there every (G, T) times the same.

    python scripts/tune/stagger.py [--dtype bfloat16] [--min-n 8192] [--max-n 262144] [--point 256x262144]
        [--groups 1,2,3,4,6,8] [--step-ns 250,500,1000,1500,2000] [--config 20:16 ...] [--rounds 5]
        [--json stagger.json] [--plot stagger.png]
    python scripts/tune/stagger.py --plot-from stagger.json --plot stagger.png     # no GPU needed

Points: the fixed and tutorial sweeps' rows from --min-n to --max-n, or each --point MxN. --plot draws
one heatmap per point (groups down, step across): each cell the gain over starting at once, in points
of the copy, with its % of the copy written in it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

# the checkout (lab) and scripts/ (interleave), wherever this runs from
sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]
from lab import bench, check, inputs  # noqa: E402
from lab.backends.cuda_variants import load_extension  # noqa: E402
from lab.operators.softmax import SOFTMAX  # noqa: E402
from lab.registry import ALL_DTYPES, dtype_name  # noqa: E402

DTYPES = {dtype_name(d): d for d in ALL_DTYPES}


def ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} takes comma-separated whole numbers; got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"{what} takes numbers of at least 0; got {text!r}")
    return values


def parse_point(text: str) -> inputs.Shape:
    """MxN as the lab reads shapes (inputs.Shape.parse), contiguous rows and at least one."""
    try:
        shape = inputs.Shape.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--point takes MxN, e.g. 256x262144: {e}") from None
    if shape.m < 1 or shape.row_stride is not None:
        raise argparse.ArgumentTypeError(f"--point needs M and N of at least 1 and no stride; got {text!r}")
    return shape


def parse_config(text: str) -> tuple[int, int, bool]:
    """SHAPE:CLUSTER (one cluster per row) or SHAPE:CLUSTER:p (a persistent grid)."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "p"):
            raise ValueError
        return int(parts[0]), int(parts[1]), len(parts) == 3
    except ValueError:
        raise argparse.ArgumentTypeError(f"--config takes SHAPE:CLUSTER or SHAPE:CLUSTER:p, e.g. 20:16; "
                                         f"got {text!r}") from None


def measure(shape: inputs.Shape, dtype: torch.dtype, grid: list[tuple[int, int]], rounds: int,
            config: tuple[int, int, bool] | None = None) -> dict | None:
    """The table's shape (or `config`'s: shape, cluster size, persistent) at one point with each (groups, step_ns) of
    the grid and the table's own, timed in interleaved rounds beside the copy; None where the table takes
    the streaming path and no config is given."""
    plan = list(torch.ops.lab_tune.cluster_plan(shape.n, dtype, shape.m))
    index, cluster, persistent, plan_groups, plan_ns = plan
    if config is not None:
        index, cluster, persistent = config
    if index < 0:
        return None
    x = inputs.make_input(shape, dtype, "cuda")
    ref = SOFTMAX.reference(x)
    nbytes = SOFTMAX.bytes_moved(shape, dtype)
    configs = sorted(set(grid) | {(plan_groups, plan_ns)})
    calls = {}
    for g, ns in configs:
        def run(t: torch.Tensor, g: int = g, ns: int = ns) -> torch.Tensor:
            return torch.ops.lab_tune.cluster(t, index, cluster, bool(persistent), g, ns)

        res = check.check(run, x, False, ref)
        if not res.ok and config is not None:  # refused (the slice does not fit) or wrong: said, not timed
            raise RuntimeError(f"groups {g} step {ns} ns: {res.summary()}")
        if not res.ok:
            sys.exit(f"stagger: {shape.m}x{shape.n} {dtype_name(dtype)} shape {index} on {cluster} groups {g} "
                     f"step {ns} ns failed: {res.summary()}")
        calls[f"{g}:{ns}"] = lambda run=run: run(x)
    del ref
    calls["copy"] = bench.copy_call(nbytes, "cuda")
    timings = bench.time_rounds(calls, x.device, rounds=rounds, host_check=False)
    copy_ms = timings.pop("copy").median_ms
    rows = [{"groups": int(k.split(":")[0]), "step_ns": int(k.split(":")[1]), "us": t.median_ms * 1e3,
             "pct_copy": 100 * copy_ms / t.median_ms} for k, t in timings.items()]
    return {"dtype": dtype_name(dtype), "m": shape.m, "n": shape.n, "plan": plan,
            "launch": [index, cluster, persistent], "copy_us": copy_ms * 1e3,
            "configs": sorted(rows, key=lambda r: -r["pct_copy"])}


def plot(records: list[dict], path: str, device: str) -> None:
    """One heatmap per record, dtypes in rows: gain over no stagger (points of the copy) by groups and step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = list(dict.fromkeys(r["dtype"] for r in records))
    per_row = max(sum(r["dtype"] == d for r in records) for d in dtypes)
    fig, axes = plt.subplots(len(dtypes), per_row, figsize=(2.6 * per_row, 3.0 * len(dtypes)), squeeze=False,
                             constrained_layout=True)
    for ax in axes.flat:
        ax.set_visible(False)
    span = max((abs(c["pct_copy"] - none_of(r)) for r in records for c in r["configs"]), default=1.0) or 1.0
    image = None
    for i, d in enumerate(dtypes):
        for j, r in enumerate(r for r in records if r["dtype"] == d):
            ax, none = axes[i][j], none_of(r)
            cells = {(c["groups"], c["step_ns"]): c["pct_copy"] for c in r["configs"] if c["groups"] > 1}
            gs, ns = sorted({g for g, _ in cells}), sorted({n for _, n in cells})
            gain = [[cells.get((g, n), float("nan")) - none for n in ns] for g in gs]
            image = ax.imshow(gain, cmap="RdBu", vmin=-span, vmax=span, aspect="auto")
            for a, g in enumerate(gs):
                for b, n in enumerate(ns):
                    if (g, n) in cells:
                        ax.text(b, a, f"{cells[(g, n)]:.1f}", ha="center", va="center", fontsize=6)
            ax.set_xticks(range(len(ns)), [str(n) for n in ns], fontsize=7)
            ax.set_yticks(range(len(gs)), [str(g) for g in gs], fontsize=7)
            ax.set_title(f"{d} {r['m']}x{r['n']}\nnone {none:.1f}% of the copy", fontsize=8)
            ax.set_visible(True)
        axes[i][0].set_ylabel("groups")
    for ax in axes[-1]:
        ax.set_xlabel("step (ns)", fontsize=8)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label="gain over none (points of the copy)")
    fig.suptitle(f"{device}: cuda.cluster's first wave started in groups, % of the copy", fontsize=10)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def none_of(record: dict) -> float:
    """A record's % of the copy when its first wave starts at once."""
    return next(c["pct_copy"] for c in record["configs"] if c["groups"] == 1 or c["step_ns"] == 0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", action="append", choices=sorted(DTYPES))
    p.add_argument("--min-n", type=int, default=8192)
    p.add_argument("--max-n", type=int, default=None)
    p.add_argument("--point", type=parse_point, action="append", default=[], help="MxN (repeatable)")
    p.add_argument("--groups", type=lambda t: ints(t, "--groups"), default=[1, 2, 3, 4, 6, 8])
    p.add_argument("--step-ns", type=lambda t: ints(t, "--step-ns"), default=[250, 500, 1000, 1500, 2000])
    p.add_argument("--config", type=parse_config, action="append", default=[],
                   help="SHAPE:CLUSTER instead of the table's (repeatable)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", help="write every measurement here")
    p.add_argument("--plot", help="draw the heatmaps here (a .png)")
    p.add_argument("--plot-from", help="draw --plot from this JSON of an earlier run instead of measuring")
    args = p.parse_args(argv)
    if args.plot_from:
        if not args.plot:
            sys.exit("stagger: --plot-from needs --plot FILE")
        try:
            data = json.loads(Path(args.plot_from).read_text())
            records = data["records"]
        except (OSError, ValueError, KeyError) as e:
            sys.exit(f"stagger: cannot read {args.plot_from}: {e}")
        if not records:
            sys.exit(f"stagger: {args.plot_from} holds no measurements")
        plot(records, args.plot, data.get("device", "?"))
        print(f"wrote {args.plot}")
        return 0
    if min(args.groups) < 1 or max(args.groups) > 64 or max(args.step_ns) > 100000:
        sys.exit("stagger: --groups must be 1 to 64 and --step-ns 0 to 100000")
    if args.rounds < 1:
        sys.exit("stagger: --rounds must be at least 1")
    if not torch.cuda.is_available():
        sys.exit("stagger: needs a CUDA GPU")
    load_extension()
    grid = sorted({(1, 0)} | {(g, ns) for g in args.groups for ns in args.step_ns if g > 1})
    shapes = args.point or [s for sweep in ("fixed", "tutorial") for s in inputs.SWEEPS[sweep]
                            if s.n >= args.min_n and (args.max_n is None or s.n <= args.max_n)]
    shapes = list(dict.fromkeys(shapes))  # a shape in both sweeps once
    print(f"{torch.cuda.get_device_name()}; {len(grid)} staggers (groups:step_ns) per point, "
          f"{args.rounds} interleaved rounds; % of a copy of the same bytes", flush=True)
    records, start = [], time.perf_counter()
    for dtype in [DTYPES[d] for d in (args.dtype or ["bfloat16", "float32"])]:
        for k, (shape, config) in enumerate((s, c) for s in shapes for c in args.config or [None]):
            try:
                row = measure(shape, dtype, grid, args.rounds, config)
            except RuntimeError as e:  # a config that failed its check: refused (the slice does not fit its
                # shape, a packed shape in float32) or wrong
                print(f"{dtype_name(dtype)} {shape.m}x{shape.n} config {config}: failed its check, "
                      f"not timed ({str(e).splitlines()[0]})")
                continue
            if row is None:
                print(f"{dtype_name(dtype)} {shape.m}x{shape.n}: streaming path, no stagger")
                continue
            records.append(row)
            mine = (row["plan"][3], row["plan"][4]) if config is None else None
            cells = [f"{c['groups']}:{c['step_ns']}{'*' if (c['groups'], c['step_ns']) == mine else ''} "
                     f"{c['pct_copy']:.1f}" for c in row["configs"][:6]]
            what = f"plan {row['plan'][:3]}" if config is None else f"config {':'.join(map(str, row['launch']))}"
            print(f"{dtype_name(dtype)} {shape.m}x{shape.n} {what}: none {none_of(row):.1f}%; "
                  f"best {', '.join(cells)}  [{k + 1}/{len(shapes) * max(1, len(args.config))}, "
                  f"{time.perf_counter() - start:.0f} s]", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "records": records}, f, indent=1)
    if args.plot and records:
        plot(records, args.plot, torch.cuda.get_device_name())
    return 0


if __name__ == "__main__":
    sys.exit(main())
