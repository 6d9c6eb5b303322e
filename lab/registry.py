"""The variant contract and the registry, keyed by (operator, variant name).

A backend module in lab/backends/ registers its variants at import; `load_backends()` imports every
module there, so adding a backend is adding a module and adding a variant is one `register` call.
"""

from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from lab.dispatch import dtype_name
from lab.inputs import Shape

Kernel = Callable[..., torch.Tensor]
"""kernel(*inputs) -> output, or kernel(*inputs, out) -> out for variants that write into a given
tensor; softmax's inputs are (x,)."""

ALL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BACKENDS = ("torch", "triton", "cuda", "lab", "peer")
"""`lab`: the lab's public Python entry, lab.softmax (the variant lab.auto), which runs the lab's own CUDA
and Triton variants (lab/backends/lab_variants.py). `peer`: kernels of other projects, optional packages
measured beside ours (lab/backends/peer_variants.py)."""

ShapeReason = Callable[[Shape, torch.dtype], str | None]
"""shape_reason(shape, dtype) -> why the variant cannot take this shape in this dtype, or None if it can."""


def overwrites_input(kernel: Kernel) -> bool:
    """Whether a kernel writes over its first input (Liger's cross-entropy writes the gradient over the logits): it
    says so with an attribute `overwrites_input`. The checker gives it a copy of that input for each call; the
    timing, one copy per point, which its calls overwrite (lab/bench.py, timed_call; lab/check.py, run_variant)."""
    return getattr(kernel, "overwrites_input", False)


class Unavailable(Exception):
    """Raised by a variant's `build` when its prerequisites are missing; the message is the reason."""


@dataclass(frozen=True)
class Traffic:
    """Modeled HBM traffic in multiples of the bytes of one input (x for softmax): tensors read and
    written, counting every sweep."""

    reads: float
    writes: float

    def ceiling_fraction(self, minimum: Traffic | None = None) -> float:
        """Fraction of a copy's bandwidth that this traffic allows at best, for an operator that must
        move `minimum` (1 read + 1 write, softmax's, by default): a copy moves its bytes at full speed."""
        least = minimum or Traffic(1, 1)
        return (least.reads + least.writes) / (self.reads + self.writes)


@dataclass(frozen=True)
class Variant:
    op: str
    name: str
    backend: str
    description: str
    build: Callable[[], Kernel]
    """Returns the kernel, or raises Unavailable. Called once (or once per shape, see per_shape)."""
    traffic: Traffic | Callable[[torch.dtype], Traffic] | None = None
    """The modeled traffic of a variant of a memory-bound operator; None for an operator built on matmuls, whose
    figures are FLOP/s and memory (lab/operators/__init__.py, flops)."""
    dtypes: tuple[torch.dtype, ...] = ALL_DTYPES
    dtype_reason: str = ""
    """Why the dtypes left out of `dtypes` are, when there is more to say than "not supported"."""
    max_n: int | None = None
    max_n_reason: str = ""
    shape_reason: ShapeReason | None = None
    """Per-shape limits beyond the dtype and the row length (alignment, row stride...): a library that
    refuses one edge case is skipped on that shape only, with the reason, instead of on a whole dtype."""
    case_reason: Callable[..., str | None] | None = None
    """case_reason(*inputs) -> why the variant cannot take these inputs beyond their shape (a peer without one of
    cross_entropy's options), or None: the correctness suite skips such a case and counts it as skipped."""
    data_align: int = 1
    """The byte boundary x's data must start on (a library that refuses a view starting mid-vector)."""
    writes_out: bool = False
    """Accepts an `out` tensor: the checker poisons it to catch unwritten elements."""
    per_shape: bool = False
    """`build` must be called again for each new shape and dtype (e.g. torch.compile)."""
    runs_on_cpu: bool = False
    """Runs on CPU tensors (the torch variants; Triton ones under TRITON_INTERPRET=1)."""
    thresholds: Callable[[torch.dtype], list[int]] | None = None
    """Row lengths where the variant's launch changes, read from its own tables (lab.fuzz tests both
    sides of each)."""
    prepare: Callable[[list], None] | None = None
    """Called by the lab's runner with this run's results so far (report.Result records) before the
    variant is checked and timed at a point, the point's other variants among them as checked and timed
    in a selection pass (lab.measure.time_point): cuda.auto builds its dispatch table from them."""
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def case_skip_reason(self, *inputs) -> str | None:
        """Why this variant cannot take these inputs beyond their shape (its case_reason), or None."""
        return self.case_reason(*inputs) if self.case_reason is not None else None

    def traffic_for(self, dtype: torch.dtype) -> Traffic | None:
        return self.traffic(dtype) if callable(self.traffic) else self.traffic

    def skip_reason(self, shape: Shape, dtype: torch.dtype, start: int = 0) -> str | None:
        """Why this variant cannot take this shape (M, N, row stride) in this dtype, or None if it can.
        The dtype first, then the row length, then the variant's own shape_reason; `start`: x's data
        pointer modulo 256 (a view's offset in bytes; the allocator aligns to 256 or more), checked
        against data_align."""
        if start % self.data_align:
            return (f"x starts {start % self.data_align} bytes past a {self.data_align}-byte boundary "
                    f"(a view's offset): {self.name} needs its data {self.data_align}-byte aligned")
        if dtype not in self.dtypes:
            return f"{dtype_name(dtype)} not supported" + (f": {self.dtype_reason}" if self.dtype_reason else "")
        if self.max_n is not None and shape.n > self.max_n:
            return f"N > {self.max_n}: {self.max_n_reason}" if self.max_n_reason else f"N > {self.max_n}"
        if self.shape_reason is not None:
            return self.shape_reason(shape, dtype)
        return None

    def kernel(self) -> Kernel:
        """The built kernel (cached unless per_shape); raises Unavailable with the reason. Only a kernel
        is cached: a variant that was unavailable is asked again, since the environment may have
        changed since (a package installed, TRITON_INTERPRET set)."""
        if self.per_shape:
            return self.build()
        if "kernel" not in self._cache:
            self._cache["kernel"] = self.build()
        return self._cache["kernel"]

    def availability(self) -> str | None:
        """None if the variant can run here, else the reason it cannot."""
        try:
            self.kernel()
        except Unavailable as e:
            return str(e)
        return None

    def unavailable_on(self, device: torch.device | str) -> str | None:
        """None if the variant can run on this device, else the reason it cannot."""
        reason = self.availability()
        if reason is None and torch.device(device).type == "cpu" and not self.runs_on_cpu:
            return "needs a GPU"
        return reason

    @property
    def key(self) -> tuple[str, str]:
        return (self.op, self.name)


_REGISTRY: dict[tuple[str, str], Variant] = {}


def register(variant: Variant) -> Variant:
    if variant.backend not in BACKENDS:
        raise ValueError(f"{variant.name}: unknown backend {variant.backend!r}; expected one of {BACKENDS}")
    if variant.key in _REGISTRY:
        raise ValueError(f"variant {variant.op}/{variant.name} is registered twice")
    _REGISTRY[variant.key] = variant
    return variant


def get(op: str, name: str) -> Variant:
    """The registered variant `name` of `op` (e.g. get("softmax", "triton.multirow"))."""
    load_backends()
    try:
        return _REGISTRY[(op, name)]
    except KeyError:
        raise KeyError(f"no variant {name!r} of {op!r} is registered") from None


_BACKENDS_LOADED: list[bool] = []


def load_backends() -> None:
    """Import every module of lab.backends (each registers its variants on import), once: get() is on
    a lookup's path, where listing the package's folder on every call cost tens of microseconds."""
    if _BACKENDS_LOADED:
        return
    from lab import backends

    for mod in pkgutil.iter_modules(backends.__path__):
        importlib.import_module(f"lab.backends.{mod.name}")
    _BACKENDS_LOADED.append(True)


def matches(v: Variant, pattern: str) -> bool:
    """A name or glob matches a variant's whole name (`cuda.online`, `cuda.*`) or its name within its
    backend (`online`, `*fused*`)."""
    short = v.name.removeprefix(f"{v.backend}.")
    return fnmatch.fnmatchcase(v.name, pattern) or fnmatch.fnmatchcase(short, pattern)


def split_patterns(values: list[str] | None) -> list[str]:
    """Patterns as given on a command line: repeated, or comma-separated (`-v a,b -v c`)."""
    return [p.strip() for value in values or [] for p in value.split(",") if p.strip()]


def variants(
    op: str = "softmax",
    patterns: list[str] | None = None,
    backends: list[str] | None = None,
    skip: list[str] | None = None,
) -> list[Variant]:
    """Registered variants of `op`, backends in BACKENDS order (then registration order), filtered
    by names or globs (see `matches`; patterns may be comma lists), backends, and names to skip."""
    load_backends()
    out = sorted((v for v in _REGISTRY.values() if v.op == op), key=lambda v: BACKENDS.index(v.backend))
    if patterns:
        pats = split_patterns(patterns)
        out = [v for v in out if any(matches(v, p) for p in pats)]
    if skip:
        skips = split_patterns(skip)
        out = [v for v in out if not any(matches(v, p) for p in skips)]
    if backends:
        out = [v for v in out if v.backend in backends]
    return out
