"""`python -m lab.test` end to end, in CPU mode (CUDA_VISIBLE_DEVICES empty), with filters to stay fast."""

import csv
import json
import os
import re
import subprocess
import sys
from dataclasses import fields

import pytest

from lab import report, resources
from lab.env import ROOT
from lab.registry import variants

# Names come from the registry (variants are added all the time): the first of each backend.
TORCH = variants(backends=["torch"])[0].name
TRITON = variants(backends=["triton"])[0].name
CUDA = [v.name for v in variants(backends=["cuda"])]


def lab_test(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "lab.test", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def assert_clean(proc: subprocess.CompletedProcess, code: int = 0) -> None:
    output = proc.stdout + proc.stderr
    assert proc.returncode == code, output[-4000:]
    assert "Traceback" not in output, output[-4000:]


def test_cpu_run():
    proc = lab_test("--variant", TORCH, "--variant", TRITON, "--variant", "cuda.*",
                    "--quick", "--no-save", "--dtype", "float32")
    assert_clean(proc)
    out = proc.stdout
    header = next((line for line in out.splitlines() if line.startswith("shape ")), "")
    assert TORCH in header and TRITON in header, out
    for name in CUDA:
        assert name in out
    assert "needs a GPU" in out
    assert f"ok   {TORCH}" in out and f"ok   {TRITON}" in out, "the correctness suite ran"
    assert "ok, 0" in out and " of tol" in out, "Triton is checked (its error shown), not timed, under the interpreter"
    assert f"not timed {TRITON}: interpreted" in out
    assert "all checks passed" in out


def test_list():
    proc = lab_test("--list")
    assert_clean(proc)
    listed = [line.split()[0] for line in proc.stdout.splitlines() if re.match(r"  \S", line)]
    assert listed == [v.name for v in variants()]
    assert f"variants ({len(listed)})" in proc.stdout


def test_custom_strided_shape(tmp_path):
    proc = lab_test("--shape", "8x100/128", "--variant", TORCH, "--no-save", "--dtype", "float16",
                    "--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv"))
    assert_clean(proc)
    assert "8x100/128" in proc.stdout
    _, results = report.load_json(tmp_path / "r.json")
    assert [(r.variant, r.dtype, r.m, r.n, r.row_stride, r.status) for r in results] == [
        (TORCH, "float16", 8, 100, 128, "ok")]
    with (tmp_path / "r.csv").open() as f:
        rows = list(csv.reader(f))
    assert rows[0] == [fl.name for fl in fields(report.Result)] and len(rows) == 2


@pytest.mark.parametrize(("args", "message"), [
    (["--shape", "abc"], "cannot read shape 'abc'"),
    (["--shape", "4x10/5"], "STRIDE >= N"),
    (["--dtype", "float64"], "invalid choice"),
], ids=["shape-abc", "stride-below-n", "dtype"])
def test_bad_arguments(args, message):
    proc = lab_test(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "usage: python -m lab.test" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_no_matching_variant():
    """A selection that names nothing is a usage error (exit 2, as argparse's and as a selection of which nothing
    can run here), naming only the filters given."""
    proc = lab_test("--variant", "nothing.*")
    assert proc.returncode == 2
    assert "error: no softmax variant matches --only nothing.*; see --list" in proc.stderr
    assert "None" not in proc.stderr and "Traceback" not in proc.stderr


def test_out_writes_results(tmp_path):
    out = tmp_path / "results"
    proc = lab_test("--variant", TORCH, "--variant", CUDA[0], "--shape", "8x100",
                    "--dtype", "float32", "--out", str(out))
    assert_clean(proc)
    out = out / "softmax"  # --out DIR: DIR/<operator>/, as results/<gpu>/<operator>/
    data = json.loads((out / "results.json").read_text())
    assert {"environment", "results"} <= set(data)
    assert {"torch", "triton", "commit", "date"} <= set(data["environment"])
    assert list(data["unavailable"]) == [CUDA[0]] and "GPU" in data["unavailable"][CUDA[0]]
    (result,) = data["results"]
    assert (result["variant"], result["status"], result["m"], result["n"]) == (TORCH, "ok", 8, 100)
    assert result["median_ms"] > 0 and result["gbps"] > 0
    with (out / "results.csv").open() as f:
        assert next(csv.reader(f)) == [fl.name for fl in fields(report.Result)]
    md = (out / "report.md").read_text()
    assert md.startswith("# softmax-lab results")
    assert f"| shape | copy GB/s | {TORCH} |" in md
    # No CUDA kernel ran here: no nvcc for a resource report (--resources gives one anywhere), and a report of
    # what the run did, a few dozen lines.
    assert "compiling the" not in proc.stdout and "## CUDA kernels: resources" not in md
    assert data["cuda_resources"] == [] and len(md.splitlines()) < 60, md


@pytest.fixture(scope="module")
def resources_run() -> subprocess.CompletedProcess:
    if resources.find_nvcc() is None:
        pytest.skip("nvcc not found")
    return lab_test("--resources")


def test_resources(resources_run):
    assert_clean(resources_run)
    found = re.search(r"^(\d+) kernels, 0 spilling$", resources_run.stdout, re.MULTILINE)
    assert found and int(found.group(1)) >= len(resources.cuda_sources()), resources_run.stdout[-2000:]


def test_resources_names_every_kernel(resources_run):
    lines = resources_run.stdout.splitlines()
    rows = lines[next(i for i, line in enumerate(lines) if line.startswith("kernel ")) + 1:-1]
    assert rows
    for row in rows:  # each row names one kernel of the lab (its namespace, a kernel template), not a stub
        assert row.startswith("lab::") and "_kernel<" in row, row


def test_commit_is_recorded_and_can_be_given(monkeypatch):
    from lab import env

    monkeypatch.delenv("LAB_COMMIT", raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if head:  # a git checkout: HEAD, marked -dirty when tracked files changed
        assert env.git_commit().removesuffix("-dirty") == head
    monkeypatch.setenv("LAB_COMMIT", "0123abc")
    assert env.git_commit() == "0123abc"
    assert env.environment()["commit"] == "0123abc"


def test_nvidia_smi_fields_are_parsed(tmp_path, monkeypatch):
    """The environment's GPU clocks come from `nvidia-smi --query-gpu=... --format=csv,noheader`."""
    from lab import env

    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho '1980 MHz, 3201 MHz, 47'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert env.nvidia_smi("clocks.sm,clocks.mem,temperature.gpu") == {
        "clocks.sm": "1980 MHz", "clocks.mem": "3201 MHz", "temperature.gpu": "47"}
    assert env.clocks_under_load() == {
        "clocks.sm after run": "1980 MHz", "clocks.mem after run": "3201 MHz", "temperature.gpu after run": "47"}
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert env.nvidia_smi("clocks.sm") == {}


def test_a_library_that_parses_the_command_line_does_not_see_the_labs_flags(monkeypatch):
    """QuACK's CuTe DSL parses sys.argv at every compile for its own `-diagnostic` flag, which the lab's
    `-d float32` abbreviates: with the peers installed, `python -m lab.test -d float32` failed. The lab
    hides its flags from the libraries while the variants run."""
    import argparse

    import torch

    from lab import registry, test
    from lab.registry import Traffic, Variant, register

    def like_cute_dsl(x):
        p = argparse.ArgumentParser()
        p.add_argument("-diagnostic", nargs="?", const="all", choices=["all", "fail"])
        p.parse_known_args()  # exits with "invalid choice" if it sees `-d float32`
        return torch.softmax(x, -1)

    planted = register(Variant(op="softmax", name="torch.parses_argv", backend="torch", description="planted",
                               build=lambda: like_cute_dsl, traffic=Traffic(1, 1), runs_on_cpu=True))
    argv = ["--only", planted.name, "-d", "float32", "--check-only"]
    monkeypatch.setattr(sys, "argv", ["lab/test.py", *argv])
    threads = torch.get_num_threads()  # main() runs the CPU on one thread: give the other tests theirs back
    try:
        assert test.main(argv) == 0
    finally:
        del registry._REGISTRY[planted.key]
        torch.set_num_threads(threads)
    assert sys.argv == ["lab/test.py", *argv]
