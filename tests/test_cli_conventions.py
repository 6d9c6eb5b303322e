"""The CLI's conventions and promises, each through the real command (CPU mode): --only/--skip,
--metrics, --csv, --output-json, --warmup/--rep, --cudagraph, output paths checked before the run,
nothing runnable is an error, Ctrl-C keeps what was measured, the CPU's wording, no noise, no line
too wide, and the flags the README names exist."""

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lab.env import ROOT
from lab.registry import variants
from tests.test_cli import assert_clean, lab_test

TORCH = variants(backends=["torch"])[0].name
TORCH_SHORT = TORCH.split(".", 1)[1]
CUDA = [v.name for v in variants(backends=["cuda"])]
SMALL = ["--shape", "8x100", "--dtype", "float32", "--no-save"]


def listed(proc) -> list[str]:
    return [line.split()[0] for line in proc.stdout.splitlines() if re.match(r"  \S", line)]


def test_only_takes_comma_lists_and_names_without_backend():
    names = [v.name for v in variants(backends=["torch"])][:2]
    proc = lab_test("--list", "--only", ",".join(n.split(".", 1)[1] for n in names))
    assert_clean(proc)
    assert listed(proc) == names


def test_skip_leaves_variants_out():
    proc = lab_test("--list", "--skip", "torch.*,cuda.*")
    assert_clean(proc)
    assert listed(proc) and not any(n.startswith(("torch.", "cuda.")) for n in listed(proc))


def test_nothing_runnable_is_an_error_with_the_reasons():
    proc = lab_test("--only", "cuda.*", *SMALL)
    assert proc.returncode == 2, proc.stdout
    assert "none of the selected variants can run here" in proc.stdout
    reasons = (f"{CUDA[0]}: compiled (lab._C); needs a GPU", f"{CUDA[0]}: lab._C is not built")
    assert any(r in proc.stdout for r in reasons), proc.stdout
    assert "all checks passed" not in proc.stdout


def test_metrics_choose_the_cells():
    proc = lab_test("--only", TORCH, "--metrics", "latency,gbps", *SMALL)
    assert_clean(proc)
    row = next(line for line in proc.stdout.splitlines() if line.startswith("8x100 "))
    assert re.search(r"\d+\.\dus \d+", row), row
    bad = lab_test("--metrics", "bogus", *SMALL)
    assert bad.returncode == 2 and "--metrics: unknown bogus" in bad.stderr


def test_csv_dash_prints_the_results_as_csv(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lab.test", "--only", TORCH, "--csv", *SMALL], cwd=tmp_path,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert_clean(proc)
    text = proc.stdout[proc.stdout.index("sweep,variant,"):]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [(r["variant"], r["status"]) for r in rows] == [(TORCH, "ok")]
    assert not (tmp_path / "-").exists(), "`--csv -` prints; it writes no file named -"


def test_output_files_and_their_folders_are_made_before_the_run(tmp_path):
    out = tmp_path / "new" / "deeper"
    proc = lab_test("--only", TORCH, "--shape", "8x100", "--dtype", "float32", "--out", str(out),
                    "--csv", str(tmp_path / "nodir" / "r.csv"), "--output-json", str(tmp_path / "j" / "r.json"))
    assert_clean(proc)
    assert (tmp_path / "nodir" / "r.csv").exists() and json.loads((tmp_path / "j" / "r.json").read_text())["results"]
    for name in ("results.json", "results.csv", "results_wide.csv", "report.md"):
        assert (out / name).exists(), name
    wide = list(csv.reader((out / "results_wide.csv").open()))
    assert wide[0][:7] == ["op", "sweep", "dtype", "M", "N", "row_stride", "copy GB/s"] and TORCH in wide[0]
    md = (out / "report.md").read_text()
    assert "CPU wall clock" in md and "L2 flushed" not in md, "the CPU report says how it timed"


def test_an_output_path_that_cannot_be_made_fails_before_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = lab_test("--only", TORCH, *SMALL[:-1], "--out", str(blocker / "sub"))
    assert proc.returncode == 2, proc.stdout
    assert "cannot create the output folder" in proc.stderr
    assert "checking" not in proc.stdout, "nothing ran"


def test_cudagraph_needs_a_gpu_and_timing_flags_are_taken():
    proc = lab_test("--cudagraph", *SMALL)
    assert proc.returncode == 2 and "--cudagraph needs a GPU" in proc.stderr
    assert_clean(lab_test("--only", TORCH, "--warmup", "0", "--rep", "5", *SMALL))
    assert lab_test("--rep", "0", *SMALL).returncode == 2
    bad_flush = lab_test("--flush-mb", "0", *SMALL)
    assert bad_flush.returncode == 2 and "--flush-mb must be at least 1" in bad_flush.stderr


def test_ctrl_c_keeps_what_was_measured(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", "TRITON_INTERPRET": "1"}
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "lab.test", "--only", TORCH, "--dtype", "float32", "--out", str(out),
           *(a for n in (100, 200, 300, 400, 500, 600, 700, 800) for a in ("--shape", f"4x{n}")), "--rep", "300"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[2/"):
            proc.send_signal(signal.SIGINT)
            break
    rest, err = proc.communicate(timeout=120)
    output = "".join(lines) + rest
    assert proc.returncode == 130, output + err
    assert "Traceback" not in output + err
    assert "interrupted" in output and "INTERRUPTED" in output
    measured = json.loads((out / "results.json").read_text())["results"]
    assert 2 <= len(measured) < 8 and all(r["status"] == "ok" for r in measured)


def test_no_third_party_noise_and_no_wide_lines():
    proc = lab_test("--only", f"{TORCH},torch.compile", "--shape", "8x100", "--dtype", "float32", "--no-save")
    assert_clean(proc)
    assert "No CUDA runtime is found" not in proc.stdout + proc.stderr
    table = False
    for line in proc.stdout.splitlines():
        table = table or line.startswith("shape ")
        if not table:
            assert len(line) <= 120, line


def test_help_names_the_flags_the_readme_uses():
    help_text = lab_test("--help").stdout
    # The README documents python -m lab.test and python -m lab.fuzz ...
    fuzz_help = subprocess.run([sys.executable, "-m", "lab.fuzz", "--help"], capture_output=True, text=True,
                               cwd=ROOT, timeout=120).stdout
    assert "--per-shape-cases" in fuzz_help
    # ... and the GPU trust script, scripts/trust.py
    trust_help = subprocess.run([sys.executable, str(ROOT / "scripts" / "trust.py"), "--help"], capture_output=True,
                                text=True, cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout
    assert "--refuzz" in trust_help
    readme = (ROOT / "README.md").read_text()
    flags = set(re.findall(r"`(--[a-z][a-z-]*)", readme))
    assert flags, "the README names flags"
    missing = [f for f in flags if f not in help_text + fuzz_help + trust_help and f not in ("--no-build-isolation",)]
    assert not missing, f"README flags absent from --help: {missing}"
    # every document the help names is one a user of the project has
    named = set(re.findall(r"[\w./-]+\.md\b", help_text))
    absent = [name for name in named if not any(ROOT.glob(f"**/{Path(name).name}"))]
    assert not absent and "../" not in help_text, f"help names documents outside the project: {absent}"


def test_rich_tables_on_a_terminal():
    pytest.importorskip("rich", reason="rich is not installed (plain tables then)")
    from rich.console import Console

    from lab import report

    console = Console(record=True, width=200, file=io.StringIO())
    console.print(report.rich_table(["shape", "copy GB/s", TORCH], [["8x100", "12", "3.45 (28%)"]], "title"))
    text = console.export_text()
    assert "8x100" in text and "3.45 (28%)" in text and TORCH in text


def test_small_numbers_keep_their_digits():
    from lab import report

    r = report.Result("s", TORCH, "torch", "float32", 8, 100, 100, "ok", gbps=0.4567, pct_copy=27.0,
                      median_ms=0.0123)
    assert report.cell(r, ["gbps", "pct_copy", "latency"]) == "0.457 (27%) 12.3us"
