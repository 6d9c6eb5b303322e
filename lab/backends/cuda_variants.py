"""CUDA C++ variants from csrc/softmax/, bound as torch.ops.lab.<name> by the extension lab._C."""

from __future__ import annotations

import torch

from lab.registry import Traffic, Unavailable, Variant, register

_LOADED: list[str] = []


def load_extension() -> None:
    """Import lab._C (registers torch.ops.lab.*) and the ops' shape functions, once."""
    if _LOADED:
        return
    try:
        import lab._C  # noqa: F401
    except ImportError as e:
        raise Unavailable(f"lab._C is not built ({e}); run `bash build.sh`") from e
    for name in CUDA_VARIANTS:
        torch.library.register_fake(f"lab::{name}")(
            lambda x: torch.empty_like(x, memory_format=torch.contiguous_format)
        )
    _LOADED.append("lab._C")


def op_kernel(name: str):
    def build():
        load_extension()
        if not torch.cuda.is_available():
            raise Unavailable("compiled (lab._C); needs a GPU to run")
        functional = getattr(torch.ops.lab, name).default
        with_out = getattr(torch.ops.lab, name).out

        def kernel(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            return functional(x) if out is None else with_out(x, out=out)

        return kernel

    return build


# name -> (HBM traffic, description); the order is the ladder's, and matches csrc/include/lab/launch.h.
CUDA_VARIANTS = {
    "three_pass": (Traffic(3, 1), "block per row; max, sum of exp, write: 3 sweeps, shared-memory tree reductions"),
    "warp_shuffle": (Traffic(3, 1), "three_pass with two-level reductions (warp xor shuffles, then one warp)"),
    "online": (Traffic(2, 1), "single sweep for (max, sum) with the online merge, then one write sweep"),
}
for _name, (_traffic, _description) in CUDA_VARIANTS.items():
    register(Variant(
        op="softmax", name=f"cuda.{_name}", backend="cuda", description=_description,
        build=op_kernel(_name), traffic=_traffic, writes_out=True,
    ))
