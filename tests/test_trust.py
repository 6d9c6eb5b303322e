"""scripts/trust.py (run on a GPU) writes its report from what it measured: the report's layout, checked
here on made-up measurements, and the script's refusal to run without a GPU."""

import json
import os
import subprocess
import sys

import pytest
import scripts_loader

from lab.env import ROOT

trust = scripts_loader.load("scripts/trust.py")


def test_report_layout(tmp_path):
    data = {
        "environment": {"commit": "abc123", "gpu": "NVIDIA H200", "date": "2026-11-22"},
        "fuzz": {"cases": 10000, "seed": 0, "per_shape_cases": 200, "variants": {
            "cuda.cluster": {"cases": 9000, "skipped": 1000, "not drawn": 0, "mismatches": []},
            "torch.compile": {"cases": 190, "skipped": 10, "not drawn": 9800, "mismatches": []},
            "triton.fused": {"cases": 8000, "skipped": 2000, "not drawn": 0, "mismatches": [
                {"problem": "FAIL (worst 3 of tolerance)",
                 "repro": "python -m lab.fuzz --seed 0 --case 7 --only triton.fused"}]},
        }},
        "large": {"command": "pytest -k 64bit", "summary": "20 passed", "shapes": "over 2^31", "returncode": 0},
        "sanitizers": {"returncode": 0, "tools": {"initcheck": {"errors": 0, "summary": "ERROR SUMMARY: 0 errors"}}},
        "citizenship": {"cuda.cluster": {"torch.compile(fullgraph=True)": trust.cell(True),
                                         "opcheck (.default and .out)": trust.cell(False, "schema mismatch")}},
        "bad_inputs": {"cuda.cluster": {"CPU tensor": trust.cell(True, "error: lab::cluster: expected a CUDA tensor")}},
    }
    path = tmp_path / "trust.md"
    trust.write_markdown(data, path)
    md = path.read_text()
    assert "| `cuda.cluster` | 9000 | 1000 | 0 | 0 |" in md and "| `triton.fused` | 8000 | 2000 | 0 | 1 |" in md
    assert "| `torch.compile` | 190 | 10 | 9800 | 0 |" in md and "first 200 cases only" in md
    assert "python -m lab.fuzz --seed 0 --case 7 --only triton.fused" in md
    assert "| initcheck | 0 |" in md
    assert "| `cuda.cluster` | pass | FAIL |" in md and "schema mismatch" in md
    assert "## Bad input" in md and "## Large tensors" in md
    assert "cross_entropy" not in md, "a run without the cross_entropy fuzz says nothing of it"


def test_the_cross_entropy_fuzz_has_its_own_section(tmp_path):
    data = {"environment": {"commit": "abc123", "gpu": "NVIDIA H100", "date": "2026-11-27"},
            "sections": list(trust.SECTIONS),
            "fuzz_cross_entropy": {"op": "cross_entropy", "cases": 500, "seed": 0, "per_shape_cases": 200,
                                   "variants": {"cuda.cluster": {"cases": 300, "skipped": 200, "not drawn": 0,
                                                                 "mismatches": []}}}}
    path = tmp_path / "trust.md"
    trust.write_markdown(data, path)
    md = path.read_text()
    assert "## Randomized differential testing: cross_entropy" in md and "targets and options drawn" in md
    assert "| `cuda.cluster` | 300 | 200 | 0 | 0 |" in md


def test_the_loss_entries_citizenship_and_large_tensors_have_their_rows(tmp_path):
    row = "lab.cross_entropy: cuda.cluster (V = 50257)"
    head = "lab.linear_cross_entropy: 3 chunks, cuda.cluster (192 x 50257, K = 256, bias)"
    data = {"environment": {"commit": "abc123", "gpu": "NVIDIA H100", "date": "2026-11-27"},
            "sections": list(trust.SECTIONS),
            "large": {"command": "pytest -k 64bit", "summary": "23 passed", "shapes": "over 2^31", "returncode": 0,
                      "cross_entropy": "lab.cross_entropy through cuda.cluster"},
            "cross_entropy_entry": {row: {"non-default stream": trust.cell(True),
                                          "a target out of range: a clear error": trust.cell(False, "no error")}},
            "linear_cross_entropy_entry": {head: {"eager forward and backward": trust.cell(True)}}}
    path = tmp_path / "trust.md"
    trust.write_markdown(data, path)
    md = path.read_text()
    assert "## lab.cross_entropy through each of its kernels" in md and f"| `{row}` | pass | FAIL |" in md
    assert "## lab.linear_cross_entropy through each of its paths" in md and f"| `{head}` | pass |" in md
    assert "no error" in md and "over 2^31; lab.cross_entropy through cuda.cluster: `pytest -k 64bit`" in md


def test_needs_a_gpu():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "trust.py"), "--out", "/tmp/unused"],
                          capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "",
                                                               "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1 and "trust: needs a GPU" in proc.stderr


def test_parts_of_a_split_run_add_up():
    part = {"seed": 0, "max_elements": 64, "per_shape_cases": 200, "cases": 500, "variants": {
        "cuda.cluster": {"cases": 450, "skipped": 50, "not drawn": 0, "mismatches": []}}}
    other = {**part, "start": 500, "variants": {
        "cuda.cluster": {"cases": 490, "skipped": 10, "not drawn": 0, "mismatches": [{"problem": "x", "repro": "y"}]}}}
    merged = trust.merge_fuzz([part, other])
    assert merged["cases"] == 1000
    assert merged["variants"]["cuda.cluster"] == {"cases": 940, "skipped": 60, "not drawn": 0,
                                                  "mismatches": [{"problem": "x", "repro": "y"}]}
    with pytest.raises(SystemExit):
        trust.merge_fuzz([part, {**other, "seed": 1}])


def test_refuzz_rewrites_the_report_with_a_later_part_and_needs_no_gpu(tmp_path):
    part = {"seed": 0, "start": 0, "max_elements": 64, "per_shape_cases": 200, "cases": 500, "variants": {
        "cuda.cluster": {"cases": 450, "skipped": 50, "not drawn": 0, "mismatches": []}}}
    later = {**part, "start": 500, "asked": 600, "commit": "def456", "variants": {  # stopped before its end
        "cuda.cluster": {"cases": 480, "skipped": 20, "not drawn": 0, "mismatches": []}}}
    data = {"environment": {"commit": "abc", "date": "today", "gpu": "GPU"}, "fuzz": part,
            "large": {"shapes": "s", "command": "c", "summary": "ok"}, "citizenship": {}, "bad_inputs": {}}
    (tmp_path / "trust.json").write_text(json.dumps(data))
    for name, d in (("a.json", part), ("b.json", later)):
        (tmp_path / name).write_text(json.dumps(d))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "trust.py"), "--out", str(tmp_path), "--refuzz",
                           "--fuzz-json", str(tmp_path / "a.json"), str(tmp_path / "b.json")],
                          capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "",
                                                               "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "trust.md").read_text()
    assert "| `cuda.cluster` | 930 | 70 | 0 | 0 |" in md
    assert "cases 500 to 999 at commit `def456` (500 of the 600 asked" in md  # the commit its JSON names
    assert "cases 0 to 499: " in md  # a part that ran to its end, of no commit named, says nothing more
    assert json.loads((tmp_path / "trust.json").read_text())["fuzz"]["cases"] == 1000
    # A cross_entropy part goes to its own section, the softmax one staying as it is.
    (tmp_path / "c.json").write_text(json.dumps({**part, "op": "cross_entropy", "cases": 40}))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "trust.py"), "--out", str(tmp_path), "--refuzz",
                           "--fuzz-json", str(tmp_path / "c.json")],
                          capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "",
                                                               "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "trust.json").read_text())
    assert data["fuzz"]["cases"] == 1000 and data["fuzz_cross_entropy"]["cases"] == 40
    assert "## Randomized differential testing: cross_entropy" in (tmp_path / "trust.md").read_text()
    # A separate sanitizer run, in two files (the driver in parts), becomes section 3, no longer a section not run.
    for name, tool in (("s1.txt", "memcheck"), ("s2.txt", "initcheck")):
        (tmp_path / name).write_text(f"== run commit=165481a\ncompute-sanitizer --tool {tool} (exit 0): ========= "
                                     "ERROR SUMMARY: 0 errors\n  softmax cuda.cluster: ran 4 shape and dtype cases\n")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "trust.py"), "--out", str(tmp_path), "--refuzz",
                           "--fuzz-json", str(tmp_path / "c.json"), "--sanitizer-summary", str(tmp_path / "s1.txt"),
                           str(tmp_path / "s2.txt")],
                          capture_output=True, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "",
                                                               "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    data = json.loads((tmp_path / "trust.json").read_text())
    assert "sanitizers" in data["sections"] and set(data["sanitizers"]["tools"]) == {"memcheck", "initcheck"}
    assert "| initcheck | 0 |" in (tmp_path / "trust.md").read_text()


def test_a_separate_sanitizer_run_is_merged_and_its_errors_count():
    text = ("== Sun Nov 22 mode=sanitize commit=165481a\n== compute-sanitizer\n"
            "compute-sanitizer --tool memcheck (exit 0): ========= ERROR SUMMARY: 0 errors\n"
            "  softmax cuda.cluster: ran 48 shape and dtype cases\n"
            "compute-sanitizer --tool racecheck (exit 0): ========= RACECHECK SUMMARY: 0 hazards displayed "
            "(0 errors, 0 warnings)\n")
    clean = trust.parse_sanitizers(text)
    assert clean["returncode"] == 0 and clean["commit"] == "165481a"
    assert {t: r["errors"] for t, r in clean["tools"].items()} == {"memcheck": 0, "racecheck": 0}
    dirty = trust.parse_sanitizers(text.replace("SUMMARY: 0 errors", "SUMMARY: 3 errors"))
    assert dirty["returncode"] == 1 and dirty["tools"]["memcheck"]["errors"] == 3
    assert trust.parse_sanitizers("nothing here")["returncode"] == 1


def test_sanitizer_runs_in_parts_add_up_per_tool_and_keep_what_each_ran(tmp_path):
    """The driver split over several processes a tool (--op): each run's errors count towards its tool, each run
    keeps the driver's lines of what it ran, the report shows them, and parts of different commits are refused."""
    def part(tool: str, errors: int, section: str) -> str:
        return (f"== header commit=165481a\ncompute-sanitizer --tool {tool} (exit {int(errors > 0)}): ========= ERROR "
                f"SUMMARY: {errors} errors\n  {section}: ran 126 shape and dtype cases\nexit 0\n")

    text = "\n".join([part("memcheck", 0, "softmax cuda.cluster"), part("memcheck", 2, "vector_add cuda.grid_stride"),
                      part("initcheck", 0, "softmax cuda.auto")
                      + "  linear_cross_entropy: not run under initcheck (it does not see cuBLAS's stores)\n"])
    data = trust.parse_sanitizers(text)
    assert data["returncode"] == 1 and data["commit"] == "165481a"
    assert data["tools"]["memcheck"] == {"exit": 1, "errors": 2, "summary": "2 errors in 2 runs"}
    assert data["tools"]["initcheck"]["errors"] == 0
    assert [r["ran"] for r in data["runs"]] == [["softmax cuda.cluster: ran 126 shape and dtype cases"],
                                                ["vector_add cuda.grid_stride: ran 126 shape and dtype cases"],
                                                ["softmax cuda.auto: ran 126 shape and dtype cases",
                                                 "linear_cross_entropy: not run under initcheck (it does not see "
                                                 "cuBLAS's stores)"]]
    trust.write_markdown({"environment": {"commit": "abc", "date": "today", "gpu": "GPU"},
                          "sanitizers": {**data, "separate": True}}, tmp_path / "trust.md")
    md = (tmp_path / "trust.md").read_text()
    assert "at commit `165481a`" in md
    assert "| memcheck | 2 | ========= ERROR SUMMARY: 2 errors | vector_add cuda.grid_stride: ran 126" in md
    with pytest.raises(SystemExit, match="several commits"):
        trust.parse_sanitizers(text + part("racecheck", 0, "x").replace("165481a", "0000000"))


RACE = ("========= Error: Race reported between Read access at {a}+0xaf0\n"
        "=========     and Write access at {b}+0x2ee0 [156 hazards]\n=========\n")
NVJET = "nvjet_sm90_tss_64x16_64x16_1x1_h_bz_splitK_NNT"


def cublas_only(tmp_path, log: str) -> bool:
    """scripts/sanitize.sh's cublas_only (its racecheck verdict) on a made-up racecheck log."""
    path = tmp_path / "racecheck.log"
    path.write_text(log)
    script = ROOT / "scripts" / "sanitize.sh"
    proc = subprocess.run(["bash", "-c", f'source <(sed -n "/^cublas_only() {{/,/^}}/p" "{script}"); '
                           f'cublas_only "{path}"'], capture_output=True, text=True)
    assert proc.stderr == "", proc.stderr
    return proc.returncode == 0


def test_racecheck_passes_hazards_only_inside_cublas_and_nothing_else(tmp_path):
    summary = "========= RACECHECK SUMMARY: {n} hazards displayed ({n} errors, 0 warnings)\n"
    cublas = RACE.format(a=NVJET, b=NVJET) * 2
    assert cublas_only(tmp_path, cublas + "ran 6 cases\n" + summary.format(n=2))
    lab_kernel = "void lab::<unnamed>::cluster_rows_kernel<float, (int)128>(const float *)"
    assert not cublas_only(tmp_path, cublas + RACE.format(a=NVJET, b=lab_kernel) + summary.format(n=3))
    assert not cublas_only(tmp_path, cublas + summary.format(n=3))  # a counted error not shown as a race
    assert not cublas_only(tmp_path, "========= Internal Sanitizer Error: The Sanitizer failed to handle a hardware "
                           "exception.\n========= Target application returned an error\n" + summary.format(n=1))
    assert not cublas_only(tmp_path, cublas + "========= Target application returned an error\n"
                           + summary.format(n=2))
    assert not cublas_only(tmp_path, summary.format(n=0))  # nothing to excuse: sanitize.sh only asks after a failure
    assert not cublas_only(tmp_path, cublas + "========= Internal Sanitizer Error: The Sanitizer failed to handle a "
                           "hardware exception.\n" + summary.format(n=2))
    one_sided = cublas.replace(f"and Write access at {NVJET}", "and a write elsewhere")  # a format it cannot read
    assert not cublas_only(tmp_path, one_sided + summary.format(n=2))
    # A run with --print-limit 3: 12 errors counted, 3 displayed (inside cuBLAS), 9 not shown to excuse.
    assert not cublas_only(tmp_path, RACE.format(a=NVJET, b=NVJET) * 3
                           + "========= RACECHECK SUMMARY: 3 hazards displayed (12 errors, 0 warnings)\n")
    line = ("compute-sanitizer --tool racecheck (exit 0): 0 hazards in the lab's kernels; ========= RACECHECK SUMMARY: "
            "12 hazards displayed (12 errors, 0 warnings), every one inside cuBLAS's nvjet_* kernels\n")
    summary = line.split(": ", 1)[1].strip()
    assert trust.parse_sanitizers(line) == {"returncode": 0, "tools": {"racecheck": {
        "exit": 0, "summary": summary, "errors": 0}}, "runs": [{
            "tool": "racecheck", "exit": 0, "summary": summary, "errors": 0, "ran": []}]}


def test_a_rerun_replaces_its_variants_counts_and_keeps_the_others(tmp_path):
    """--rerun-json: a part that ran one variant again (lab.fuzz --only at a later commit) replaces that variant's
    counts in its section; the other variants' counts and the earlier part stay, the earlier part no longer naming
    the rerun variant."""
    first = {"op": "linear_cross_entropy", "seed": 0, "start": 70000, "max_elements": 64, "per_shape_cases": 200,
             "cases": 2000, "commit": "abc123", "variants": {
                 "torch.eager": {"cases": 1874, "skipped": 126, "not drawn": 0, "mismatches": []},
                 "torch.compile": {"cases": 0, "skipped": 200, "not drawn": 1800, "mismatches": []}}}
    rerun = {**first, "cases": 200, "commit": "def456", "variants": {
        "torch.compile": {"cases": 41, "skipped": 159, "not drawn": 0, "mismatches": []}}}
    data = {"environment": {"commit": "abc", "date": "today", "gpu": "GPU"},
            "fuzz_linear_cross_entropy": trust.merge_fuzz([first])}
    (tmp_path / "trust.json").write_text(json.dumps(data))
    (tmp_path / "r.json").write_text(json.dumps(rerun))
    command = [sys.executable, str(ROOT / "scripts" / "trust.py"), "--out", str(tmp_path), "--refuzz", "--rerun-json",
               str(tmp_path / "r.json")]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    section = json.loads((tmp_path / "trust.json").read_text())["fuzz_linear_cross_entropy"]
    assert section["variants"]["torch.compile"]["cases"] == 41
    assert section["variants"]["torch.eager"]["cases"] == 1874
    md = (tmp_path / "trust.md").read_text()
    assert "- cases 70000 to 71999 at commit `abc123`: `torch.eager`" in md
    assert "- cases 70000 to 70199 at commit `def456`: `torch.compile`" in md
    assert "| `torch.compile` | 41 | 159 | 0 | 0 |" in md
    proc = subprocess.run(command, capture_output=True, text=True, env=env)  # the same rerun again: the same report
    assert proc.returncode == 0 and (tmp_path / "trust.md").read_text() == md
    (tmp_path / "r.json").write_text(json.dumps({**rerun, "seed": 1}))  # another run's cases: refused
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and "differs from its section" in proc.stderr


def test_a_rerun_of_every_variant_is_the_sections_one_part():
    """A rerun that ran every variant of its section (and one it did not have) leaves no earlier part: the section's
    range and commit are the rerun's, as its report's first line says."""
    first = trust.merge_fuzz([{"seed": 0, "start": 0, "cases": 2000, "commit": "abc123", "variants": {
        "torch.eager": {"cases": 2000, "skipped": 0, "not drawn": 0, "mismatches": []}}}])
    rerun = {"seed": 0, "start": 500, "cases": 100, "asked": 300, "commit": "def456", "variants": {
        "torch.eager": {"cases": 90, "skipped": 10, "not drawn": 0, "mismatches": []},
        "lab.auto": {"cases": 100, "skipped": 0, "not drawn": 0, "mismatches": []}}}
    section = trust.rerun_fuzz(first, rerun)
    assert (section["start"], section["cases"], section["commit"]) == (500, 100, "def456")
    assert list(section["variants"]) == ["torch.eager", "lab.auto"]
    md = "\n".join(trust.fuzz_markdown({**section, "per_shape_cases": 200}))
    assert "100 seeded cases" in md and "- cases 500 to 599 at commit `def456` (100 of the 300 asked" in md
