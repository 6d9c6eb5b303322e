"""Which of auto's gaps hold across lab runs, and which come and go.

One run of the lab gives every point one ratio of auto to its fastest rival, and at the tutorial sweep's small
tensors a kernel's time moves by 1-2% from one run to the next (the same kernel under two names has read 1.6%
apart in one run). A gap that shows in every run belongs to the kernels; one that changes sign between runs is
the measurement's. This script sets several runs' results.json side by side, as scripts/targets.py reads each
(the same points, the same fast entry), and prints per point auto's ratio in every run (each run named by the
commit it was made at) and a verdict:
"behind in every run", "ahead or level in every run" or "both". Nothing is measured here.

    python notebook/studies/across_runs.py RUN [RUN ...] [--against outside|all] [--markdown FILE]

A RUN is a results.json file, or REV:PATH for the file as a git revision holds it (e.g.
f88150f:results/h200/results.json, the run made at 5fc2a79). The rivals are
the peers and PyTorch's own (--against outside, the default) or every other variant of the run (all). Points
are ordered by their median ratio, the weakest first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # interleave.py, targets.py
from targets import points  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RATIO = {"outside": "ratio_outside", "all": "ratio"}


def load(run: str) -> tuple[str, dict]:
    """(label, the parsed results.json) of a path or a REV:PATH git spec. The label is the commit the run
    was made at (its environment's), else the file's name or REV."""
    path = Path(run)
    if path.exists():
        fallback, data = path.name, json.loads(path.read_text())
    else:
        rev, sep, inner = run.partition(":")
        if not sep or not rev or not inner:
            raise SystemExit(f"across_runs: {run!r} is neither a file nor REV:PATH")
        proc = subprocess.run(["git", "show", f"{rev}:{inner}"], cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"across_runs: git show {rev}:{inner} failed: {proc.stderr.strip()}")
        fallback, data = rev, json.loads(proc.stdout)
    return str(data.get("environment", {}).get("commit") or fallback), data


def verdict(ratios: list[float]) -> str:
    if all(r < 1.0 for r in ratios):
        return "behind in every run"
    if all(r >= 1.0 for r in ratios):
        return "ahead or level in every run"
    return "both"


def side_by_side(runs: list[tuple[str, dict]], against: str = "outside") -> list[dict]:
    """Per point timed in at least two of the runs: its key, auto's ratio per run label (None where the run
    did not time it), the median and the verdict, the weakest median first."""
    key = RATIO[against]
    per_point: dict[tuple, dict[str, float]] = {}
    for label, data in runs:
        if data.get("operator", "softmax") != "softmax":
            raise SystemExit(f"across_runs: {label} holds {data['operator']} results, not softmax's")
        for row in points(data["results"]):
            if key in row:
                per_point.setdefault((row["sweep"], row["dtype"], row["m"], row["n"]), {})[label] = row[key]
    table = []
    for point, by_run in per_point.items():
        ratios = list(by_run.values())
        if len(ratios) < 2:
            continue
        table.append({"point": point, "ratios": {label: by_run.get(label) for label, _ in runs},
                      "median": statistics.median(ratios), "verdict": verdict(ratios)})
    return sorted(table, key=lambda row: (row["median"], row["point"]))


def report(table: list[dict], labels: list[str], against: str) -> str:
    rivals = "the fastest of the peers and PyTorch" if against == "outside" else "the fastest other variant"
    lines = [f"auto's ratio to {rivals}, per run (below 1: behind)", "",
             "| sweep | dtype | M x N | " + " | ".join(labels) + " | median | verdict |",
             "|---|---|---|" + "---:|" * (len(labels) + 1) + "---|"]
    for row in table:
        sweep, dtype, m, n = row["point"]
        cells = [f"{r:.3f}" if r is not None else "-" for r in row["ratios"].values()]
        lines.append(f"| {sweep} | {dtype} | {m}x{n} | " + " | ".join(cells) + f" | {row['median']:.3f} | "
                     f"{row['verdict']} |")
    counts = {v: sum(row["verdict"] == v for row in table)
              for v in ("behind in every run", "both", "ahead or level in every run")}
    lines += ["", f"{len(table)} points in {len(labels)} runs: " + ", ".join(f"{n} {v}" for v, n in counts.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="results.json files or REV:PATH git specs, oldest first")
    p.add_argument("--against", choices=tuple(RATIO), default="outside")
    p.add_argument("--markdown", type=Path, help="also write the table here")
    args = p.parse_args(argv)
    if len(args.runs) < 2:
        raise SystemExit("across_runs: give at least two runs")
    runs = [load(r) for r in args.runs]
    labels = [label for label, _ in runs]
    if len(set(labels)) != len(labels):
        raise SystemExit(f"across_runs: two runs share a label ({', '.join(labels)}); pass them as REV:PATH")
    text = report(side_by_side(runs, args.against), labels, args.against)
    print(text, end="")
    if args.markdown:
        args.markdown.write_text(f"# auto across runs\n\n`python notebook/studies/across_runs.py {' '.join(args.runs)}"
                                 f"{' --against all' if args.against == 'all' else ''}`\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
