"""The peer backend (lab/backends/peer_variants.py): other projects' kernels, from optional packages.

They are registered always. Without the package, or without a GPU, each says why; the harness lists
it as not run with that reason; listing the variants never imports the packages. Their per-shape
limits are skip reasons, so a peer is skipped on the shapes it cannot take and nowhere else.
"""

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from lab import inputs
from lab.backends import peer_variants
from lab.env import ROOT
from lab.inputs import Shape
from lab.registry import ALL_DTYPES, Traffic, Unavailable, dtype_name, variants
from lab.registry import get as get_variant

PEERS = variants(backends=["peer"])
# build function -> (import name, package name): what each peer needs, and what to install.
PACKAGES = {
    peer_variants.build_quack: ("quack", "quack-kernels"),
    peer_variants.build_liger: ("liger_kernel", "liger-kernel"),
}
QUACK = next(v for v in PEERS if v.build is peer_variants.build_quack)
LIGER = next(v for v in PEERS if v.build is peer_variants.build_liger)


def reason_without_gpu(build) -> str:
    """What a peer says on a machine without a GPU: the package is missing, or the GPU is."""
    module, package = PACKAGES[build]
    if importlib.util.find_spec(module) is None:
        return f"{package} is not installed (pip install {package})"
    return "needs a GPU"


def run_lab(*args: str) -> subprocess.CompletedProcess:
    """python -m lab.test in CPU mode (the GPU hidden), as a user runs it."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "lab.test", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "Traceback" not in output, output[-4000:]
    return proc


def test_peers_are_registered():
    assert {v.build for v in PEERS} == set(PACKAGES), "every peer has its package, and each is registered"
    for v in PEERS:
        assert v.name.startswith("peer.") and v.description.strip(), v.name
        assert not v.writes_out, "peers allocate their output: the checker calls kernel(x)"
        assert not v.runs_on_cpu and not v.per_shape, v.name
        assert v.dtypes == ALL_DTYPES, v.name
        assert all(v.traffic_for(d) == Traffic(1, 1) for d in ALL_DTYPES), v.name
    assert QUACK.shape_reason is peer_variants.quack_shape_reason
    assert LIGER.max_n == peer_variants.LIGER_MAX_N == 65536 and "65536" in LIGER.max_n_reason


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU behaviour")
@pytest.mark.parametrize("v", PEERS, ids=lambda v: v.name)
def test_peer_is_unavailable_here_with_its_reason(v):
    assert v.availability() == reason_without_gpu(v.build)
    with pytest.raises(Unavailable):
        v.kernel()


@pytest.mark.parametrize("build", PACKAGES, ids=lambda b: PACKAGES[b][1])
def test_build_without_the_package(build, monkeypatch):
    monkeypatch.setattr(peer_variants.importlib.util, "find_spec", lambda name: None)
    package = PACKAGES[build][1]
    with pytest.raises(Unavailable, match=rf"^{package} is not installed \(pip install {package}\)$"):
        build()


@pytest.mark.parametrize("build", PACKAGES, ids=lambda b: PACKAGES[b][1])
def test_build_without_a_gpu(build, monkeypatch):
    monkeypatch.setattr(peer_variants.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(Unavailable, match="^needs a GPU$"):
        build()


@pytest.mark.parametrize("build", PACKAGES, ids=lambda b: PACKAGES[b][1])
def test_build_when_the_package_fails_to_import(build, monkeypatch):
    """An installed package that cannot be imported makes its peer unavailable, with the error."""
    module, package = PACKAGES[build]
    monkeypatch.setattr(peer_variants.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # `import module` (and of any submodule, even one a run already imported) raises ImportError
    for name in [m for m in sys.modules if m == module or m.startswith(module + ".")] + [module]:
        monkeypatch.setitem(sys.modules, name, None)
    failed = rf"^{package} is installed but failed to import \((ModuleNotFound|Import)Error: "
    with pytest.raises(Unavailable, match=failed):
        build()


def test_listing_does_not_import_the_packages():
    code = ("import sys; from lab.registry import variants; variants(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'quack', 'liger_kernel', 'cutlass'}))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


# --- QuACK's per-shape limits -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dtype", "words"),
    [
        pytest.param(Shape(4, 100), torch.float32, None, id="100-float32"),
        pytest.param(Shape(4, 100), torch.bfloat16, "N % 8 != 0", id="100-bfloat16"),
        pytest.param(Shape(4, 100), torch.float16, "N % 8 != 0", id="100-float16"),
        pytest.param(Shape(4, 104), torch.bfloat16, None, id="104-bfloat16"),
        pytest.param(Shape(3, 1), torch.float32, "16-byte vectors", id="N=1"),
        pytest.param(Shape(2, 262147), torch.float32, "N % 4 != 0", id="odd-long"),
        pytest.param(Shape(2, 262144), torch.bfloat16, None, id="262144-bfloat16"),
        pytest.param(Shape(3, 256, 264), torch.float32, None, id="stride-264-float32"),
        pytest.param(Shape(3, 256, 264), torch.bfloat16, None, id="stride-264-bfloat16"),
        pytest.param(Shape(3, 256, 258), torch.float32, "row stride % 4 != 0", id="stride-258"),
        pytest.param(Shape(6, 100, 133), torch.float32, "16-byte boundary", id="stride-133"),
        pytest.param(Shape(2, 2**20), torch.float32, "shared memory of a cluster of 16 CTAs", id="2^20-float32"),
        pytest.param(Shape(2, 2**20), torch.bfloat16, None, id="2^20-bfloat16"),
    ],
)
def test_quack_shape_reason(shape, dtype, words):
    reason = QUACK.skip_reason(shape, dtype)
    if words is None:
        assert reason is None
    else:
        assert reason is not None and words in reason, reason


def test_quack_runs_edge_shapes_in_every_dtype():
    """Skipped per shape, not per dtype: every dtype keeps the edge shapes with 16-byte rows."""
    for dtype in ALL_DTYPES:
        kept = [s for s in inputs.EDGE_SHAPES if QUACK.skip_reason(s, dtype) is None]
        assert len(kept) >= 5, (dtype_name(dtype), [s.label for s in kept])
        assert all(s.n * dtype.itemsize % 16 == 0 for s in kept)


# --- the harness --------------------------------------------------------------------------------


def test_list_shows_each_peer_with_its_reason():
    proc = run_lab("--list")
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("  ")}
    for v in PEERS:
        assert v.name in lines, proc.stdout
        assert reason_without_gpu(v.build) in lines[v.name], lines[v.name]
        assert "ready" not in lines[v.name].split()


def test_run_reports_peers_as_not_run():
    """A run that asks for the peers goes on without them and says why each was not run."""
    baseline = variants(backends=["torch"])[0].name
    proc = run_lab("--variant", "peer.*", "--variant", baseline, "--shape", "8x128", "--dtype", "float32",
                   "--no-save")
    assert "all checks passed" in proc.stdout
    not_run = " ".join(line.strip() for line in proc.stdout.splitlines() if line.startswith(("not run ", "    ")))
    for v in PEERS:
        assert f"not run {v.name}: {reason_without_gpu(v.build)}" in not_run, proc.stdout


def test_cross_entropy_peers_say_which_options_they_lack():
    """QuACK's cross_entropy has no label smoothing, z-loss or soft-capping, and Liger divides a weighted mean's
    z-loss otherwise than PyTorch's definition: the correctness suite skips those cases, naming why."""
    from lab.operators.cross_entropy import CrossEntropyOptions

    quack = get_variant("cross_entropy", "peer.quack")
    liger = get_variant("cross_entropy", "peer.liger")
    x, t = torch.zeros(2, 8), torch.zeros(2, dtype=torch.int64)
    assert quack.case_reason(x, t, CrossEntropyOptions(weight=torch.ones(8), reduction="sum")) is None
    assert quack.case_reason(x, t, CrossEntropyOptions(label_smoothing=0.1, softcap=3.0)) == \
        "QuACK's cross_entropy has no label_smoothing, softcap"
    assert liger.case_reason(x, t, CrossEntropyOptions(z_loss=1e-4)) is None
    assert "PyTorch's is NaN" in liger.case_reason(x, torch.full_like(t, -100), CrossEntropyOptions())
    assert "z-loss" in liger.case_reason(x, t, CrossEntropyOptions(z_loss=1e-4, weight=torch.ones(8)))
    assert "padded rows" in quack.shape_reason(Shape(4, 1000, 1040), torch.bfloat16)
    assert liger.shape_reason(Shape(0, 7), torch.bfloat16) and not liger.shape_reason(Shape(1, 7), torch.bfloat16)
