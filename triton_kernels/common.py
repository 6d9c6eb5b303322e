"""What the Triton wrappers share: input validation and the output buffer."""

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def prepare(x: torch.Tensor, out: torch.Tensor | None, name: str) -> torch.Tensor:
    """Validate a row-wise softmax call and return the tensor to write into."""
    if x.dim() != 2:
        raise ValueError(f"{name}: expected a 2-D tensor (rows, cols), got {x.dim()} dims")
    if x.dtype not in DTYPES:
        raise TypeError(f"{name}: expected float32, float16 or bfloat16, got {x.dtype}")
    if x.shape[1] > 1 and x.stride(1) != 1:
        raise ValueError(f"{name}: the last dimension must be contiguous (stride 1), got strides {x.stride()}")
    if out is None:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if out.shape != x.shape or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(f"{name}: out must match x in shape, dtype and device")
    if out.shape[1] > 1 and out.stride(1) != 1:
        raise ValueError(f"{name}: out's last dimension must be contiguous")
    return out


def num_warps_for(block: int) -> int:
    """More warps for wider rows so each thread holds at most a few dozen elements (tutorial rule)."""
    if block >= 4096:
        return 16
    if block >= 2048:
        return 8
    return 4
