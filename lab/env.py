"""The environment record stored with every result: GPU, clocks, driver, versions, commit."""

from __future__ import annotations

import datetime
import logging
import os
import platform
import shutil
import subprocess
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def results_root() -> Path:
    """Where results go by default: the checkout's results/ (beside the committed ones), or, for an
    installed package, results/ in the working folder."""
    return ROOT / "results" if (ROOT / "pyproject.toml").exists() else Path.cwd() / "results"


def _run(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def git_commit() -> str:
    """HEAD, with -dirty for uncommitted changes; LAB_COMMIT overrides it where the checkout's
    history is not the code's (the device tool copies the working tree beside an older .git)."""
    if os.environ.get("LAB_COMMIT"):
        return os.environ["LAB_COMMIT"]
    commit = _run(["git", "rev-parse", "HEAD"]) or "unknown"
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"])
    return commit + ("-dirty" if dirty else "")


def gpu_record() -> dict:
    if not torch.cuda.is_available():
        return {}
    p = torch.cuda.get_device_properties(0)
    rec = {
        "gpu": p.name,
        "sms": p.multi_processor_count,
        "memory_gib": round(p.total_memory / 2**30, 1),
        "l2_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
        "compute_capability": f"{p.major}.{p.minor}",
    }
    rec.update(nvidia_smi("driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,power.limit,"
                          "temperature.gpu"))
    return rec


def nvidia_smi(fields: str) -> dict:
    """The first GPU's values of nvidia-smi's comma-separated query fields ({} without nvidia-smi)."""
    if not shutil.which("nvidia-smi"):
        return {}
    out = _run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"])
    return dict(zip(fields.split(","), out.splitlines()[0].split(", "), strict=False)) if out else {}


def clocks_under_load() -> dict:
    """Clocks and temperature read right after the timed sweeps: the ones in gpu_record() are read at
    start-up, when an idle GPU reports its lowest SM clock."""
    return {f"{k} after run": v for k, v in nvidia_smi("clocks.sm,clocks.mem,temperature.gpu").items()}


def environment() -> dict:
    import importlib.metadata as md

    def version(pkg: str) -> str:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return "not installed"

    nvcc = _run(["nvcc", "--version"]).splitlines()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": version("triton"),
        "numpy": version("numpy"),
        "nvcc": nvcc[-1] if nvcc else "not found",
        # the optional peers' versions: their numbers mean something only with these
        "quack-kernels": version("quack-kernels"),
        "nvidia-cutlass-dsl": version("nvidia-cutlass-dsl-libs-base"),
        "liger-kernel": version("liger-kernel"),
        "cut-cross-entropy": version("cut-cross-entropy"),
        **gpu_record(),
    }


def quiet_third_party() -> None:
    """Messages of other libraries that say nothing about the lab's run (the lab's own process only)."""
    # torch's extension helpers, imported by Inductor on a machine without a CUDA runtime
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    # Inductor's note that it split a long row's reduction and so did not use its online softmax
    warnings.filterwarnings("ignore", message=r"\s*Online softmax is disabled", category=UserWarning)
    # TorchScript's deprecation (torch.jit_naive is kept as a rung of the ladder while torch has it)
    warnings.filterwarnings("ignore", message=r".*torch\.jit\.script.* is deprecated", category=DeprecationWarning)
    # the Triton interpreter's NumPy: overflow and invalid values on the special rows (inf, NaN) are
    # the point of those rows, and a NumPy deprecation inside the interpreter
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"triton\.runtime\.interpreter")

from lab import operators  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
OPERATORS = operators.operators()
