"""The Python API behaves as the CLI does: clear errors for the same bad input, no change to the
user's process settings, the extension ready after a bare `import lab._C`."""

import os
import subprocess
import sys

import pytest
import torch

from lab.env import ROOT
from lab.registry import variants


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**clean, "CUDA_VISIBLE_DEVICES": "", **env})


def test_triton_wrapper_on_a_cpu_tensor_says_what_to_do():
    proc = python("import torch\nfrom triton_kernels.fused import softmax_fused\n"
                  "try:\n    softmax_fused(torch.randn(2, 3))\nexcept ValueError as e:\n    print(e)")
    assert proc.returncode == 0, proc.stderr
    assert "Triton kernels run on CUDA tensors" in proc.stdout and "TRITON_INTERPRET=1" in proc.stdout


def test_interpreter_set_after_import_is_named():
    proc = python("import os, torch\nimport triton_kernels.fused\nos.environ['TRITON_INTERPRET'] = '1'\n"
                  "from lab.registry import variants\n"
                  "print(next(v for v in variants(backends=['triton'])).availability())")
    assert proc.returncode == 0, proc.stderr
    assert "imported without the interpreter" in proc.stdout


@pytest.mark.parametrize("v", [v for v in variants(backends=["torch"]) if v.availability() is None],
                         ids=lambda v: v.name)
def test_torch_variants_refuse_integer_input(v):
    with pytest.raises(Exception, match="(?i)float|not implemented for 'Int'") as info:
        v.kernel()(torch.ones(4, 10, dtype=torch.int32))
    assert not isinstance(info.value, AssertionError)


def test_building_torch_compile_leaves_the_process_settings_alone():
    import torch._dynamo

    before = (torch._dynamo.config.fail_on_recompile_limit_hit, torch._dynamo.config.recompile_limit)
    compiled = next(v for v in variants() if v.name == "torch.compile").kernel()
    x = torch.randn(3, 17)
    assert torch.allclose(compiled(x), torch.softmax(x, -1))
    assert (torch._dynamo.config.fail_on_recompile_limit_hit, torch._dynamo.config.recompile_limit) == before


def test_import_lab_C_alone_gives_ready_ops():
    pytest.importorskip("lab._C", reason="lab._C is not built")
    proc = python("import lab._C, torch\nfrom torch._subclasses.fake_tensor import FakeTensorMode\n"
                  "with FakeTensorMode():\n    print(torch.ops.lab.online(torch.empty(3, 8)).shape)\n")
    assert proc.returncode == 0, proc.stderr
    assert "torch.Size([3, 8])" in proc.stdout, "the fake kernel is registered by the import itself"
