"""cuda.cluster's launch tables for shifted rows (kShiftedPlan32, kShiftedPlan16 in csrc/softmax/cluster.cu), from
scripts/tune/tune_cluster.py's measurements of rows off 16-byte boundaries.

A row whose start is off a 16-byte boundary (a contiguous input of odd N: row r starts r * N elements in) is split
as a shifted row of up to a pack less one element more (cluster.cu, SHIFTED), on a shape that loads straight into
registers. Which shape and cluster size suit it is measured, not derived from the aligned rows' table: on the H200
the aligned table's choice, given one more CTA where the shifted row crossed an entry's end, was 20-35% behind the
best configuration at many lengths (float32 4096x16385 64% of a copy against 97%).

Input: tune_cluster.py --json files of --shape points whose rows are shifted (N not a multiple of a pack), at lengths
that bracket each entry: 2^(k-1) + 1, 3 * 2^(k-2) + 1 and 2^k - 1. Each measured length N_i becomes an entry for the
rows (N_{i-1}, N_i]: the configuration (a resident shape, cluster size and grid, or the streaming path) with the
highest share of the copy at N_i, among those within LOWER_END of the best at N_{i-1} as well (all of them where
none is, and at the first length); neighbouring entries of the same configuration merge. Rows longer than the last
length stream.

    python scripts/tune/make_shifted_plan.py notebook/cluster-shifted-rows/tune_shifted_bf16.json \\
        notebook/cluster-shifted-rows/tune_shifted_f32.json

Prints the C++ entries of each dtype's table, with each length's share of the copy before (cuda.cluster as timed
in the same run, the table it had then) and with the chosen entry.
"""

from __future__ import annotations

import argparse
import json
import sys

LOWER_END = 0.9  # an entry's configuration keeps at least this share of the best at the length below the entry
STREAMING = ("streaming",)  # the streaming path's key among the configurations
PACK = {"float32": 4, "float16": 8, "bfloat16": 8}
TABLES = {"float32": "kShiftedPlan32", "bfloat16": "kShiftedPlan16"}


def options(row: dict) -> dict[tuple, float]:
    """Percent of the copy of every configuration measured at a point (resident ones by (shape, cluster, persistent)),
    and of the streaming path."""
    out = {(c["shape"], c["cluster"], c["persistent"]): c["pct_copy"] for c in row["configs"] if "pct_copy" in c}
    if row.get("streaming"):
        out[STREAMING] = row["streaming"]
    return out


def label(key: tuple, row: dict) -> str:
    if key == STREAMING:
        return "streaming"
    cfg = next(c for c in row["configs"] if (c["shape"], c["cluster"], c["persistent"]) == key)
    return (f"{cfg['threads']}x{cfg['elems']}{'P' if cfg['packed'] else ''} c{cfg['cluster']}"
            f"{'p' if cfg['persistent'] else 'n'}")


def plan(rows: list[dict]) -> list[tuple[int, tuple, dict]]:
    """[(max_cols, configuration, the row measured there)] for one dtype's shifted points, sorted by N."""
    rows = sorted(rows, key=lambda r: r["n"])
    entries: list[tuple[int, tuple, dict]] = []
    for i, row in enumerate(rows):
        here = options(row)
        before = options(rows[i - 1]) if i else {}
        # Not a configuration that falls away at the entry's shortest rows: within LOWER_END of the best there.
        steady = [k for k in here if k in before and before[k] >= LOWER_END * max(before.values())]
        key = max(steady or here, key=here.get)
        if entries and entries[-1][1] == key:
            entries[-1] = (row["n"], key, row)  # the same configuration: the entry reaches this length
        else:
            entries.append((row["n"], key, row))
    return entries


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("json", nargs="+", help="tune_cluster.py --json files")
    args = p.parse_args(argv)
    records = []
    for path in args.json:
        with open(path) as f:
            records += json.load(f)
    for dtype, table in TABLES.items():
        rows = [r for r in records if r["dtype"] == dtype and r["n"] % PACK[dtype]]
        if not rows:
            continue
        print(f"// {dtype}: {len(rows)} lengths")
        for r in sorted(rows, key=lambda r: r["n"]):
            chosen = next(key for n, key, _ in plan(rows) if n >= r["n"])
            now = options(r).get(chosen)
            print(f"//   {r['m']}x{r['n']}: {label(chosen, r) if now is not None else '?'} "
                  f"{now if now is None else round(now, 1)}% of a copy (before: cuda.cluster {r['cuda.cluster']:.1f})")
        print(f"constexpr PlanEntry {table}[] = {{")
        for n, key, row in plan(rows):
            if key == STREAMING:
                print(f"    {{{n}, kStreamingShape, 1, true}},  // streaming")
            else:
                shape, cluster, persistent = key
                print(f"    {{{n}, {shape}, {cluster}, {'true' if persistent else 'false'}}},  // {label(key, row)}")
        print("};")
    return 0


if __name__ == "__main__":
    sys.exit(main())
