"""The package as a user installs it: `pip install --no-build-isolation .` from a copy of the sources
(the extension built for one operator to keep this quick: LAB_OPS), then the package used from
another folder: import, the extension's ops, the shipped dispatch tables, the console CLI."""

import os
import shutil
import subprocess
import sys

import pytest

from lab import resources
from lab.env import ROOT

pytestmark = pytest.mark.skipif(resources.find_nvcc() is None, reason="nvcc not found (set CUDA_HOME)")


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple:
    tmp = tmp_path_factory.mktemp("package")
    src = tmp / "src"
    for name in ("csrc", "lab", "triton_kernels", "results"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("_C*.so", "__pycache__", "*.png"))
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    target = tmp / "site"
    env = {**os.environ, "LAB_OPS": "vector_add", "MAX_JOBS": "2", "CUDA_HOME": resources.cuda_home()}
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "-q",
                           "--target", str(target), str(src)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    work = tmp / "elsewhere"
    work.mkdir()
    return target, work


def run(installed, *args: str) -> subprocess.CompletedProcess:
    target, work = installed
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(target)}
    return subprocess.run([sys.executable, *args], cwd=work, capture_output=True, text=True, env=env, timeout=600)


def test_import_from_another_folder(installed):
    target, _ = installed
    code = ("import lab, torch; print(lab.__file__); print(hasattr(torch.ops.lab, 'vector_add_grid_stride')); "
            "from lab import dispatch; print(dispatch.committed_tables())")
    proc = run(installed, "-c", code)
    assert proc.returncode == 0, proc.stderr[-3000:]
    file, has_op, tables = proc.stdout.splitlines()
    assert file.startswith(str(target)), "the installed package, not the checkout"
    assert has_op == "True", "the extension was built and installed with the package"
    assert "lab/tables/h200.json" in tables, "the committed dispatch tables ship with the package"


def test_console_cli_from_another_folder(installed):
    target, work = installed
    proc = run(installed, "-m", "lab.test", "--op", "vector_add", "-v", "torch.add", "--quick")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "vector_add: " in proc.stdout and "all checks passed" in proc.stdout
    assert (target / "bin" / "softmax-lab").exists(), "the console script is installed"
