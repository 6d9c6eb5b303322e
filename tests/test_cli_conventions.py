"""The CLI's conventions and promises, each through the real command (CPU mode): --only/--skip,
--metrics, --csv, --output-json, --warmup/--rep, --cudagraph, output paths checked before the run,
nothing runnable is an error, Ctrl-C keeps what was measured, the CPU's wording, no noise, no line
too wide, and the flags the README names exist."""

import csv
import io
import json
import os
import re
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
    """`--csv` alone: stdout is the CSV and nothing else (`> results.csv`), the report goes to stderr."""
    proc = subprocess.run([sys.executable, "-m", "lab.test", "--only", TORCH, "--csv", *SMALL], cwd=tmp_path,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)
    assert_clean(proc)
    assert proc.stdout.startswith("sweep,variant,"), proc.stdout[:300]
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [(r["variant"], r["status"]) for r in rows] == [(TORCH, "ok")]
    assert "all checks passed" in proc.stderr
    assert not (tmp_path / "-").exists(), "`--csv -` prints; it writes no file named -"


def test_output_files_and_their_folders_are_made_before_the_run(tmp_path):
    out = tmp_path / "new" / "deeper"
    proc = lab_test("--only", TORCH, "--shape", "8x100", "--dtype", "float32", "--out", str(out),
                    "--csv", str(tmp_path / "nodir" / "r.csv"), "--output-json", str(tmp_path / "j" / "r.json"))
    assert_clean(proc)
    assert (tmp_path / "nodir" / "r.csv").exists() and json.loads((tmp_path / "j" / "r.json").read_text())["results"]
    out = out / "softmax"  # the operator's folder below --out
    for name in ("results.json", "results.csv", "results_wide.csv", "report.md"):
        assert (out / name).exists(), name
    wide = list(csv.reader((out / "results_wide.csv").open()))
    assert wide[0][:8] == ["op", "sweep", "dtype", "M", "N", "row_stride", "K", "copy GB/s"] and TORCH in wide[0]
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


# A lab run that receives Ctrl-C (a real SIGINT, sent to itself) as its point K starts: the points before it are
# done, whatever the machine's speed (a signal sent from outside on a line of output can arrive after the last point).
INTERRUPTED_RUN = """
import os, signal, sys
# Ctrl-C as a terminal delivers it, even where the suite runs with SIGINT ignored (a background job inherits that).
signal.signal(signal.SIGINT, signal.default_int_handler)
import lab.measure as measure
import lab.test as lab_test

started = []
time_point = measure.time_point

def interrupted_at_k(*args, **kwargs):
    started.append(1)
    if len(started) == K:
        os.kill(os.getpid(), signal.SIGINT)
    return time_point(*args, **kwargs)

measure.time_point = interrupted_at_k
sys.exit(lab_test.main(sys.argv[1:]))
"""


def interrupted_run(at_point: int, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1", "TRITON_INTERPRET": "1"}
    shapes = [a for n in (100, 200, 300, 400, 500, 600, 700, 800) for a in ("--shape", f"4x{n}")]
    code = INTERRUPTED_RUN.replace("K", str(at_point))
    return subprocess.run([sys.executable, "-c", code, "--only", TORCH, "--dtype", "float32", *shapes, *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_ctrl_c_keeps_what_was_measured(tmp_path):
    out = tmp_path / "out"
    proc = interrupted_run(3, "--out", str(out))
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert "interrupted: the 2 points measured so far are reported and saved" in proc.stdout
    assert "INTERRUPTED; no check failed before the interruption" in proc.stdout
    assert "all checks passed" not in proc.stdout, "the checks were cut off: not all of them ran"
    measured = json.loads((out / "softmax" / "results.json").read_text())["results"]
    assert [r["n"] for r in measured] == [100, 200] and all(r["status"] == "ok" for r in measured)


def test_ctrl_c_without_out_says_nothing_was_saved():
    proc = interrupted_run(2)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted: the 1 point measured so far is reported\n" in proc.stdout
    not_saved = "not saved: a run without a GPU is saved only where --out DIR names a folder\n"
    assert not_saved in proc.stdout and "saved" not in proc.stdout.replace(not_saved, ""), proc.stdout


def test_a_cpu_run_says_it_saved_nothing():
    proc = lab_test("--only", TORCH, "--shape", "8x100", "--dtype", "float32")
    assert_clean(proc)
    assert "not saved: a run without a GPU is saved only where --out DIR names a folder" in proc.stdout
    assert "not saved" not in lab_test("--only", TORCH, *SMALL).stdout, "--no-save asked for it: nothing to say"


def test_an_empty_shape_is_checked_and_not_timed():
    proc = lab_test("--shape", "0x5", "--only", TORCH, "--dtype", "float32", "--no-save")
    assert_clean(proc)
    assert f"not timed {TORCH}: an empty shape (no elements): checked, nothing to time" in proc.stdout
    assert "all checks passed" in proc.stdout


def test_check_only_says_what_its_cells_are():
    proc = lab_test("--only", TORCH, "--check-only", *SMALL)
    assert_clean(proc)
    assert "GB/s" not in proc.stdout and "copy" not in proc.stdout, proc.stdout
    assert "worst error" in proc.stdout and re.search(r"ok, [\d.e-]+ of tol", proc.stdout)


def test_list_into_a_reader_that_stops_early():
    """`softmax-lab --list | head -1`: the reader closes the pipe; the lab ends without a traceback."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
    proc = subprocess.run(f"{sys.executable} -m lab.test --op all --list | head -1", shell=True, cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.stdout.count("\n") == 1 and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_the_console_script_names_itself():
    """`softmax-lab --help` says `usage: softmax-lab`, and a run records the command as typed."""
    code = "import sys; sys.argv[0] = '/usr/bin/softmax-lab'; from lab.test import main; sys.exit(main())"
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-c", code, "--help"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: softmax-lab "), proc.stdout[:200]


def test_explain_says_what_a_shape_is():
    proc = lab_test("--explain", "foo")
    assert proc.returncode == 2
    assert "argument --explain: cannot read shape 'foo': expected MxN" in proc.stderr, proc.stderr


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


def test_ctrl_c_during_the_resource_report_keeps_the_results(monkeypatch):
    """Ctrl-C (or a time limit's SIGINT) while nvcc compiles the sources for the report, after every point is
    measured: the run saves its results without the report instead of losing them all."""
    import lab.resources
    import lab.test

    def interrupted():
        raise KeyboardInterrupt

    said = []
    monkeypatch.setattr(lab.test, "log", lambda msg="": said.append(msg))  # the console's stream is the suite's
    monkeypatch.setattr(lab.resources, "find_nvcc", lambda: "nvcc")
    monkeypatch.setattr(lab.resources, "report_all", interrupted)
    assert lab.test.resource_report() == []
    assert any("interrupted: the results are saved without the resource report" in m for m in said), said
