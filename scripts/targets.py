"""How a lab run's results stand against the performance targets of the fast entry (cuda.auto).

Reads a results.json written by `python -m lab.test` (softmax) and prints, for every point of the
fixed and tutorial sweeps and each dtype: auto's GB/s and percent of the same run's copy, the fastest
other variant of the run (the lab's own, the peers, torch.softmax, torch.compile) and auto's ratio to
it; then the counts against the targets (auto >= 95% of the copy at every fixed-sweep point; auto >=
every other variant at every point) and auto's five weakest points. Nothing is measured here.

    python scripts/targets.py results/h200/results.json [--markdown results/h200/targets.md]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

AUTO = "cuda.auto"
# The variants the issue names as auto's competition: the peers and PyTorch's own (every other variant
# of the run, the lab's own Triton and CUDA kernels included, is the stricter count).
OUTSIDE = ("peer.", "torch.softmax", "torch.compile")
COPY_TARGET = 95.0  # percent of the copy at every fixed-sweep point


def points(results: list[dict]) -> list[dict]:
    """One row per (sweep, dtype, M, N) where auto was timed."""
    by_point: dict[tuple, dict[str, dict]] = {}
    for r in results:
        if r.get("op", "softmax") != "softmax" or r["status"] != "ok" or not r.get("gbps"):
            continue
        by_point.setdefault((r["sweep"], r["dtype"], r["m"], r["n"]), {})[r["variant"]] = r
    rows = []
    for (sweep, dtype, m, n), variants in sorted(by_point.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][3])):
        if AUTO not in variants:
            continue
        auto = variants[AUTO]
        others = {v: r for v, r in variants.items() if v != AUTO}
        best_name, best = max(others.items(), key=lambda kv: kv[1]["gbps"])
        outside = {v: r for v, r in others.items() if v.startswith(OUTSIDE)}
        row = {"sweep": sweep, "dtype": dtype, "m": m, "n": n, "auto_gbps": auto["gbps"],
               "pct_copy": auto["pct_copy"], "best_other": best_name, "best_other_gbps": best["gbps"],
               "ratio": auto["gbps"] / best["gbps"]}
        if outside:
            name, r = max(outside.items(), key=lambda kv: kv[1]["gbps"])
            row.update(best_outside=name, ratio_outside=auto["gbps"] / r["gbps"])
        rows.append(row)
    return rows


def report(rows: list[dict], command: str) -> str:
    lines = ["| sweep | dtype | M x N | auto GB/s | % of copy | fastest other | its GB/s | auto / it |",
             "|---|---|---|---:|---:|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['sweep']} | {r['dtype']} | {r['m']}x{r['n']} | {r['auto_gbps']:.0f} | {r['pct_copy']:.1f} "
                     f"| {r['best_other']} | {r['best_other_gbps']:.0f} | {r['ratio']:.3f} |")
    fixed = [r for r in rows if r["sweep"] == "fixed"]
    at_copy = sum(r["pct_copy"] >= COPY_TARGET for r in fixed)
    ahead = sum(r["ratio"] >= 1.0 for r in rows)
    within = sum(0.99 <= r["ratio"] < 1.0 for r in rows)
    weakest = sorted(rows, key=lambda r: r["ratio"])[:5]
    vs_outside = [r for r in rows if "ratio_outside" in r]
    ahead_outside = sum(r["ratio_outside"] >= 1.0 for r in vs_outside)
    within_outside = sum(0.99 <= r["ratio_outside"] < 1.0 for r in vs_outside)
    lines += ["", f"- auto >= {COPY_TARGET:.0f}% of the copy: {at_copy} of {len(fixed)} fixed-sweep points",
              f"- auto >= every other variant: {ahead} of {len(rows)} points ({within} more within 1%)",
              f"- auto >= each of the peers, torch.softmax and torch.compile: {ahead_outside} of {len(vs_outside)} "
              f"points ({within_outside} more within 1%)",
              "- auto's five weakest points (ratio to the fastest other variant):"]
    lines += [f"  - {r['sweep']} {r['dtype']} {r['m']}x{r['n']}: {r['auto_gbps']:.0f} GB/s, {r['pct_copy']:.1f}% of "
              f"the copy, {r['ratio']:.3f}x {r['best_other']}" for r in weakest]
    lines += ["", f"Results of: `{command}`"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", type=Path, help="results.json of a softmax run")
    parser.add_argument("--markdown", type=Path, help="also write the report here")
    args = parser.parse_args()
    data = json.loads(args.results.read_text())
    if data.get("operator", "softmax") != "softmax":
        raise SystemExit(f"targets: {args.results} holds {data['operator']} results; the targets are softmax's")
    rows = points(data["results"])
    if not rows:
        raise SystemExit(f"targets: no point of {args.results} timed {AUTO}")
    text = report(rows, data.get("command", "?"))
    print(text, end="")
    if args.markdown:
        env = data.get("environment", {})
        head = (f"# {AUTO} against its targets\n\n{env.get('gpu', '')}, commit {env.get('commit', '?')}; "
                f"written by `python scripts/targets.py {args.results}` from the run's results.json\n\n")
        args.markdown.write_text(head + text)


if __name__ == "__main__":
    main()
