"""The cross-entropy Triton kernel's gradient forms (ce_forms.py) compiled for sm_90 without a GPU: each form's static
SASS instruction count, and whether the checkout's kernel (its form picked by the logits' dtype) compiles to the same
instructions as a form. The launch is the wrapper's at rows of 128256 (its launch_config, the streamed pass, the
default options' constexprs); the specialization Triton gives it at run time is assumed: pointers, row strides, the
row count and the vocabulary divisible by 16 (4096 x 128256 contiguous).

    python notebook/remaining-gaps-profiled/sass_counts.py
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ce_forms import FORMS, kernel_of  # noqa: E402

from triton_kernels.looped import launch_config  # noqa: E402

VOCAB = 128256
ARGS = ("x_ptr", "target_ptr", "weight_ptr", "scale_ptr", "loss_ptr", "dx_ptr", "x_stride", "dx_stride", "n_rows",
        "n_cols", "ignore_index", "smoothing", "z_loss", "softcap")


def sass(kernel, dtype: str) -> list[str]:
    """The kernel's SASS instructions, control codes and addresses dropped."""
    ptr = f"*{dtype}"
    types = (ptr, "*i64", ptr, "*fp32", "*fp32", ptr, "i64", "i64", "i32", "i32", "i32", "fp32", "fp32", "fp32")
    block, warps = launch_config(VOCAB, 4 if dtype == "fp32" else 2)
    constexprs = {"BLOCK": block, "WHOLE_ROW": False, "HAS_WEIGHT": False, "SOFTCAP": False, "WRITE_GRAD": True}
    signature = {**dict(zip(ARGS, types)), **{name: "constexpr" for name in constexprs}}
    divisible = {(i,): [["tt.divisibility", 16]] for i in range(10)}  # the pointers, strides, rows and vocabulary
    compiled = triton.compile(ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=divisible),
                              target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
    lines = compiled.asm["sass"].splitlines()
    return [re.sub(r"^\S+\s+", "", line.strip()) for line in lines if re.match(r"^\s*[-0-9a-f]{2}:", line)]


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        kernels = {form: kernel_of(form, Path(folder)) for form in FORMS}
        for dtype in ("bf16", "fp32"):
            code = {form: sass(kernel, dtype) for form, kernel in kernels.items()}
            same = [form for form in FORMS if form != "checkout" and code[form] == code["checkout"]]
            print(f"{dtype}: " + ", ".join(f"{form} {len(lines)}" for form, lines in code.items())
                  + f" instructions; the checkout's the same as: {', '.join(same) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
