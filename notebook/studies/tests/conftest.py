"""Shared set-up: the Triton interpreter without a GPU, and the `gpu` marker.

TRITON_INTERPRET must be set before any @triton.jit kernel is defined (the interpreter is chosen
when the decorator runs), so it is set here, at import, before a test module imports a kernel.
"""

import os

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
if not HAS_GPU:
    os.environ["TRITON_INTERPRET"] = "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked @pytest.mark.gpu are skipped on a machine without a CUDA GPU."""
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
