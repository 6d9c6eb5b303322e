"""What the Triton wrappers share: input validation and the output buffer."""

import functools
import os

import torch
import triton
import triton.language as tl

# Whether the kernels of this process run under the Triton interpreter: decided when @triton.jit runs,
# that is when these modules are imported, by TRITON_INTERPRET=1 (on CPU tensors, without a GPU).
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
_FAST_EXP: tl.constexpr = tl.constexpr(not INTERPRETED)


@triton.jit
def fast_exp(x):
    """exp(x) of float32 x as 2^(x log2 e) on ex2.approx.ftz.f32, as the CUDA kernels compute it
    (csrc/include/lab/exp.cuh). tl.exp lowers to ex2.approx.f32, whose denormal handling puts a compare
    and two predicated multiplies around every MUFU.EX2 (seen in the SASS of triton.multirow). The flush
    changes only results below 2^-126 to 0. The interpreter, which runs no PTX, takes tl.exp."""
    if _FAST_EXP:
        return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                         dtype=tl.float32, is_pure=True, pack=1)
    else:
        return tl.exp(x)


def traceable(kernel):
    """A kernel as a torch.library.triton_op launches it: through wrap_triton, so that torch.compile traces it. The
    interpreter's kernels are launched as they are: wrap_triton takes compiled @triton.jit functions only, and
    nothing compiles a graph around an interpreted kernel."""
    from torch.library import wrap_triton

    return kernel if INTERPRETED else wrap_triton(kernel)


def check_device(t: torch.Tensor, name: str, what: str = "x") -> None:
    """A tensor the kernels can run on: CUDA, or CPU under the interpreter."""
    if t.device.type == "cuda" and not INTERPRETED:
        return
    if t.device.type == "cpu" and INTERPRETED:
        return
    if INTERPRETED:
        raise ValueError(f"{name}: {what} is on {t.device}; under TRITON_INTERPRET=1 the kernels run on CPU tensors")
    raise ValueError(f"{name}: {what} is on {t.device}; Triton kernels run on CUDA tensors (or on CPU tensors under "
                     "the interpreter: set TRITON_INTERPRET=1 before importing triton_kernels)")

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


# Plain-int forms of triton.next_power_of_2 and triton.cdiv: the wrappers call these on every launch, and
# Triton's own go through its constexpr machinery (a few microseconds each on the host). Under
# torch.compile, Triton's own, which Dynamo is known to trace.
def next_power_of_2(n: int) -> int:
    if torch.compiler.is_compiling():
        return triton.next_power_of_2(n)
    return 1 << (n - 1).bit_length() if n > 0 else 0


def cdiv(a: int, b: int) -> int:
    if torch.compiler.is_compiling():
        return triton.cdiv(a, b)
    return -(-a // b)


def sm_count(index: int) -> int:
    """The SM count of CUDA device `index`: asked once (not on every launch), except under torch.compile,
    where Dynamo traces the query (it refuses to trace into a functools cache)."""
    if torch.compiler.is_compiling():
        return torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_count(index)


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def prepare(x: torch.Tensor, out: torch.Tensor | None, name: str) -> torch.Tensor:
    """Validate a row-wise softmax call and return the tensor to write into."""
    check_device(x, name)
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
