"""Write the dispatch table that lab.softmax and torch.ops.lab.softmax use on a GPU model, from a lab run's
results.json (lab/dispatch.py says what a table holds).

    python scripts/make_dispatch_table.py results/h200/softmax/results.json [-o FILE]

The table goes to lab/tables/<gpu>.json, the package's (the only place the product reads tables from):
committing it is what changes the routes. A lab run writes its own table beside its results
(dispatch_table.json) without changing any route.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lab import dispatch, tabulate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, help="a results.json written by python -m lab.test")
    p.add_argument("-o", "--out", type=Path, help="where to write the table (default: lab/tables/<gpu>.json)")
    args = p.parse_args(argv)
    data = json.loads(args.results.read_text())
    env = data.get("environment", {})
    gpu = env.get("gpu", "unknown")
    source = f"{tabulate.run_name(args.results)} at commit {env.get('commit', '?')}"
    table = tabulate.build_table(data["results"], gpu, source, env.get("compute_capability", ""))
    if not table["entries"]:
        sys.exit(f"{args.results}: no timed CUDA variant in these results: no table to build")
    out = args.out or dispatch.table_path(gpu)
    tabulate.save(table, out)
    print(f"wrote {out}: " + ", ".join(f"{dt} {len(es)} entries" for dt, es in table["entries"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
