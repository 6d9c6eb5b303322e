"""PyTorch variants: the reference op, the naive eager composition, TorchScript and torch.compile."""

from __future__ import annotations

import itertools
import math
import types

import torch

from lab.registry import Traffic, Unavailable, Variant, register


def torch_softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def naive_softmax(x: torch.Tensor) -> torch.Tensor:
    """max, subtract, exp, sum, divide: five kernels, each a trip through memory (float32 math)."""
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"torch.naive: expected float32, float16 or bfloat16, got {x.dtype}")
    xf = x.float()
    # The shift leaves softmax unchanged, so its derivative is zero: detached, autograd does not send
    # the row's gradient sum (0, up to its float32 rounding) to the max element. Not detached, that
    # rounding lands on one element, up to 100x the tolerance on long rows of near-equal values.
    m = xf.amax(dim=-1, keepdim=True).detach()
    e = torch.exp(xf - m)
    return (e / e.sum(dim=-1, keepdim=True)).to(x.dtype)


def naive_traffic(dtype: torch.dtype) -> Traffic:
    """Each eager kernel reads and writes its whole operand; float32 temporaries weigh 4/itemsize."""
    w = 4 / torch.empty((), dtype=dtype).element_size()
    # amax: read; sub: read + write; exp: read + write; sum: read; div: read + write
    reads, writes = 5 * w, 3 * w
    if w != 1:  # 16-bit x: x.float() (read x, write a float32 copy) and .to(dtype) (read it, write y)
        reads, writes = reads + 1 + w, writes + w + 1
    return Traffic(reads, writes)


def build_jit():
    try:
        return torch.jit.script(naive_softmax)
    except Exception as e:  # TorchScript is deprecated; some builds reject or lack it
        raise Unavailable(f"torch.jit.script is not available in torch {torch.__version__}: {e}") from e


_COMPILED = itertools.count()


def fresh_compile(fn):
    """torch.compile of a copy of fn's code, changing nothing of the process's settings. Dynamo keeps its compiled
    graphs per code object: each copy's graphs are the only ones its guards check (the lab's timings carry no
    guard checks of other shapes, and no recompile limit is reached), and the copy is dropped with its caller."""
    code = fn.__code__.replace(co_name=f"{fn.__name__}_compiled_{next(_COMPILED)}")
    return torch.compile(types.FunctionType(code, fn.__globals__, code.co_name), dynamic=False, fullgraph=True)


def build_compile():
    """A fresh torch.compile of torch.softmax for one shape (fresh_compile)."""
    compiled = fresh_compile(torch_softmax)

    def kernel(x: torch.Tensor) -> torch.Tensor:
        # Inductor would compile an integer softmax that eager PyTorch refuses: refuse it as eager does.
        if not x.is_floating_point():
            raise TypeError(f"torch.compile: softmax expects a floating-point tensor, got {x.dtype}")
        return compiled(x)

    return kernel


COMMON = dict(op="softmax", backend="torch", runs_on_cpu=True)
register(Variant(
    name="torch.softmax", description="torch.softmax: PyTorch's own kernel (the baseline)",
    build=lambda: torch_softmax, traffic=Traffic(1, 1), **COMMON,
))
register(Variant(
    name="torch.naive", description="eager max, sub, exp, sum, div: one kernel and one HBM trip each",
    build=lambda: naive_softmax, traffic=naive_traffic, **COMMON,
))
register(Variant(
    name="torch.jit_naive", description="the naive composition under torch.jit.script (fuses the pointwise ops)",
    build=build_jit, traffic=naive_traffic, **COMMON,
))
register(Variant(
    name="torch.compile", description="torch.compile(torch.softmax), compiled for each shape (Inductor)",
    build=build_compile, traffic=Traffic(1, 1), per_shape=True, **COMMON,
))

# --- vector_add -------------------------------------------------------------------------------------


def torch_add(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    return torch.add(a, b, out=out)


register(Variant(
    name="torch.add", op="vector_add", backend="torch", runs_on_cpu=True, writes_out=True,
    description="torch.add(a, b): PyTorch's elementwise kernel (the baseline)",
    build=lambda: torch_add, traffic=Traffic(2, 1),
))

# --- softmax_backward ---------------------------------------------------------------------------------


def torch_softmax_backward(y: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return torch._softmax_backward_data(dy, y, -1, y.dtype)


register(Variant(
    name="torch.softmax_backward", op="softmax_backward", backend="torch", runs_on_cpu=True,
    description="torch._softmax_backward_data: PyTorch's softmax backward kernel (the baseline)",
    build=lambda: torch_softmax_backward, traffic=Traffic(2, 1),
))

# --- cross_entropy -----------------------------------------------------------------------------------


def cross_entropy_float32(logits: torch.Tensor, target: torch.Tensor, options) -> torch.Tensor:
    """The loss on the logits upcast to float32, as language models call F.cross_entropy (lab/operators/
    cross_entropy.py's loss_of: weights, label smoothing, z-loss, soft-capping)."""
    from lab.operators.cross_entropy import loss_of

    return loss_of(logits.float(), target, options)


def torch_cross_entropy(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor, torch.Tensor]:
    """The float32 loss and its gradient in the logits' dtype (the upcast's backward casts it back)."""
    from lab.operators.cross_entropy import loss_and_grad

    return loss_and_grad(cross_entropy_float32, logits, target, options)


def build_compile_cross_entropy(with_grad: bool = True):
    """torch.compile of the float32 loss for one shape, forward and backward (AOTAutograd compiles both), or without
    grad the forward alone (the loss alone: cross_entropy_loss), a fresh compile for each set of options (each would
    otherwise recompile the shape's graph)."""
    from lab.operators.cross_entropy import loss_and_grad

    compiled: dict[int, object] = {}

    def kernel(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor, ...]:
        if id(options) not in compiled:
            compiled[id(options)] = (options, fresh_compile(cross_entropy_float32))  # holding options keeps its id
        fn = compiled[id(options)][1]
        if with_grad:
            return loss_and_grad(fn, logits, target, options)
        with torch.no_grad():
            return (fn(logits, target, options),)

    return kernel


def cross_entropy_traffic(dtype: torch.dtype) -> Traffic:
    """F.cross_entropy on float32 logits, eagerly: the upcast (read the logits, write float32), log_softmax (read,
    write), and in the backward nll's zeros and scatter (write), log_softmax's backward (read the gradient and the
    output, write) and the cast back (read float32, write the dtype): float32 passes weigh 4/itemsize."""
    w = 4 / torch.empty((), dtype=dtype).element_size()
    if w == 1:  # float32 logits: no copy in, none out
        return Traffic(3, 3)
    return Traffic(1 + 4 * w, 4 * w + 1)


def ignored_rows_reason(logits: torch.Tensor, target: torch.Tensor, options) -> str | None:
    """PyTorch's autograd gives NaN in an ignored row whose log-softmax is NaN (0 times NaN): a row holding a NaN or
    +inf, or only -inf; the lab defines that row's gradient as zero (lab/operators/cross_entropy.py). A row with
    some -inf entries (a masked vocabulary) is PyTorch's as anyone's."""
    rows = logits[target == options.ignore_index]
    if rows.numel() and bool((rows.isnan() | rows.isposinf()).any(-1).logical_or((rows == -math.inf).all(-1)).any()):
        return "an ignored row holds NaN, +inf or only -inf: PyTorch's gradient there is NaN (the lab defines 0)"
    return None


CROSS_ENTROPY = dict(op="cross_entropy", backend="torch", runs_on_cpu=True, case_reason=ignored_rows_reason)
register(Variant(
    name="torch.cross_entropy",
    description="F.cross_entropy on the logits upcast to float32, forward then backward (the baseline)",
    build=lambda: torch_cross_entropy, traffic=cross_entropy_traffic, **CROSS_ENTROPY,
))
register(Variant(
    name="torch.compile", description="torch.compile of the same loss, compiled for each shape: Inductor's forward "
                                      "and backward (2 reads of the logits, 1 write)",
    build=build_compile_cross_entropy, traffic=Traffic(2, 1), per_shape=True, **CROSS_ENTROPY,
))

# --- cross_entropy_loss: the loss alone ---------------------------------------------------------------


def torch_cross_entropy_loss(logits: torch.Tensor, target: torch.Tensor, options) -> tuple[torch.Tensor]:
    with torch.no_grad():
        return (cross_entropy_float32(logits, target, options),)


def cross_entropy_loss_traffic(dtype: torch.dtype) -> Traffic:
    """F.cross_entropy's forward on float32 logits: the upcast (read the logits, write float32) and log_softmax
    (read, write); nll's gather is O(M). float32 passes weigh 4/itemsize."""
    w = 4 / torch.empty((), dtype=dtype).element_size()
    return Traffic(1, 1) if w == 1 else Traffic(1 + w, 2 * w)


# Without a gradient, PyTorch's loss of an ignored row is 0 whatever the row holds: no case is PyTorch's to skip.
CROSS_ENTROPY_LOSS = dict(op="cross_entropy_loss", backend="torch", runs_on_cpu=True)
register(Variant(
    name="torch.cross_entropy",
    description="F.cross_entropy on the logits upcast to float32, without grad (the baseline)",
    build=lambda: torch_cross_entropy_loss, traffic=cross_entropy_loss_traffic, **CROSS_ENTROPY_LOSS,
))
register(Variant(
    name="torch.compile", description="torch.compile of the same loss without grad, compiled for each shape: "
                                      "Inductor's forward (1 read of the logits)",
    build=lambda: build_compile_cross_entropy(with_grad=False), traffic=Traffic(1, 0), per_shape=True,
    **CROSS_ENTROPY_LOSS,
))

# --- linear_cross_entropy: the head's matmul and the loss, forward and backward -------------------------------------


def head_loss_float32(x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, bias: torch.Tensor | None,
                      options) -> torch.Tensor:
    """The head's logits in the inputs' dtype (one matmul), then the loss on them upcast to float32, as language
    models call F.cross_entropy."""
    return cross_entropy_float32(torch.nn.functional.linear(x, weight, bias), target, options)


def build_head_eager():
    from lab.operators.linear_cross_entropy import train_step

    return train_step(head_loss_float32)


def build_head_compile():
    """torch.compile of head_loss_float32 for one shape, forward and backward (AOTAutograd compiles both)."""
    from lab.operators.linear_cross_entropy import train_step

    return train_step(fresh_compile(head_loss_float32))


def default_options_only(x, weight, target, bias, options) -> str | None:
    if not options.is_default:
        return ("torch.compile runs the default options (each set of options is another compile, seconds each); "
                "torch.eager checks them all")
    return ignored_nan_token_reason(x, weight, target, bias, options)


def build_head_chunked():
    from lab import losses
    from lab.operators.linear_cross_entropy import head_loss_and_grads

    def torch_chunked(x, weight, target, bias, options):
        loss, dx, dweight, dbias = head_loss_and_grads(x, weight, target, bias, options, x.dtype, torch.float32,
                                                       losses.LOGITS_CHUNK_BYTES // x.element_size(), upcast=True)
        return loss.float(), dx, dweight, dbias

    return torch_chunked


def ignored_nan_token_reason(x, weight, target, bias, options) -> str | None:
    """PyTorch's autograd gives NaN in the gradient of an ignored token whose hidden state holds a NaN (its logits'
    row is NaN: ignored_rows_reason); the lab defines it as zero."""
    ignored = target == options.ignore_index
    if x.numel() and bool(x[ignored].isnan().any()):
        return "an ignored token's hidden state holds NaN: PyTorch's gradient there is NaN (the lab defines 0)"
    return None


LINEAR_CROSS_ENTROPY = dict(op="linear_cross_entropy", backend="torch", runs_on_cpu=True)
register(Variant(
    name="torch.eager",
    description="F.linear, then F.cross_entropy on the logits upcast to float32, and autograd's backward (the "
                "baseline): the whole logits in memory, twice",
    build=build_head_eager, case_reason=ignored_nan_token_reason, **LINEAR_CROSS_ENTROPY,
))
register(Variant(
    name="torch.compile",
    description="torch.compile of the same, compiled for each shape (Inductor's forward and backward)",
    build=build_head_compile, per_shape=True, case_reason=default_options_only, **LINEAR_CROSS_ENTROPY,
))
register(Variant(
    name="torch.chunked",
    description="PyTorch a chunk of tokens at a time (a Python loop; 1 GiB of logits a chunk): each chunk's "
                "logits in the inputs' dtype, F.cross_entropy on them upcast to float32 and its autograd gradient "
                "rounded back (as torch.eager's), dx and dW by matmuls, dW summed in float32",
    build=build_head_chunked, **LINEAR_CROSS_ENTROPY,
))


# --- linear_cross_entropy_loss: the head's loss without grad --------------------------------------------------------


def build_head_eager_loss():
    from lab.operators.linear_cross_entropy import evaluation

    return evaluation(head_loss_float32)


def build_head_compile_loss():
    from lab.operators.linear_cross_entropy import evaluation

    return evaluation(fresh_compile(head_loss_float32))


def build_head_chunked_loss():
    from lab import losses
    from lab.operators.linear_cross_entropy import head_loss_and_grads

    def torch_chunked_loss(x, weight, target, bias, options):
        with torch.no_grad():
            (loss,) = head_loss_and_grads(x, weight, target, bias, options, x.dtype, torch.float32,
                                          losses.LOGITS_CHUNK_BYTES // x.element_size(), with_grad=False, upcast=True)
        return (loss.float(),)

    return torch_chunked_loss


LINEAR_CROSS_ENTROPY_LOSS = dict(op="linear_cross_entropy_loss", backend="torch", runs_on_cpu=True)
register(Variant(
    name="torch.eager", description="F.linear, then F.cross_entropy on the logits upcast to float32, without grad "
                                    "(the baseline)",
    build=build_head_eager_loss, **LINEAR_CROSS_ENTROPY_LOSS,
))
register(Variant(
    name="torch.compile", description="torch.compile of the same without grad, compiled for each shape",
    build=build_head_compile_loss, per_shape=True, case_reason=default_options_only, **LINEAR_CROSS_ENTROPY_LOSS,
))
register(Variant(
    name="torch.chunked", description="PyTorch a chunk of tokens at a time without grad (1 GiB of logits a chunk): "
                                      "each chunk's logits in the inputs' dtype, F.cross_entropy on them upcast to "
                                      "float32 (as torch.eager's)",
    build=build_head_chunked_loss, **LINEAR_CROSS_ENTROPY_LOSS,
))
