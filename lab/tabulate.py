"""Dispatch tables built from a lab run's results: the harness side of lab/dispatch.py (which holds the rule
that reads them, and the tables the product uses).

At every timed point (dtype, N, M) a table names the CUDA variant with the highest median GB/s (`entries`,
torch.ops.lab.softmax's) and the fastest of the lab's CUDA and Triton variants (`lab_entries`, lab.softmax's).
A lab run that times `cuda.auto` builds its table as it goes: before auto is checked and timed at a point,
the table is rebuilt from the run's results so far, which include every other CUDA variant at that point
timed in a selection pass (lab.measure.time_point), and installed; an entry's GB/s are the selection pass's
(`selection_gbps`), not the timings reported beside auto's. The run saves the table it ended with beside
its results (FILENAME); `scripts/make_dispatch_table.py` writes the product's table (lab/tables/) from a
run's results.json.

lab.softmax reaches a Triton variant only where it is faster than every CUDA one by more than the
timing's resolution and its kernel outlasts a Triton call's host time (TRITON_MARGIN, TRITON_HOST_MS
below); the table's `lab_yields` list the points where a faster Triton variant yielded, and why.
Neither entry ever calls a peer or PyTorch's softmax.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from lab.registry import variants

AUTO = "cuda.auto"
LAB = "lab.auto"  # the variant that times lab.softmax
FILENAME = "dispatch_table.json"  # a run's table, beside its results


def _fastest(results: Iterable, backends: tuple[str, ...], strip: str,
             yields: dict[str, list[list]] | None = None, op: str = "softmax") -> dict[str, list[list]]:
    """Per dtype, [N, M, variant, GB/s] of the fastest variant of `backends` (not the entries themselves)
    at every (dtype, N, M) timed in `results`, sorted by (N, M); a Triton variant yields to the fastest
    CUDA one within TRITON_MARGIN of it or where its kernel is shorter than TRITON_HOST_MS (below), and
    each time [N, M, the Triton variant, its GB/s, why] goes into `yields`. A variant whose limits depend on more
    than the row length (a shape_reason: cuda.grid_split's depend on M) never enters: the table's rule
    lets an entry cover more rows than were measured (the last entry of a row length takes any more),
    and shorter rows."""
    best: dict[tuple[str, int, int], dict] = {}
    best_cuda: dict[tuple[str, int, int], dict] = {}
    barred = {v.name for v in variants(op, backends=list(backends)) if v.shape_reason is not None}
    for r in results:
        r = r if isinstance(r, dict) else vars(r)
        if (r.get("op", "softmax") != op or r["backend"] not in backends or r["variant"] in (AUTO, LAB)
                or r["variant"] in barred or r["status"] not in ("ok", "checked") or not chosen_gbps(r)):
            continue
        r = {**r, "gbps": chosen_gbps(r), "median_ms": chosen_ms(r)}
        key = (r["dtype"], r["n"], r["m"])
        if key not in best or r["gbps"] > best[key]["gbps"]:
            best[key] = r
        if r["backend"] == "cuda" and (key not in best_cuda or r["gbps"] > best_cuda[key]["gbps"]):
            best_cuda[key] = r
    entries: dict[str, list[list]] = {}
    for key in sorted(best):
        r = best[key]
        dtype, n, m = key
        why = _yield_reason(best_cuda[key], r) if r["backend"] != "cuda" and key in best_cuda else None
        if why:
            if yields is not None:
                yields.setdefault(dtype, []).append([n, m, r["variant"], round(r["gbps"], 1), why])
            r = best_cuda[key]
        entries.setdefault(dtype, []).append([n, m, r["variant"].removeprefix(strip), round(r["gbps"], 1)])
    return entries


# lab.softmax reaches a CUDA variant through torch.ops.lab.softmax and a Triton one through Triton's
# launcher, which costs more host time per call (on the H200, 49 us a call on the triton.fused route, 14-22
# on the op's routes: notebook/host-time-per-call/), and the benchmark sees host time once the host falls
# behind the GPU. So a Triton variant takes an entry only if its kernel is faster than the fastest CUDA one
# by more than the timing's resolution: 1%, or 0.2 us on kernels of a few microseconds; and only if its
# kernel takes at least TRITON_HOST_MS, the host time of a call on its route: a shorter one leaves
# lab.softmax, called in a loop, waiting on the host (bfloat16 4096x4096 routed to triton.multirow ran at
# 1515 GB/s, its kernel alone at 3178: 22 us a call against 10.6).
TRITON_MARGIN = 0.01
TRITON_MARGIN_MS = 0.0002
TRITON_HOST_MS = 0.05


def chosen_gbps(r: dict) -> float | None:
    """The GB/s a table is built from: the selection pass's where one ran (lab.measure.time_point: the timings
    that chose auto's route, not the ones reported), else the result's own."""
    return r.get("selection_gbps") or r.get("gbps")


def chosen_ms(r: dict) -> float | None:
    return r.get("selection_ms") or r.get("median_ms")


def _yield_reason(cuda: dict, triton: dict) -> str | None:
    """Why the CUDA result keeps the entry from the (faster) Triton one: it is within the margin, or the
    Triton kernel is shorter than its route's host time; None where the Triton one takes it."""
    cuda_ms, triton_ms = cuda.get("median_ms"), triton.get("median_ms")
    if cuda["gbps"] * (1 + TRITON_MARGIN) >= triton["gbps"] or (
            cuda_ms is not None and triton_ms is not None and cuda_ms - triton_ms <= TRITON_MARGIN_MS):
        return (f"within {TRITON_MARGIN:.0%} or {TRITON_MARGIN_MS * 1000:.1f} us of {cuda['variant']}, "
                "the timing's resolution")
    if triton_ms is not None and triton_ms < TRITON_HOST_MS:
        return (f"its kernel took {triton_ms * 1000:.1f} us, less than a call's host time on a Triton route "
                f"(TRITON_HOST_MS, {TRITON_HOST_MS * 1000:.0f} us)")
    return None


def run_name(results_json: Path) -> str:
    """A run's results.json named from its GPU's folder on ("h200/softmax/results.json"), a table's `source`."""
    parts = results_json.resolve().parts
    if "results" in parts[:-1]:
        return "/".join(parts[len(parts) - parts[::-1].index("results"):])
    return "/".join(parts[-3:])


def build_table(results: Iterable, gpu: str, source: str, compute_capability: str = "") -> dict:
    """The fastest CUDA variant (not auto itself) at every (dtype, N, M) timed in `results` (report.Result
    records or their dicts): `entries`, torch.ops.lab.softmax's; the fastest of the lab's CUDA and
    Triton variants: `lab_entries`, lab.softmax's; and where a faster Triton variant left a point to a
    CUDA one, which and why: `lab_yields`. `compute_capability` ("9.0") is the GPU's, from the run's
    environment (auto's default rule past the table depends on it: table_major)."""
    results = list(results)
    yields: dict[str, list[list]] = {}
    return {"gpu": gpu, "source": source, "compute_capability": compute_capability,
            "rule": "per dtype: the first entry [max N, max M, variant, GB/s measured] covering the shape",
            "entries": _fastest(results, ("cuda",), "cuda."),
            "lab_entries": _fastest(results, ("cuda", "triton"), "", yields),
            "lab_yields": yields}


def build_backward_entries(results: Iterable) -> dict[str, list[list]]:
    """The fastest of the lab's CUDA and Triton softmax backwards at every (dtype, N, M) timed in `results` (a lab
    run of softmax_backward): a table's `backward_entries`, which the autograd formulas of every softmax entry
    read (lab.ops.fastest_backward). A Triton variant yields to a CUDA one as in `lab_entries`."""
    return _fastest(results, ("cuda", "triton"), "", {}, op="softmax_backward")


def save(table: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")


