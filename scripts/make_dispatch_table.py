"""Write the dispatch table that lab.softmax and torch.ops.lab.softmax use on a GPU model, from a lab run's
results.json (lab/dispatch.py says what a table holds).

    python scripts/make_dispatch_table.py results/h200/softmax/results.json [-o FILE]
    python scripts/make_dispatch_table.py [results/h200/softmax/results.json] --backward \
        results/h200/softmax_backward/results.json [-o FILE]

--backward adds the softmax backward's entries (backward_entries) from a run of softmax_backward on the same GPU
model; without the softmax results, into the table that is there (only its backward_entries replaced).

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
    p.add_argument("results", type=Path, nargs="?", help="a results.json of softmax written by python -m lab.test")
    p.add_argument("--backward", type=Path, help="a results.json of softmax_backward (backward_entries)")
    p.add_argument("-o", "--out", type=Path, help="where to write the table (default: lab/tables/<gpu>.json)")
    args = p.parse_args(argv)
    if args.results is None and args.backward is None:
        p.error("give a results.json of softmax, of softmax_backward (--backward), or both")
    table, gpu = None, None
    if args.results is not None:
        data = json.loads(args.results.read_text())
        env = data.get("environment", {})
        gpu = env.get("gpu", "unknown")
        source = f"{tabulate.run_name(args.results)} at commit {env.get('commit', '?')}"
        table = tabulate.build_table(data["results"], gpu, source, env.get("compute_capability", ""))
        if not table["entries"]:
            sys.exit(f"{args.results}: no timed CUDA variant in these results: no table to build")
    if args.backward is not None:
        data = json.loads(args.backward.read_text())
        env = data.get("environment", {})
        if gpu is not None and env.get("gpu") != gpu:
            sys.exit(f"{args.backward}: measured on {env.get('gpu')}, the softmax results on {gpu}")
        gpu = env.get("gpu", "unknown")
        if table is None:
            path = args.out or dispatch.table_path(gpu)
            if not path.exists():
                sys.exit(f"{path}: no table of {gpu} to add the backward's entries to: give the softmax results too")
            table = dispatch.load(path)
        table["backward_entries"] = tabulate.build_backward_entries(data["results"])
        table["backward_source"] = f"{tabulate.run_name(args.backward)} at commit {env.get('commit', '?')}"
        if not table["backward_entries"]:
            sys.exit(f"{args.backward}: no timed CUDA or Triton softmax backward in these results")
    out = args.out or dispatch.table_path(gpu)
    tabulate.save(table, out)
    counts = [f"{dt} {len(es)} entries" for dt, es in table["entries"].items()]
    counts += [f"backward {dt} {len(es)} entries" for dt, es in table.get("backward_entries", {}).items()]
    print(f"wrote {out}: " + ", ".join(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
