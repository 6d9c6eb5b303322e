"""Rebuild cuda.auto's dispatch table from a lab run's results.json (lab/dispatch.py says what it holds).

    python scripts/make_dispatch_table.py results/h200/results.json [-o results/h200/dispatch_table.json]

A lab run that times cuda.auto already writes the table beside its results; this rebuilds it from
the results alone, e.g. after a run of the CUDA variants without auto.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lab import dispatch


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="a results.json written by python -m lab.test")
    p.add_argument("-o", "--out", type=Path, help="where to write the table (default: beside the results)")
    args = p.parse_args(argv)
    data = json.loads(args.results.read_text())
    env = data.get("environment", {})
    table = dispatch.build_table(data["results"], env.get("gpu", "unknown"),
                                 f"{args.results.parent.name}/{args.results.name} at commit {env.get('commit', '?')}")
    if not table["entries"]:
        sys.exit(f"{args.results}: no timed CUDA variant in these results: no table to build")
    out = args.out or args.results.parent / dispatch.FILENAME
    dispatch.save(table, out)
    print(f"wrote {out}: " + ", ".join(f"{dt} {len(es)} entries" for dt, es in table["entries"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
