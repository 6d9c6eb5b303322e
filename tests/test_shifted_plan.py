"""cuda.cluster's tables for shifted rows (kShiftedPlan32, kShiftedPlan16 in csrc/softmax/cluster.cu) are
scripts/tune/make_shifted_plan.py's output from the committed measurements, entry for entry: data, not hand-edited.
And the generator's rule on small made-up measurements. CPU only: the source and the JSONs are read as text."""

import json
import re

import scripts_loader

from lab.env import ROOT

EVIDENCE = ROOT / "notebook" / "cluster-shifted-rows"


def _generator():
    return scripts_loader.load("scripts/tune/make_shifted_plan.py")


def _table_in_source(name: str) -> list[tuple]:
    """(max_cols, shape, cluster, persistent) of each entry of `name` in cluster.cu; shape -1 for kStreamingShape."""
    source = (ROOT / "csrc" / "softmax" / "cluster.cu").read_text()
    body = re.search(rf"constexpr PlanEntry {name}\[\] = {{(.*?)\n}};", source, re.S)
    assert body, f"{name} not found in cluster.cu"
    entries = []
    for line in body.group(1).splitlines():
        m = re.match(r"\s*\{(\d+), (kStreamingShape|\d+), (\d+), (true|false)\},", line)
        if m:
            shape = -1 if m.group(2) == "kStreamingShape" else int(m.group(2))
            entries.append((int(m.group(1)), shape, int(m.group(3)), m.group(4) == "true"))
    return entries


def test_shifted_tables_are_the_generators_output():
    gen = _generator()
    records = []
    for path in sorted(EVIDENCE.glob("tune_shifted_*.json")):
        records += json.loads(path.read_text())
    assert records, f"no tune_shifted_*.json in {EVIDENCE}"
    for dtype, name in gen.TABLES.items():
        rows = [r for r in records if r["dtype"] == dtype and r["n"] % gen.PACK[dtype]]
        expected = [(n, -1, 1, True) if key == gen.STREAMING else (n, key[0], key[1], bool(key[2]))
                    for n, key, _ in gen.plan(rows)]
        assert _table_in_source(name) == expected, f"{name} differs from make_shifted_plan.py's output"


def _row(n: int, configs: dict, streaming: float) -> dict:
    """A made-up tune record: configs maps (shape, cluster, persistent) to percent of the copy."""
    return {"dtype": "float32", "m": 4096, "n": n, "cuda.cluster": 50.0, "streaming": streaming,
            "configs": [{"shape": s, "cluster": c, "persistent": p, "pct_copy": v, "threads": 128, "elems": 32,
                         "packed": False} for (s, c, p), v in configs.items()]}


def test_generator_rule():
    """The fastest configuration at each length, among those within LOWER_END of the best at the length below;
    neighbours of one configuration merge; the streaming path can win an entry."""
    gen = _generator()
    a, b, c = (12, 1, False), (12, 2, False), (32, 3, False)
    rows = [
        _row(1001, {a: 90, b: 80}, 60),
        _row(2001, {a: 95, b: 80, c: 90}, 60),  # a again (c not measured at 1001): merges with the entry before
        _row(3001, {b: 99, c: 97}, 95),   # b falls away at 2001 (80 < 0.9 * 95): c, though b is faster here
        _row(4001, {c: 50}, 70),          # the streaming path, steady at 3001 too
    ]
    assert [(n, key) for n, key, _ in gen.plan(rows)] == [(2001, a), (3001, c), (4001, gen.STREAMING)]
