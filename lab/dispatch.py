"""auto's dispatch table: which CUDA variant torch.ops.lab.softmax runs for each (dtype, N, M), and
which of the lab's CUDA and Triton variants lab.softmax runs.

The table is data built from the lab's own results on one GPU model: at every measured point
(dtype, N, M) it names the CUDA variant with the highest median GB/s there. The tables the product uses
live in the package, lab/tables/<gpu>.json, and only there: `python scripts/make_dispatch_table.py
results/<gpu>/softmax/results.json` writes one from a run's results (an explicit act: a run alone changes
no route), and nothing of the product reads results/. Every table of lab/tables/ is installed into the
extension when lab._C is loaded, keyed by its GPU model's name (nothing asks the GPU at import); auto uses
the table of the model it runs on. A shape between measured points takes the entry of the next longer
measured row length and, among that length's entries, of the next larger measured M (the largest M for
more rows). Without a table for the GPU, or for a dtype without entries, the default rule of
csrc/softmax/dispatch/auto.cu applies.

A lab run that times `cuda.auto` builds the table as it goes: before auto is checked and timed at a
point, the table is rebuilt from the results of this run so far, which include every other CUDA
variant at that point timed in a selection pass (lab.test.time_point), and installed. An entry's GB/s
are the selection pass's (`selection_gbps`, where the results have it), not the timings reported
beside auto's, and the table rebuilt from the saved results is the one the run ended with. The auto
timed at a point runs the variant the run's table (dispatch_table.json beside its results) names there,
unless a later point of another sweep measures the same (dtype, N, M) and its selection makes a different
variant the fastest: entries are keyed by (dtype, N, M), not by sweep.

The table's `lab_entries` hold the same for lab.softmax (timed as the variant `lab.auto`), over the lab's
CUDA and Triton variants: the C++ op cannot call a Triton kernel, the Python entry can. Where the
fastest is a CUDA variant, lab.softmax calls torch.ops.lab.softmax (whose own entries name it); where
it is a Triton one, that Triton entry, unless a CUDA variant is within TRITON_MARGIN of it or the
Triton kernel is shorter than TRITON_HOST_MS (Triton's launch costs more host time); the table's
`lab_yields` list those points, the Triton variant and why, and `explain` prints them. Neither ever
calls a peer or PyTorch's softmax.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from pathlib import Path

import torch

from lab.registry import dtype_name, variants

AUTO = "cuda.auto"
LAB = "lab.auto"  # the variant that times lab.softmax
_LAB_TABLES: dict[str, dict[str, list[list]]] = {}
"""lab.softmax's entries (each table's lab_entries) by GPU model name, set by install()."""
_LAB_YIELDS: dict[str, dict[str, list[list]]] = {}
"""Each table's lab_yields by GPU model name: where a faster Triton variant left the entry to a CUDA one,
and why (explain() says so)."""
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}  # lab::DType in csrc/include/lab/launch.h
FILENAME = "dispatch_table.json"  # a run's table, beside its results
TABLES = Path(__file__).resolve().parent / "tables"  # the product's tables, <gpu slug>.json: package data


def gpu_slug(name: str) -> str:
    """results/<slug>/ for a GPU name, e.g. 'NVIDIA H200' -> 'h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")


def _fastest(results: Iterable, backends: tuple[str, ...], strip: str,
             yields: dict[str, list[list]] | None = None) -> dict[str, list[list]]:
    """Per dtype, [N, M, variant, GB/s] of the fastest variant of `backends` (not the entries themselves)
    at every (dtype, N, M) timed in `results`, sorted by (N, M); a Triton variant yields to the fastest
    CUDA one within TRITON_MARGIN of it or where its kernel is shorter than TRITON_HOST_MS (below), and
    each time [N, M, the Triton variant, its GB/s, why] goes into `yields`. A variant whose limits depend on more
    than the row length (a shape_reason: cuda.grid_split's depend on M) never enters: the table's rule
    lets an entry cover more rows than were measured (the last entry of a row length takes any more),
    and shorter rows."""
    best: dict[tuple[str, int, int], dict] = {}
    best_cuda: dict[tuple[str, int, int], dict] = {}
    barred = {v.name for v in variants("softmax", backends=list(backends)) if v.shape_reason is not None}
    for r in results:
        r = r if isinstance(r, dict) else vars(r)
        if (r.get("op", "softmax") != "softmax" or r["backend"] not in backends or r["variant"] in (AUTO, LAB)
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
# launcher, which costs more host time per call (scripts/overhead.py on the H200, results/h200/
# overhead.json: lab.softmax 49 us a call on the triton.fused route at float32 4096x1024, 14-22 on the
# op's routes), and the benchmark sees host time once the host falls behind the GPU. So a Triton
# variant takes an entry only if its kernel is faster than the fastest CUDA one by more than the timing's
# resolution: 1%, or 0.2 us on kernels of a few microseconds; and only if its kernel takes at least
# TRITON_HOST_MS, the host time of a call on its route: a shorter one leaves lab.softmax, called in a
# loop, waiting on the host (the run at 98ed8cb timed lab.auto at 1515 GB/s on bfloat16 4096x4096,
# routed to triton.multirow, whose kernel alone ran at 3178: 22 us a call against 10.6).
TRITON_MARGIN = 0.01
TRITON_MARGIN_MS = 0.0002
TRITON_HOST_MS = 0.05


def chosen_gbps(r: dict) -> float | None:
    """The GB/s a table is built from: the selection pass's where one ran (lab.test.time_point: the timings
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


def choose(entries: list[list], m: int, n: int) -> str | None:
    """The rule of csrc/softmax/dispatch/auto.cu on one dtype's entries (sorted by N, then M): the group
    of the shortest measured N >= n, in it the first entry with M >= m, else the group's last."""
    entry = choose_entry(entries, m, n)
    return entry[2] if entry else None


def choose_entry(entries: list[list], m: int, n: int) -> list | None:
    """The entry choose() takes its variant from."""
    group_last = None
    for entry in entries:
        max_n, max_m = entry[0], entry[1]
        if n > max_n:
            continue
        if group_last and group_last[0] != max_n:
            break
        group_last = entry
        if m <= max_m:
            break
    return group_last


def lab_choice(m: int, n: int, dtype: torch.dtype, device: int = 0, gpu: str | None = None) -> str | None:
    """The variant lab.softmax runs for an (m, n) input of `dtype` on CUDA device `device` ("cuda.<name>"
    or "triton.<name>", from the table of that device's GPU model, or of the model `gpu` names), or None where
    the table has no entry (lab.softmax then calls torch.ops.lab.softmax). Not called under torch.compile (see
    lab.softmax). Not remembered here: lab.softmax remembers the route it derives from it per shape (lab._ROUTES)."""
    if gpu is None:
        gpu = _device_name(device) if torch.cuda.is_available() else ""
    entries = _LAB_TABLES.get(gpu, {}).get(dtype_name(dtype), [])
    return choose(entries, m, n) if entries else None


def lab_yields(m: int, n: int, dtype: torch.dtype, gpu: str | None = None) -> list[list]:
    """The table's lab_yields at the entry lab.softmax takes for an (m, n) input of `dtype` on this GPU (or the
    model `gpu` names): [N, M, Triton variant, its GB/s, why the CUDA variant kept the entry] ([] where none
    yielded)."""
    gpu = current_gpu() if gpu is None else gpu
    entry = choose_entry(_LAB_TABLES.get(gpu, {}).get(dtype_name(dtype), []), m, n)
    if entry is None:
        return []
    return [y for y in _LAB_YIELDS.get(gpu, {}).get(dtype_name(dtype), []) if y[:2] == entry[:2]]


def install(table: dict) -> None:
    """Hand the table to the extension for its GPU model (torch.ops.lab_tune.set_auto_table)."""
    names = sorted({e[2] for es in table["entries"].values() for e in es})
    flat = [v for dtype, es in table["entries"].items() if dtype in DTYPE_CODES
            for n, m, variant, _ in es for v in (DTYPE_CODES[dtype], n, m, names.index(variant))]
    torch.ops.lab_tune.set_auto_table(table["gpu"], names, flat)
    _LAB_TABLES[table["gpu"]] = table.get("lab_entries", {})
    _LAB_YIELDS[table["gpu"]] = table.get("lab_yields", {})
    _forget_routes()


def uninstall(gpu: str) -> None:
    """Forget the table of GPU model `gpu`, in the extension and here (tests restore the committed ones)."""
    torch.ops.lab_tune.set_auto_table(gpu, [], [])
    _LAB_TABLES.pop(gpu, None)
    _LAB_YIELDS.pop(gpu, None)
    _forget_routes()


def _forget_routes() -> None:
    """Forget every route lab.softmax derived from the tables before (lab._ROUTES)."""
    import lab

    lab._ROUTES.clear()


def current_gpu() -> str:
    """The name the extension keys tables by, as the device reports it ("" without a GPU)."""
    return _device_name(0) if torch.cuda.is_available() else ""


@functools.cache
def _device_name(index: int) -> str:
    """A device's model name, asked once (it is on lab.softmax's path, called for every input)."""
    return torch.cuda.get_device_name(index)


def committed_tables() -> list[Path]:
    """The product's tables: lab/tables/<gpu>.json, in a checkout and in an installed package alike."""
    return sorted(TABLES.glob("*.json"))


def table_path(gpu: str) -> Path:
    """Where the product's table of GPU model `gpu` is (or would be)."""
    return TABLES / f"{gpu_slug(gpu)}.json"


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def saved_entries(key: str, dtype: torch.dtype) -> list[list]:
    """One dtype's `entries` or `lab_entries` (key) of the saved table of this GPU model ([] without one)."""
    path = table_path(current_gpu())
    return (load(path) if path.exists() else {}).get(key, {}).get(dtype_name(dtype), [])


def save(table: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table, indent=1) + "\n")


def committed_models() -> dict[str, Path]:
    """Each GPU model with a committed table, and the table's path: the last of committed_tables() for that model,
    the one install_committed() leaves installed."""
    return {load(path)["gpu"]: path for path in committed_tables()}


def table_major(path: Path) -> int:
    """The compute capability's major version of the GPU whose table is at `path`, for the default rule past the
    table: the table's own record of it (make_dispatch_table.py writes it from the run's environment), else 9
    where the table names cluster anywhere (cuda.cluster runs on sm_90 or newer only, so a table that names it
    was measured there), else 0 (the rule's choice below sm_90)."""
    table = load(path)
    if table.get("compute_capability"):
        return int(table["compute_capability"].split(".")[0])
    return 9 if any(e[2] == "cluster" for es in table.get("entries", {}).values() for e in es) else 0


def install_committed() -> list[Path]:
    """Install every committed table (each for its GPU model); returns their paths. Nothing where the
    extension was built without softmax (LAB_OPS)."""
    if not hasattr(torch.ops.lab, "softmax"):
        return []
    paths = committed_tables()
    for path in paths:
        install(load(path))
    return paths


TILES_RULE = "short rows in tiles"  # auto_choice's reason where auto's tiles rule gave the rows to tiled_rows


def explain(m: int, n: int, dtype: torch.dtype, gpu: str | None = None) -> list[str]:
    """Lines saying what torch.ops.lab.softmax runs for an (m, n) input of `dtype`, and why: on this machine's GPU,
    or on the GPU model `gpu` names (one of committed_models(), explained on any machine)."""
    name = str(dtype).removeprefix("torch.")
    # A contiguous input's rows start 16-byte aligned only where a row's bytes are a multiple of 16.
    pack = 16 // dtype.itemsize
    aligned = n % pack == 0
    model_table = committed_models()[gpu] if gpu is not None else None  # read once: every committed table is loaded
    if model_table is None:
        variant, source, odd_rows = torch.ops.lab_tune.auto_choice(m, n, dtype, aligned)
    else:
        variant, source, odd_rows = torch.ops.lab_tune.auto_choice(m, n, dtype, aligned, gpu, table_major(model_table))
    rule = "the tiles rule" if odd_rows == TILES_RULE else "the odd-rows rule"
    lines = [f"auto for {m}x{n} {name}: cuda.{variant} ({source}{', then ' + rule if odd_rows else ''})"]
    if odd_rows == TILES_RULE:
        lines.append(f"  tiles rule: rows of {n} elements are not 16-byte aligned (N not a multiple of {pack}), "
                     "short and many: tiled_rows moves tiles of consecutive rows as whole 16-byte packs, where "
                     "register_cached would hold each row's edges element by element (csrc/softmax/dispatch/auto.cu)")
    elif odd_rows:
        entry_cols = torch.ops.lab_tune.register_cached_ragged(n, dtype)[0]
        why = {"entry below N": f"register_cached holds their whole packs on its table entry for rows of up to "
                                f"{entry_cols} elements, below N's",
               "cluster streams": "cluster would read them twice (its streaming path)",
               "cluster crosses an entry": "N is within a pack of the end of its entry in cluster's table of aligned "
                                           "rows (the shifted row crosses it), and they are many 16-bit rows"}[odd_rows]
        lines.append(f"  odd-rows rule: rows of {n} elements are not 16-byte aligned (N not a multiple of {pack}) and "
                     f"{why}; register_cached reads them once (csrc/softmax/dispatch/auto.cu)")
    if source == "table" and (gpu is not None or torch.cuda.is_available()):
        path = model_table if model_table is not None else table_path(current_gpu())
        table = load(path) if path.exists() else None
        if table:
            shown = path.relative_to(TABLES.parent.parent)  # lab/tables/<gpu>.json, in a checkout or a package
            lines.append(f"  table: {shown} (from {table['source']})")
            near = [e for e in table["entries"].get(name, []) if e[0] >= n][:4]
            lines += [f"  measured N={e[0]} M={e[1]}: cuda.{e[2]} {e[3]} GB/s" for e in near]
    elif source != "table":
        lines.append("  no table entry covers this shape for this GPU and dtype: the default rule of "
                     "csrc/softmax/dispatch/auto.cu")
    entry = lab_choice(m, n, dtype, gpu=gpu)
    if entry is not None and entry.startswith("triton."):
        lines.append(f"lab.softmax for {m}x{n} {name}: {entry} (measured faster there than every CUDA variant)")
    else:
        lines.append(f"lab.softmax for {m}x{n} {name}: torch.ops.lab.softmax, as above"
                     + ("" if entry else " (no lab_entries entry covers this shape for this GPU and dtype)"))
        lines += [f"  {y[2]} measured {y[3]} GB/s there, faster, but {y[4]}" for y in lab_yields(m, n, dtype, gpu)]
    if variant == "register_cached" and not aligned:
        entry_cols, peeled = torch.ops.lab_tune.register_cached_ragged(n, dtype)
        lines.append(f"  register_cached: rows of {n} elements are not 16-byte aligned (N not a multiple of {pack}): "
                     + (f"each row's whole 16-byte packs move as packs, on the shapes of its table entry for rows "
                        f"of up to {entry_cols} elements; the elements before its first 16-byte boundary and after its "
                        "last whole pack are held beside them" if peeled else
                        "read and written element by element (at this length that measured faster than the peel)"))
    if variant == "cluster":
        from lab.backends.cuda_variants import cluster_shapes

        plan = torch.ops.lab_tune.cluster_plan(n, dtype, m, aligned)
        shape, cluster, persistent, stagger_groups, stagger_ns = plan
        if not aligned:
            lines.append(f"  rows of {n} elements are not 16-byte aligned (N not a multiple of {pack}): "
                         + (f"each is split from the 16-byte boundary below its start, as a row of up to {n + pack - 1}"
                            " elements, by cluster's table for such rows" if shape >= 0
                            else "the streaming path takes them (cluster's table for such rows)"))
        if shape < 0:
            lines.append(f"  cluster: streaming path (2 reads), {cluster} CTAs per row")
        else:
            threads, elems, stages, packed, one_row = cluster_shapes()[shape]
            staging = ("cp.async staging of its row, one row per CTA (no row loop)" if one_row and stages else
                       f"cp.async staging {stages} row(s) ahead" if stages else "direct loads")
            lines.append(f"  cluster: {cluster} CTA(s) per row of {threads} threads x {elems} elements"
                         f"{' (packed 16-bit)' if packed else ''}, {staging}, "
                         f"{'persistent grid' if persistent else 'one cluster per row'}"
                         + (f", the first wave's clusters started in {stagger_groups} groups {stagger_ns} ns apart"
                            if stagger_groups > 1 and stagger_ns > 0 else ""))
            # How full each CTA's slice is, and how its 16-byte packs fall to the threads (round robin: some threads a
            # pack more than others): an entry's shape and cluster size suit its longest row, and shorter rows leave
            # part of the registers unused (cluster.cu: between the powers of two).
            held, row = threads * elems, n if aligned else n + pack - 1
            per_cta = -(-row // cluster)
            packs, cap = -(-per_cta // pack), elems // pack
            few, most = packs // threads, -(-packs // threads)
            spread = f"{few}" if few == most else f"{few} or {most}"
            lines.append(f"  each CTA's slice: {per_cta} of the {held} elements its threads hold "
                         f"({100 * per_cta / held:.0f}% full: {spread} of each thread's {cap} packs of 16 bytes)")
    return lines
