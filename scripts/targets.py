"""How a lab run's results stand against the performance targets of the fast entry (auto).

Reads a results.json written by `python -m lab.test` (softmax) and prints, for every point of the
fixed and tutorial sweeps and each dtype: auto's GB/s and percent of the same run's copy, the fastest
other variant of the run (the lab's own, the peers, torch.softmax, torch.compile) and auto's ratio to
it; then the counts against the targets (auto >= 95% of the copy at every fixed-sweep point; auto >=
every other variant at every point), auto's five weakest points and the points it loses to the peers
and PyTorch. Nothing is measured here. Where
the run's dispatch_table.json lies beside it, a comparison with the very kernel of auto's route (the
variant it routes to, or cuda.auto running the same CUDA kernel) is marked: a ratio there is the
timing's spread, not a kernel's.
"auto" is lab.auto (lab.softmax, which may run a Triton kernel) where the run timed it, else cuda.auto
(torch.ops.lab.softmax, CUDA kernels only); --auto picks either.

    python scripts/targets.py results/h200/softmax/results.json [--markdown results/h200/softmax/targets.md]
        [--remeasure results/h200/softmax/remeasure/run_1.json run_2.json run_3.json] [--auto cuda.auto]
    python scripts/targets.py results/h200/softmax/results.json --near-ties   # the command that re-measures them
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lab.dispatch import choose  # noqa: E402  (the table's rule, as lab.softmax applies it)

AUTOS = ("lab.auto", "cuda.auto")  # the fast entries, the one to judge first
# The variants the issue names as auto's competition: the peers and PyTorch's own (every other variant
# of the run, the lab's own Triton and CUDA kernels included, is the stricter count).
OUTSIDE = ("peer.", "torch.softmax", "torch.compile")
COPY_TARGET = 95.0  # percent of the copy at every fixed-sweep point


def timed(results: list[dict]) -> list[dict]:
    """The softmax records that passed their check and were timed."""
    return [r for r in results if r.get("op", "softmax") == "softmax" and r["status"] == "ok" and r.get("gbps")]


def fast_entry(results: list[dict]) -> str:
    """The first of AUTOS that the run timed (the first of them if none was)."""
    names = {r["variant"] for r in timed(results)}
    return next((a for a in AUTOS if a in names), AUTOS[0])


def points(results: list[dict], auto_name: str | None = None) -> list[dict]:
    """One row per (sweep, dtype, M, N) where auto and at least one other variant were timed."""
    entry = auto_name or fast_entry(results)
    by_point: dict[tuple, dict[str, dict]] = {}
    for r in timed(results):
        by_point.setdefault((r["sweep"], r["dtype"], r["m"], r["n"]), {})[r["variant"]] = r
    rows = []
    for (sweep, dtype, m, n), variants in sorted(by_point.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][3])):
        if entry not in variants:
            continue
        auto = variants[entry]
        others = {v: r for v, r in variants.items() if v != entry}
        if not others:
            continue  # nothing to compare with (a run of auto alone)
        best_name, best = max(others.items(), key=lambda kv: kv[1]["gbps"])
        outside = {v: r for v, r in others.items() if v.startswith(OUTSIDE)}
        row = {"auto": entry, "sweep": sweep, "dtype": dtype, "m": m, "n": n, "auto_gbps": auto["gbps"],
               "pct_copy": auto["pct_copy"], "best_other": best_name, "best_other_gbps": best["gbps"],
               "ratio": auto["gbps"] / best["gbps"], "auto_ms": auto.get("median_ms"),
               "best_other_ms": best.get("median_ms")}
        if outside:
            name, r = max(outside.items(), key=lambda kv: kv[1]["gbps"])
            row.update(best_outside=name, ratio_outside=auto["gbps"] / r["gbps"])
        compared = (entry, best_name, row.get("best_outside"))
        row["host_bound"] = [v for v in dict.fromkeys(compared) if v and variants[v].get("host_bound")]
        rows.append(row)
    return rows


def remeasure(rows: list[dict], runs: list[list[dict]], table: dict | None = None) -> list[str]:
    """The issue's rule for a near tie: a point where auto trails by less than 1% is re-measured three
    times and the median of medians decides. `runs` are the results of those runs (python -m lab.test
    --shape ...); each row that trails by less than 1% and was re-measured gets `ratio_remeasured` and/or
    `ratio_outside_remeasured`. Returns the lines that say what each re-measure found."""
    gbps: dict[tuple, dict[str, list[float]]] = {}
    for results in runs:
        for r in timed(results):
            gbps.setdefault((r["dtype"], r["m"], r["n"]), {}).setdefault(r["variant"], []).append(r["gbps"])
    lines = []
    for row in rows:
        got = gbps.get((row["dtype"], row["m"], row["n"]))
        entry = row["auto"]
        if not got or entry not in got:
            continue
        medians = {v: statistics.median(g) for v, g in got.items()}
        auto = medians.pop(entry)
        for key, pick in (("ratio", lambda v: True), ("ratio_outside", lambda v: v.startswith(OUTSIDE))):
            if not 0.99 <= row.get(key, 0.0) < 1.0:
                continue
            rivals = {v: g for v, g in medians.items() if pick(v)}
            if not rivals:
                continue
            name, best = max(rivals.items(), key=lambda kv: kv[1])
            row[key + "_remeasured"] = auto / best
            against = "every other variant" if key == "ratio" else "the peers and PyTorch"
            lines.append(f"  - {row['sweep']} {row['dtype']} {row['m']}x{row['n']} against {against}: "
                         f"{row[key]:.3f} in the run; median of {len(got[entry])} re-measures: auto {auto:.0f} GB/s, "
                         f"{name} {best:.0f}: {auto / best:.3f} ({'ahead' if auto >= best else 'behind'}"
                         f"{TWIN if route_twin(row, name, table) else ''})")
    return lines


def counted(row: dict, key: str) -> bool:
    """auto at least as fast, the re-measure deciding a near tie."""
    return row.get(key + "_remeasured", row.get(key, 0.0)) >= 1.0


def tally(rows: list[dict], key: str) -> tuple[int, int, int]:
    """(points where auto is at least as fast, near ties left un-re-measured, points compared) by `key`."""
    compared = [r for r in rows if key in r]
    ahead = sum(counted(r, key) for r in compared)
    within = sum(0.99 <= r[key] < 1.0 and key + "_remeasured" not in r for r in compared)
    return ahead, within, len(compared)


def lost_outside(rows: list[dict]) -> list[dict]:
    """The points auto loses to the peers and PyTorch (a re-measure deciding a near tie), widest gap first."""
    lost = [r for r in rows if "ratio_outside" in r and not counted(r, "ratio_outside")]
    return sorted(lost, key=lambda r: r.get("ratio_outside_remeasured", r["ratio_outside"]))


def report(rows: list[dict], command: str, remeasured: list[str] | None = None, table: dict | None = None) -> str:
    lines = ["| sweep | dtype | M x N | auto GB/s | % of copy | fastest other | its GB/s | auto / it |",
             "|---|---|---|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['sweep']} | {r['dtype']} | {r['m']}x{r['n']} | {r['auto_gbps']:.0f} | {r['pct_copy']:.1f} "
                     f"| {r['best_other']} | {r['best_other_gbps']:.0f} | {r['ratio']:.3f} |")
    fixed = [r for r in rows if r["sweep"] == "fixed"]
    at_copy = sum(r["pct_copy"] >= COPY_TARGET for r in fixed)
    weakest = sorted(rows, key=lambda r: r["ratio"])[:5]
    lines += ["", f"auto is {rows[0]['auto']} here.", "",
              f"- auto >= {COPY_TARGET:.0f}% of the copy: {at_copy} of {len(fixed)} fixed-sweep points"]
    for key, against in (("ratio", "every other variant"),
                         ("ratio_outside", "each of the peers, torch.softmax and torch.compile")):
        ahead, within, compared = tally(rows, key)
        lines.append(f"- auto >= {against}: {ahead} of {compared} points ({within} more within 1%"
                     f"{', not re-measured' if within else ''})")
    if bound := [r for r in rows if r.get("host_bound")]:
        lines.append("- timings that hold host time (host-bound: faster behind a longer flush, so the GPU "
                     "waited for the launches; lab/bench.py), auto's or its rivals': " + "; ".join(
                         f"{r['sweep']} {r['dtype']} {r['m']}x{r['n']} {', '.join(r['host_bound'])}" for r in bound))
    if remeasured:
        lines += ["- near ties re-measured three times, the median of medians deciding (the rule re-measures the "
                  "points where auto trails by less than 1%; where it leads by less, the run's count stands):",
                  *remeasured]
    lines.append("- auto's five weakest points (ratio to the fastest other variant; in parentheses the median time "
                 "of a call, which tells a gap of microseconds on a tiny tensor from one on a large one):")
    lines += [f"  - {r['sweep']} {r['dtype']} {r['m']}x{r['n']}: {r['auto_gbps']:.0f} GB/s, {r['pct_copy']:.1f}% of "
              f"the copy, {r['ratio']:.3f}x {r['best_other']}{_times(r)}"
              f"{TWIN if route_twin(r, r['best_other'], table) else ''}{_bound(r)}" for r in weakest]
    if lost := lost_outside(rows):
        lines.append(f"- the {len(lost)} points where auto trails the peers or PyTorch (auto / the fastest of them "
                     "in the run, then the median of the re-measures where the rule re-measured):")
        lines += [f"  - {r['sweep']} {r['dtype']} {r['m']}x{r['n']}: {r['ratio_outside']:.3f}x {r['best_outside']}"
                  + (f", re-measured {r['ratio_outside_remeasured']:.3f}" if "ratio_outside_remeasured" in r else "")
                  for r in lost]
    lines += ["", f"Results of: `{command}`"]
    return "\n".join(lines) + "\n"


def _times(row: dict) -> str:
    """' (auto 15.1 us, peer.quack 13.1)' where the run recorded both median times, else ''."""
    if row.get("auto_ms") is None or row.get("best_other_ms") is None:
        return ""
    return f" ({row['auto']} {row['auto_ms'] * 1000:.1f} us, {row['best_other']} {row['best_other_ms'] * 1000:.1f})"


def _bound(row: dict) -> str:
    """' - host-bound: X' where auto's or the fastest other's timing at the row's point held host time."""
    names = [v for v in row.get("host_bound", []) if v in (row["auto"], row["best_other"])]
    return f" - host-bound: {', '.join(names)}" if names else ""


def route_twin(row: dict, rival: str, table: dict | None) -> bool:
    """Whether `rival` runs the very kernel auto runs at the row's point, by the run's dispatch table (a
    run rebuilds auto's table from its own results before it times auto): lab.auto runs its lab_entries'
    variant, cuda.auto its entries' CUDA variant, any other variant itself. Such a comparison is the same
    code timed twice, and its ratio is the timing's spread."""
    if not table:
        return False
    m, n, dtype = row["m"], row["n"], row["dtype"]
    cuda_route = choose(table.get("entries", {}).get(dtype, []), m, n)
    kernel = {"lab.auto": choose(table.get("lab_entries", {}).get(dtype, []), m, n),
              "cuda.auto": "cuda." + cuda_route if cuda_route else None}
    mine = kernel.get(row["auto"], row["auto"])
    return mine is not None and mine == kernel.get(rival, rival)


TWIN = " - the kernel of auto's route, timed twice"


def near_ties(rows: list[dict]) -> list[dict]:
    """The points where auto trails the fastest other variant, or the fastest peer or PyTorch entry, by
    less than 1%: the ones the rule re-measures."""
    return [r for r in rows if any(0.99 <= r.get(key, 0.0) < 1.0 for key in ("ratio", "ratio_outside"))]


def remeasure_command(rows: list[dict], table: dict | None = None) -> str | None:
    """The lab.test command that times auto and the variants it nearly ties again at the near ties' shapes
    (in the run's default dtypes; run it three times with run_1.json .. run_3.json and pass those to
    --remeasure), or None without near ties. A run rebuilds auto's dispatch table from its own results
    before it times auto, so the command also times the variants that `table` (the run's
    dispatch_table.json) names at those points: auto then runs what it ran in the run."""
    ties = near_ties(rows)
    if not ties:
        return None
    named = []
    for r in ties:
        for key, prefix in (("lab_entries", ""), ("entries", "cuda.")):
            named += [prefix + e[2] for e in (table or {}).get(key, {}).get(r["dtype"], [])
                      if (e[0], e[1]) == (r["n"], r["m"])]
    names = [ties[0]["auto"]]
    for name in (*(v for r in ties for v in (r["best_other"], r.get("best_outside"))), *named):
        if name and name not in names:
            names.append(name)
    shapes = sorted({(r["m"], r["n"]) for r in ties}, key=lambda s: (s[1], s[0]))
    return ("python -m lab.test --only " + ",".join(names) + "".join(f" --shape {m}x{n}" for m, n in shapes)
            + " --output-json run_<i>.json --no-save")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="results.json of a softmax run")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    parser.add_argument("--remeasure", type=Path, nargs="+", default=[],
                        help="results.json files of runs that re-measured the near ties (python -m lab.test "
                        "--shape ... --output-json FILE, three times)")
    parser.add_argument("--auto", choices=AUTOS, help="the fast entry to judge (default: the first of "
                        f"{', '.join(AUTOS)} that the run timed)")
    parser.add_argument("--near-ties", action="store_true",
                        help="print only the command that re-measures the run's near ties (on the GPU, three times)")
    args = parser.parse_args()
    data = json.loads(args.results.read_text())
    if data.get("operator", "softmax") != "softmax":
        raise SystemExit(f"targets: {args.results} holds {data['operator']} results; the targets are softmax's")
    auto = args.auto or fast_entry(data["results"])
    rows = points(data["results"], auto)
    if not rows:
        raise SystemExit(f"targets: no point of {args.results} timed {auto}")
    table_path = args.results.parent / "dispatch_table.json"
    table = json.loads(table_path.read_text()) if table_path.exists() else None
    if args.near_ties:
        print(remeasure_command(rows, table) or "no near ties")
        return
    lines = remeasure(rows, [json.loads(p.read_text())["results"] for p in args.remeasure], table)
    text = report(rows, data.get("command", "?"), lines, table)
    print(text, end="")
    if args.markdown:
        env = data.get("environment", {})
        head = (f"# {auto} against its targets\n\n{env.get('gpu', '')}, commit {env.get('commit', '?')}; "
                f"written by `python scripts/targets.py {args.results}` from the run's results.json\n\n")
        args.markdown.write_text(head + text)


if __name__ == "__main__":
    main()
