"""What lab.softmax and torch.ops.lab.softmax run for a shape, and why (`python -m lab.test --explain MxN`): the
table entry or default rule auto takes, the odd-rows and tiles rules of csrc/softmax/dispatch/auto.cu, the
launch the chosen kernel makes; on this GPU, or for another GPU model by its table in lab/tables/.
"""

from __future__ import annotations

from pathlib import Path

import torch

from lab.backends.cuda_variants import cluster_shapes
from lab.dispatch import TABLES, committed_models, current_gpu, lab_choice, lab_yields, load, pack_elements, table_path


def table_major(path: Path) -> int:
    """The compute capability's major version of the GPU whose table is at `path`, for the default rule past the
    table: the table's own record of it (make_dispatch_table.py writes it from the run's environment), else 9
    where the table names cluster anywhere (cuda.cluster runs on sm_90 or newer only, so a table that names it
    was measured there), else 0 (the rule's choice below sm_90)."""
    table = load(path)
    if table.get("compute_capability"):
        return int(table["compute_capability"].split(".")[0])
    return 9 if any(e[2] == "cluster" for es in table.get("entries", {}).values() for e in es) else 0


TILES_RULE = "short rows in tiles"  # auto_choice's reason where auto's tiles rule gave the rows to tiled_rows


def explain(m: int, n: int, dtype: torch.dtype, gpu: str | None = None) -> list[str]:
    """Lines saying what torch.ops.lab.softmax runs for an (m, n) input of `dtype`, and why: on this machine's GPU,
    or on the GPU model `gpu` names (one of committed_models(), explained on any machine)."""
    name = str(dtype).removeprefix("torch.")
    # A contiguous input's rows start 16-byte aligned only where a row's bytes are a multiple of 16.
    pack = pack_elements(dtype)
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
