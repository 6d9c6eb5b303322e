"""The cross_entropy operator (lab/operators/cross_entropy.py) and its own kernels: the float64 reference is
PyTorch's semantics, the lab's kernels agree with it on the cases PyTorch's own float32 result gets right (and
where the lab defines what PyTorch leaves undefined), and bad input is a clear error naming the problem. The
Triton kernels run under the interpreter here, on a GPU there."""

import math

import pytest
import torch
import torch.nn.functional as F

from lab import check, operators
from lab.inputs import Shape
from lab.operators.cross_entropy import DEFAULT, CrossEntropyOptions, reference
from lab.registry import variants

OP = operators.get("cross_entropy")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
OWN = [v for v in variants("cross_entropy", backends=["triton", "cuda", "lab"]) if v.unavailable_on(DEVICE) is None]


def test_the_reference_is_pytorchs_loss_and_gradient():
    logits, target, _ = OP.make_inputs(Shape(6, 11), torch.float32, "cpu", 0)
    weight = torch.rand(11) + 0.5
    for options in (DEFAULT, CrossEntropyOptions(reduction="sum", label_smoothing=0.2, weight=weight),
                    CrossEntropyOptions(reduction="none")):
        z = logits.double().requires_grad_()
        w = None if options.weight is None else options.weight.double()
        loss = F.cross_entropy(z, target, weight=w, reduction=options.reduction,
                               label_smoothing=options.label_smoothing)
        (grad,) = torch.autograd.grad(loss.sum(), z)
        ref_loss, ref_grad = reference(logits, target, options)
        torch.testing.assert_close(ref_loss, loss.detach())
        torch.testing.assert_close(ref_grad, grad)


def test_z_loss_and_softcap_as_defined():
    """z-loss adds lambda * lse^2 per counted row; soft-capping takes the loss of cap * tanh(x / cap)."""
    logits, target, _ = OP.make_inputs(Shape(5, 9), torch.float32, "cpu", 1)
    counted = target != DEFAULT.ignore_index
    x = logits.double()
    plain, _ = reference(logits, target, CrossEntropyOptions(reduction="none"))
    zl, _ = reference(logits, target, CrossEntropyOptions(reduction="none", z_loss=0.01))
    torch.testing.assert_close(zl - plain, torch.where(counted, 0.01 * torch.logsumexp(x, -1) ** 2, 0.0))
    capped, _ = reference(logits, target, CrossEntropyOptions(reduction="none", softcap=2.0))
    expected = F.cross_entropy(2.0 * torch.tanh(x / 2.0), target, reduction="none")
    torch.testing.assert_close(capped, expected)


def test_every_row_ignored_gives_a_nan_mean_and_a_zero_gradient_as_pytorch():
    logits = torch.randn(4, 7)
    target = torch.full((4,), -100)
    loss, grad = reference(logits, target)
    assert math.isnan(loss.item()) and not grad.any()


def test_options_are_validated():
    for bad in (dict(reduction="avg"), dict(label_smoothing=1.5), dict(z_loss=-1.0), dict(softcap=0.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CrossEntropyOptions(**bad)


@pytest.mark.parametrize("v", OWN, ids=lambda v: v.name)
def test_an_ignored_row_has_a_zero_gradient_whatever_it_holds(v):
    """PyTorch's autograd gives NaN for an ignored row that holds a NaN; the lab defines zero (the row takes no
    part), and its kernels never read an ignored row."""
    logits, target, options = OP.make_inputs(Shape(4, 33), torch.float32, DEVICE, 2)
    logits, target = logits.clone(), target.clone()
    logits[1, 5] = math.nan
    target[1] = options.ignore_index
    target[0] = 3
    loss, grad = v.kernel()(logits, target, options)
    ref_loss, ref_grad = reference(logits, target, options)
    assert not grad[1].any() and math.isfinite(loss.item())
    assert check.compare(grad, ref_grad, torch.float32, tolerances=OP.tolerances_for(DEVICE),
                         scale=OP.error_scale(logits, target, options)[1]).ok


@pytest.mark.parametrize("v", OWN, ids=lambda v: v.name)
def test_bad_input_is_a_clear_error(v):
    logits, target, options = OP.make_inputs(Shape(4, 33), torch.float32, DEVICE, 3)
    kernel = v.kernel()
    out_of_range = target.clone()
    out_of_range[2] = 33
    with pytest.raises(ValueError, match="target is out of range"):
        kernel(logits, out_of_range, options)
    with pytest.raises(ValueError, match="target must be int64"):
        kernel(logits, target.int(), options)
    with pytest.raises(ValueError, match="target must be int64 of shape \\(4,\\)"):
        kernel(logits, target[:3], options)
    with pytest.raises(TypeError, match="expected float32, float16 or bfloat16 logits"):
        kernel(logits.double(), target, options)
    with pytest.raises(ValueError, match="weight must be"):
        kernel(logits, target, CrossEntropyOptions(weight=torch.ones(5, device=DEVICE)))
    wrong_device = "cpu" if DEVICE == "cuda" else "meta"
    with pytest.raises(ValueError, match="target must be int64 of shape \\(4,\\) on"):
        kernel(logits, target.to(wrong_device), options)


@pytest.mark.parametrize("v", OWN, ids=lambda v: v.name)
def test_the_gradient_written_into_out(v):
    """With an `out` pair the kernel writes the loss and dlogits there (the checker poisons them first)."""
    case = OP.make_inputs(Shape(5, 100), torch.float16, DEVICE, 4)
    assert v.writes_out
    assert check.check(v.kernel(), case, True, op=OP).ok
