"""The dispatch tables: which CUDA variant torch.ops.lab.softmax runs for each (dtype, N, M), and which of the
lab's CUDA and Triton variants lab.softmax runs. Part of the product: it imports nothing of the harness
(lab/tabulate.py builds tables from a run's results).

A table holds, per dtype, entries [max N, max M, variant, GB/s measured], sorted by (N, M), measured on one GPU
model: `entries` (torch.ops.lab.softmax's, CUDA variants), `lab_entries` (lab.softmax's, CUDA or Triton) and
`backward_entries` (the softmax backward that every softmax entry's gradient runs, CUDA or Triton: from a run of
softmax_backward, `--backward` of scripts/make_dispatch_table.py).
The tables the product uses live in the package, lab/tables/<gpu>.json, and only there: `python
scripts/make_dispatch_table.py results/<gpu>/softmax/results.json` writes one from a run (an explicit act: a
run alone changes no route); nothing of the product reads results/. Every table of lab/tables/ is installed
into the extension when lab._C is loaded, keyed by its GPU model's name (nothing asks the GPU at import);
auto uses the table of the model it runs on. A shape between measured points takes the entry of the next
longer measured row length and, among that length's entries, of the next larger measured M (the largest M
for more rows). Without a table for the GPU, or for a dtype without entries, the default rule of
csrc/softmax/dispatch/auto.cu applies. Where lab_entries name a CUDA variant, lab.softmax calls
torch.ops.lab.softmax (whose own entries name it); where a Triton one, that Triton entry.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import torch

_LAB_TABLES: dict[str, dict[str, list[list]]] = {}
"""lab.softmax's entries (each table's lab_entries) by GPU model name, set by install()."""
_BACKWARD_TABLES: dict[str, dict[str, list[list]]] = {}
"""The softmax backward's entries (each table's backward_entries) by GPU model name, set by install()."""
_LAB_YIELDS: dict[str, dict[str, list[list]]] = {}
"""Each table's lab_yields by GPU model name: where a faster Triton variant left the entry to a CUDA one,
and why (explain() says so)."""
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}  # lab::DType in csrc/include/lab/launch.h
PACK_BYTES = 16  # the CUDA kernels move a row in whole 16-byte packs (one 128-bit access or cp.async each)
TABLES = Path(__file__).resolve().parent / "tables"  # the product's tables, <gpu slug>.json: package data


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype as tables and results name it: "float32", "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def pack_elements(dtype: torch.dtype) -> int:
    """Elements of `dtype` in one of the CUDA kernels' 16-byte packs."""
    return PACK_BYTES // dtype.itemsize


def whole_packs(n: int, dtype: torch.dtype) -> int:
    """The longest row of at most n elements that is whole 16-byte packs: contiguous rows of that length all start
    on a 16-byte boundary (the CUDA kernels' aligned rows), where rows of n may not."""
    return n - n % pack_elements(dtype)


def gpu_slug(name: str) -> str:
    """results/<slug>/ for a GPU name, e.g. 'NVIDIA H200' -> 'h200'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-")


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


def backward_choice(m: int, n: int, dtype: torch.dtype, device: int = 0, gpu: str | None = None) -> str | None:
    """The softmax backward measured fastest for an (m, n) input of `dtype` on the GPU model of CUDA device `device`
    (or the model `gpu` names): "cuda.<name>" or "triton.<name>", from its table's backward_entries, or None where
    the table has none."""
    if gpu is None:
        gpu = _device_name(device) if torch.cuda.is_available() else ""
    entries = _BACKWARD_TABLES.get(gpu, {}).get(dtype_name(dtype), [])
    return choose(entries, m, n) if entries else None


def backward_switch_lengths(m: int, gpu: str | None = None) -> list[int]:
    """The row lengths n after which the backward that backward_choice gives m rows changes, in any dtype, on the
    current GPU's model (or the model `gpu` names): n + 1 takes another entry's kernel, or, past the table's longest
    length, none (ops' rule). Each is a measured length of its table's backward_entries. Empty where the model has no
    table (or there is no GPU)."""
    if gpu is None:
        gpu = current_gpu()
    switches: set[int] = set()
    for entries in _BACKWARD_TABLES.get(gpu, {}).values():
        switches |= {e[0] for e in entries if choose(entries, m, e[0]) != choose(entries, m, e[0] + 1)}
    return sorted(switches)


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
    _BACKWARD_TABLES[table["gpu"]] = table.get("backward_entries", {})
    _forget_routes()


def install_backward(gpu: str, entries: dict[str, list[list]]) -> None:
    """Set the backward_entries of GPU model `gpu` alone (a lab run's, from its results so far)."""
    _BACKWARD_TABLES[gpu] = entries


def uninstall(gpu: str) -> None:
    """Forget the table of GPU model `gpu`, in the extension and here (tests restore the committed ones)."""
    torch.ops.lab_tune.set_auto_table(gpu, [], [])
    _LAB_TABLES.pop(gpu, None)
    _LAB_YIELDS.pop(gpu, None)
    _BACKWARD_TABLES.pop(gpu, None)
    _forget_routes()


ROUTE_CACHES: list[dict] = []
"""The caches of routes derived from the tables (lab.softmax's, which puts its own here), emptied whenever a
table is installed or removed, since a new table may route a shape elsewhere."""


def _forget_routes() -> None:
    for cache in ROUTE_CACHES:
        cache.clear()


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


def committed_models() -> dict[str, Path]:
    """Each GPU model with a committed table, and the table's path: the last of committed_tables() for that model,
    the one install_committed() leaves installed."""
    return {load(path)["gpu"]: path for path in committed_tables()}


def install_committed() -> list[Path]:
    """Install every committed table (each for its GPU model); returns their paths. Nothing where the
    extension was built without softmax (LAB_OPS)."""
    if not hasattr(torch.ops.lab, "softmax"):
        return []
    paths = committed_tables()
    for path in paths:
        install(load(path))
    return paths


