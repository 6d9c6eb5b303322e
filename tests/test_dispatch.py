"""cuda.auto's dispatch table (lab/dispatch.py, csrc/softmax/dispatch/auto.cu): built from results, installed
into the extension, looked up per (dtype, N, M), rebuilt by the script from the committed results."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab import dispatch, explain, tabulate
from lab.backends import cuda_variants
from lab.env import ROOT

COMMITTED = dispatch.committed_tables()  # lab/tables/<gpu>.json


def committed_run(table: Path) -> Path:
    """The committed lab run a product table was written from: results/<gpu>/softmax/results.json."""
    return ROOT / "results" / table.stem / "softmax" / "results.json"


def record(variant: str, gbps: float, n: int, m: int, dtype: str = "float32", status: str = "ok") -> dict:
    return {"backend": variant.split(".")[0], "variant": variant, "status": status, "gbps": gbps, "dtype": dtype,
            "n": n, "m": m}


def timed(variant: str, gbps: float, n: int, ms: float) -> dict:
    """A record of 4096 rows with its median time (the Triton host-time rules read it)."""
    return {**record(variant, gbps, n, 4096), "median_ms": ms}


RECORDS = [
    record("cuda.register_cached", 4000, 1024, 65536), record("cuda.cluster", 3000, 1024, 65536),
    record("cuda.register_cached", 3000, 65536, 1024), record("cuda.cluster", 3900, 65536, 1024),
    record("cuda.cluster", 3000, 65536, 4096), record("cuda.online", 3950, 65536, 4096),
    record("cuda.auto", 9999, 65536, 4096),  # auto itself never enters its own table
    record("triton.fused", 9999, 1024, 65536),  # nor another backend (the op runs CUDA kernels)
    record("cuda.three_pass", 9999, 1024, 65536, status="failed"),
]


def test_build_table_keeps_the_fastest_cuda_variant_per_point():
    table = tabulate.build_table(RECORDS, "NVIDIA H200", "test")
    assert table["entries"] == {"float32": [[1024, 65536, "register_cached", 4000], [65536, 1024, "cluster", 3900],
                                            [65536, 4096, "online", 3950]]}


def test_a_variant_whose_limits_depend_on_m_never_enters_the_table():
    """cuda.grid_split's row limit depends on M (G = SMs / M CTAs per row): an entry measured at 8 rows would
    also cover 4096 rows, which it refuses. The next fastest CUDA variant takes the point."""
    records = [*RECORDS, record("cuda.grid_split", 9999, 65536, 1024), record("cuda.grid_split", 9999, 524288, 8),
               record("cuda.cluster", 1500, 524288, 8)]
    entries = tabulate.build_table(records, "NVIDIA H200", "test")["entries"]["float32"]
    assert [65536, 1024, "cluster", 3900] in entries and [524288, 8, "cluster", 1500] in entries
    assert not any(e[2] == "grid_split" for e in entries)


@pytest.fixture
def installed_extension():
    pytest.importorskip("lab._C", reason="lab._C is not built")
    from lab.backends.cuda_variants import load_extension

    load_extension()
    yield
    dispatch.uninstall(dispatch.current_gpu())  # no table for this model (the C++ one and lab_entries), then
    dispatch.install_committed()  # the committed ones again


@pytest.mark.parametrize(("m", "n", "expected"), [
    (10, 1000, "register_cached"),  # the next longer measured N, its only M
    (100, 4096, "cluster"),  # N = 65536's smallest M covers 100 rows
    (1024, 65536, "cluster"),
    (2000, 65536, "online"),  # more rows than 1024: the next larger measured M
    (10**6, 65536, "online"),  # more rows than any measured M: the largest
])
def test_lookup(installed_extension, m, n, expected):
    dispatch.install(tabulate.build_table(RECORDS, dispatch.current_gpu(), "test"))
    assert list(torch.ops.lab_tune.auto_choice(m, n, torch.float32)) == [expected, "table", ""]


def test_default_rule_outside_the_table(installed_extension):
    dispatch.install(tabulate.build_table(RECORDS, dispatch.current_gpu(), "test"))
    assert torch.ops.lab_tune.auto_choice(5, 70000, torch.float32)[1] == "default rule"  # longer than any entry
    assert list(torch.ops.lab_tune.auto_choice(5, 100, torch.bfloat16)) == ["register_cached", "default rule", ""]


def test_odd_rows_rule(installed_extension):
    """Ragged rows (aligned=False: a contiguous input of odd N) where the table names cluster: auto takes
    register_cached instead where register_cached holds the row (N <= its limit) and either takes it on the table
    entry below N's (its whole packs fit there: 2^k + 1), or cluster would stream it, or the rows are 16-bit, N is
    within a pack of the end of its entry in cluster's aligned table (2^k - 1) and the rows are many (128 or more);
    aligned rows keep the table's choice."""
    cluster_everywhere = [record("cuda.cluster", 3000, n, 4096, dtype) for n in (1024, 16384, 65536)
                          for dtype in ("float32", "bfloat16")]
    dispatch.install(tabulate.build_table(cluster_everywhere, dispatch.current_gpu(), "test"))
    limit = cuda_variants.CUDA_VARIANTS["register_cached"].max_n
    seen = set()
    for dtype in (torch.float32, torch.bfloat16):
        for n in [*range(1001, 65536, 1000), 1025, 2049, 4095, 4097, 8191, 8193, 16383, 32767, 65535]:
            for m in (8, 4096):
                pack = dispatch.pack_elements(dtype)
                shifted = list(torch.ops.lab_tune.cluster_plan(n, dtype, m, False))
                own, longest = (list(torch.ops.lab_tune.cluster_plan(k, dtype, m))[:2] for k in (n, n + pack - 1))
                entry_cols, peeled = torch.ops.lab_tune.register_cached_ragged(n, dtype)
                if n > limit:
                    why = ""
                elif peeled and entry_cols < n:
                    why = "entry below N"
                elif shifted[0] < 0:
                    why = "cluster streams"
                elif own != longest and m >= 128 and dtype != torch.float32:
                    why = "cluster crosses an entry"
                else:
                    why = ""
                expected = ["register_cached" if why else "cluster", "table", why]
                assert list(torch.ops.lab_tune.auto_choice(m, n, dtype, False)) == expected, f"{dtype} {m}x{n}"
                assert list(torch.ops.lab_tune.auto_choice(m, n, dtype)) == ["cluster", "table", ""]
                seen.add(why)
    assert {"", "entry below N", "cluster crosses an entry"} <= seen, seen


def test_tiles_rule(installed_extension):
    """Contiguous ragged rows (aligned=False: N not a multiple of a pack) where the table names register_cached: auto
    takes tiled_rows instead for float32 rows of at most 64 elements and 131072 rows or more, and for 16-bit rows of
    at most 32 elements and 32768 rows or more, or of 33 to 64 and 131072 or more; aligned rows, longer rows and fewer
    rows keep the table's choice."""
    table = [record("cuda.register_cached", 3000, n, m, dtype) for n in (32, 64, 128) for m in (4096, 1048576)
             for dtype in ("float32", "bfloat16", "float16")]
    dispatch.install(tabulate.build_table(table, dispatch.current_gpu(), "test"))
    seen = set()
    # (longest N, fewest rows) of each tier, shortest rows first
    tiers = {torch.float32: ((64, 131072),), torch.bfloat16: ((32, 32768), (64, 131072)),
             torch.float16: ((32, 32768), (64, 131072))}
    for dtype, rule in tiers.items():
        pack = dispatch.pack_elements(dtype)
        for n in range(1, 129):
            fewest = next((rows for longest, rows in rule if n <= longest), None)
            for m in (1, 32767, 32768, 131071, 131072, 1048576):
                ragged = n % pack != 0
                tiled = ragged and fewest is not None and m >= fewest
                expected = ["tiled_rows", "table", "short rows in tiles"] if tiled else ["register_cached", "table", ""]
                assert list(torch.ops.lab_tune.auto_choice(m, n, dtype, not ragged)) == expected, f"{dtype} {m}x{n}"
                assert list(torch.ops.lab_tune.auto_choice(m, n, dtype, True)) == ["register_cached", "table", ""]
                seen.add((dtype, tiled))
    assert seen == {(dtype, tiled) for dtype in tiers for tiled in (True, False)}
    text = "\n".join(explain.explain(1048576, 63, torch.float32))
    assert "cuda.tiled_rows (table, then the tiles rule)" in text and "tiles rule: rows of 63 elements" in text, text


def test_explain_says_how_full_a_cluster_slice_is(installed_extension):
    """--explain where the table names cluster: its launch (shape, CTAs per row) and how full each CTA's slice is,
    from the launcher's own plan (torch.ops.lab_tune.cluster_plan)."""
    table = [record("cuda.cluster", 3000, n, 4096) for n in (16384, 32768, 65536)]
    dispatch.install(tabulate.build_table(table, dispatch.current_gpu(), "test"))
    shapes = cuda_variants.cluster_shapes()
    for n in (20480, 32768, 40000):
        text = "\n".join(explain.explain(4096, n, torch.float32))
        shape, cluster, *_ = torch.ops.lab_tune.cluster_plan(n, torch.float32, 4096)
        held = shapes[shape].threads * shapes[shape].elems
        per_cta = -(-n // cluster)
        assert f"cluster: {cluster} CTA(s) per row of {shapes[shape].threads} threads" in text, text
        assert f"each CTA's slice: {per_cta} of the {held} elements its threads hold " \
               f"({100 * per_cta / held:.0f}% full: " in text, text
    text = "\n".join(explain.explain(4096, 20480, torch.float32))  # 640 packs over 128 threads: 5 each
    assert f"of each thread's {shapes[torch.ops.lab_tune.cluster_plan(20480, torch.float32, 4096)[0]].elems // 4} " \
           "packs" in text and "full: 5 of each" in text, text


def test_explain_says_how_odd_rows_are_taken(installed_extension):
    """--explain on odd N where the table names cluster: the odd-rows rule and its reason up to register_cached's
    limit; past it, cluster's own plan for the shifted rows."""
    table = [record("cuda.cluster", 3000, n, 4096, "bfloat16") for n in (8192, 16384, 65536)]
    dispatch.install(tabulate.build_table(table, dispatch.current_gpu(), "test"))
    said = set()
    for m, n in ((4096, 8193), (4096, 16383), (8, 16383), (4096, 65535)):
        text = "\n".join(explain.explain(m, n, torch.bfloat16))
        why = torch.ops.lab_tune.auto_choice(m, n, torch.bfloat16, False)[2]
        shifted = list(torch.ops.lab_tune.cluster_plan(n, torch.bfloat16, m, False))
        if why:
            phrase = {"entry below N": "below N's", "cluster streams": "read them twice",
                      "cluster crosses an entry": "within a pack of the end of its entry"}[why]
            assert "then the odd-rows rule" in text and phrase in text, text
            said.add(why)
        elif shifted[0] >= 0:
            assert "by cluster's table for such rows" in text and f"cluster: {shifted[1]} CTA(s)" in text, text
            said.add("cluster's own plan")
    assert {"entry below N", "cluster crosses an entry", "cluster's own plan"} <= said, said


def test_malformed_table_is_refused(installed_extension):
    with pytest.raises(RuntimeError, match="no CUDA variant named 'nonesuch'"):
        torch.ops.lab_tune.set_auto_table("X", ["nonesuch"], [0, 1024, 1, 0])
    with pytest.raises(RuntimeError, match="quadruples"):
        torch.ops.lab_tune.set_auto_table("X", ["online"], [0, 1024, 1])


def test_the_backward_entries_keep_the_fastest_cuda_or_triton_backward_per_point():
    """A table's backward_entries, from a run of softmax_backward: the fastest of the lab's CUDA and Triton
    backwards at each point (a Triton one only past the CUDA one by more than the timing's resolution), which the
    softmax entries' gradients then take."""
    records = [{**record("cuda.cluster", 4000, 65536, 1024), "op": "softmax_backward"},
               {**record("cuda.two_pass", 2500, 65536, 1024), "op": "softmax_backward"},
               {**timed("triton.fused", 3900, 4096, 0.1), "op": "softmax_backward"},
               {**timed("cuda.cluster", 3890, 4096, 0.1), "op": "softmax_backward"},
               {**timed("triton.fused", 3000, 8192, 0.1), "op": "softmax_backward"},
               {**timed("cuda.cluster", 2000, 8192, 0.2), "op": "softmax_backward"},
               {**record("torch.softmax_backward", 9999, 8192, 4096), "op": "softmax_backward"},  # not the lab's
               record("cuda.register_cached", 9999, 65536, 1024)]  # a softmax forward's record
    entries = tabulate.build_backward_entries(records)
    assert entries == {"float32": [[4096, 4096, "cuda.cluster", 3890], [8192, 4096, "triton.fused", 3000],
                                   [65536, 1024, "cuda.cluster", 4000]]}
    gpu = "Some GPU"
    dispatch.install_backward(gpu, entries)
    try:
        assert [dispatch.backward_choice(m, n, torch.float32, gpu=gpu) for m, n in
                ((4096, 100), (4096, 8000), (10**6, 65536), (1, 10**6))] == [
            "cuda.cluster", "triton.fused", "cuda.cluster", None]
        assert dispatch.backward_choice(4096, 100, torch.bfloat16, gpu=gpu) is None
        # where the kernel changes for few rows: cluster to 4096, triton to 8192, cluster beyond, none past 65536
        assert dispatch.backward_switch_lengths(3, gpu=gpu) == [4096, 8192, 65536]
        assert dispatch.backward_switch_lengths(3, gpu="A model without a table") == []
    finally:
        dispatch.install_backward(gpu, {})


def test_a_table_applies_to_its_gpu_model_only(installed_extension):
    torch.ops.lab_tune.set_auto_table(dispatch.current_gpu(), [], [])
    dispatch.install(tabulate.build_table(RECORDS, "Some Other GPU", "test"))
    assert torch.ops.lab_tune.auto_choice(10, 1000, torch.float32)[1] == "default rule"


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_committed_table_is_what_the_script_builds_from_the_committed_results(path, tmp_path):
    """Each table of lab/tables/ is exactly what scripts/make_dispatch_table.py writes from the committed run
    of its GPU model (its default destination is that table)."""
    out = tmp_path / "table.json"
    backward = ["--backward", str(committed_run(path).parents[1] / "softmax_backward" / "results.json")]
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "make_dispatch_table.py"),
                           str(committed_run(path)), *(backward if "backward_entries" in dispatch.load(path) else []),
                           "-o", str(out)],
                          capture_output=True, text=True, env={"PYTHONPATH": str(ROOT), "PATH": ""}, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text()) == dispatch.load(path), "hand-edited or stale table"
    assert dispatch.table_path(dispatch.load(path)["gpu"]) == path


def test_the_product_reads_nothing_under_results(tmp_path):
    """`import lab` installs the tables, and lab.softmax's routes and --explain read them, from lab/tables/ alone:
    a Python audit hook sees every file the process opens, and none is under results/."""
    code = """
import sys
opened = []
sys.addaudithook(lambda event, args: opened.append(str(args[0])) if event == "open" and args else None)
import torch
import lab
from lab import dispatch
for gpu in dispatch.committed_models():
    dispatch.lab_choice(4096, 1000, torch.float32, gpu=gpu)
    dispatch.load(dispatch.table_path(gpu))
print("\\n".join(p for p in opened if isinstance(p, str)))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = str(ROOT / "results")
    assert not [p for p in proc.stdout.splitlines() if p.startswith(results)], proc.stdout
    assert any(p.startswith(str(dispatch.TABLES)) for p in proc.stdout.splitlines()), "the tables were read"


def test_lab_entries_take_the_fastest_cuda_or_triton_variant_never_a_peer_or_torch():
    records = [*RECORDS, record("torch.softmax", 99999, 65536, 1024), record("peer.quack", 99999, 65536, 1024),
               record("lab.auto", 99999, 65536, 1024)]
    table = tabulate.build_table(records, "NVIDIA H200", "test")
    assert table["lab_entries"] == {"float32": [
        [1024, 65536, "triton.fused", 9999], [65536, 1024, "cuda.cluster", 3900], [65536, 4096, "cuda.online", 3950]]}


def test_a_triton_variant_takes_a_lab_entry_only_beyond_the_margin_over_cuda():
    """Within 1% of the fastest CUDA variant, or 0.2 us on a short kernel, the CUDA one keeps the entry:
    lab.softmax's Triton route costs more host time per call."""
    records = [timed("cuda.register_cached", 1000, 512, 0.0091), timed("triton.multirow", 1012, 512, 0.0090),
               timed("cuda.cluster", 3970, 65536, 1.0), timed("triton.looped", 4000, 65536, 0.9925),
               timed("cuda.online", 3900, 131072, 1.0), timed("triton.looped", 4000, 131072, 0.975)]
    entries = tabulate.build_table(records, "NVIDIA H200", "test")["lab_entries"]["float32"]
    assert [e[2] for e in entries] == ["cuda.register_cached", "cuda.cluster", "triton.looped"]


def test_a_triton_kernel_shorter_than_its_routes_host_time_yields_to_cuda():
    """Twice as fast, but shorter than a call's host time on the Triton route: the CUDA variant keeps
    the entry; the same lead on a kernel longer than that takes it."""
    short = tabulate.TRITON_HOST_MS / 2
    records = [timed("cuda.register_cached", 1000, 4096, 2 * short), timed("triton.multirow", 2000, 4096, short),
               timed("cuda.cluster", 1000, 8192, 4 * short), timed("triton.multirow", 2000, 8192, 2 * short)]
    table = tabulate.build_table(records, "NVIDIA H200", "test")
    assert [e[2] for e in table["lab_entries"]["float32"]] == ["cuda.register_cached", "triton.multirow"]
    (yielded,) = table["lab_yields"]["float32"]  # the table says which Triton variant left which shape
    assert yielded[:4] == [4096, 4096, "triton.multirow", 2000] and "TRITON_HOST_MS" in yielded[4]


def test_explain_says_why_a_faster_triton_variant_left_the_shape_to_cuda(installed_extension):
    short = tabulate.TRITON_HOST_MS / 2
    records = [timed("cuda.register_cached", 1000, 4096, 2 * short), timed("triton.multirow", 2000, 4096, short),
               timed("cuda.register_cached", 1000, 512, 2 * short), timed("triton.multirow", 1005, 512, short)]
    dispatch.install(tabulate.build_table(records, dispatch.current_gpu(), "test"))
    lines = explain.explain(4096, 3000, torch.float32)
    assert any(line.strip().startswith("triton.multirow measured 2000") and "TRITON_HOST_MS" in line for line in lines)
    lines = explain.explain(100, 500, torch.float32)  # within the margin: the other reason
    assert any("triton.multirow measured 1005" in line and "within 1%" in line for line in lines)
    assert not [line for line in explain.explain(100, 5000, torch.float32) if "there, faster" in line]  # no entry


@pytest.mark.parametrize(("m", "n"), [(m, n) for m in (1, 100, 1024, 2000, 10**6) for n in (1, 1000, 1024, 4096,
                                                                                            65536, 65537)])
def test_the_python_rule_is_the_extensions(installed_extension, m, n):
    """lab.softmax looks its entries up with the rule torch.ops.lab.softmax's C++ applies to its own."""
    table = tabulate.build_table(RECORDS, dispatch.current_gpu(), "test")
    dispatch.install(table)
    variant, source, _ = torch.ops.lab_tune.auto_choice(m, n, torch.float32)
    python = dispatch.choose(table["entries"]["float32"], m, n)
    assert (python, source) == ((variant, "table") if python else (python, "default rule"))


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_the_extension_reads_each_committed_table_as_python_does(installed_extension, path):
    """Every entry of a committed table, at its own (M, N) and on both sides of its bounds, in every dtype:
    the C++ lookup (torch.ops.lab_tune.auto_choice) names the variant the Python rule does. (Its loop
    once ran over a copy of the table that died with the loop and read the entry it kept from freed
    memory: on the H200 it named cluster for float32 2097152x32, whose entry says register_cached.)"""
    table = json.loads(path.read_text())
    table["gpu"] = dispatch.current_gpu()
    dispatch.install(table)
    checked = 0
    for dtype_label, entries in table["entries"].items():
        dtype = getattr(torch, dtype_label)
        points = {(m + dm, n + dn) for n, m, _, _ in entries for dm in (-1, 0, 1) for dn in (-1, 0, 1) if m + dm >= 1}
        for m, n in sorted(points):
            variant, source, _ = torch.ops.lab_tune.auto_choice(m, n, dtype)
            python = dispatch.choose(entries, m, n)
            assert (variant, source) == ((python, "table") if python else (variant, "default rule")), \
                f"{dtype_label} {m}x{n}: the extension chose {variant} ({source}), the table says {python}"
            checked += 1
    assert checked > 100


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_explain_for_another_gpu_model(installed_extension, path):
    """--explain --gpu MODEL on any machine (CI's has no GPU): each committed table's own entries as that model
    would take them, with the table named; past its longest row, the default rule for the compute capability its
    run recorded (cluster from sm_90, where this machine's own rule, with no GPU, would say online)."""
    table = json.loads(path.read_text())
    model = table["gpu"]
    cc = json.loads(committed_run(path).read_text())["environment"]["compute_capability"]
    major = int(cc.split(".")[0])
    assert explain.table_major(path) == major
    for dtype_label, entries in table["entries"].items():
        dtype = getattr(torch, dtype_label)
        for n, m, variant, _ in entries[:: max(1, len(entries) // 6)]:
            lines = explain.explain(m, n, dtype, model)
            assert lines[0].startswith(f"auto for {m}x{n} {dtype_label}: cuda.{variant} (table"), lines
            assert any(line.startswith(f"  table: {path.relative_to(ROOT)}") for line in lines), lines
        past = max(e[0] for e in entries) * 2
        expected, _, _ = torch.ops.lab_tune.auto_choice(4, past, dtype, True, model, major)
        assert expected == ("cluster" if major >= 9 else "online")  # the default rule's long rows (auto.cu)
        lines = explain.explain(4, past, dtype, model)
        assert lines[0] == f"auto for 4x{past} {dtype_label}: cuda.{expected} (default rule)", lines


def test_explain_for_a_model_below_sm90(installed_extension, tmp_path, monkeypatch):
    """A table measured below sm_90, shipped without its run (a package's lab/tables/ copy): no entry names cluster,
    so past its rows the default rule for such a GPU applies (online), whatever GPU this machine has or lacks."""
    below = [r for r in RECORDS if r["variant"] != "cuda.cluster"]  # cluster does not run below sm_90
    table = tabulate.build_table(below, "Test GPU below sm_90", "test")
    assert not any(e[2] == "cluster" for es in table["entries"].values() for e in es)
    path = tmp_path / "tables" / "test.json"
    tabulate.save(table, path)
    monkeypatch.setattr(dispatch, "committed_tables", lambda: [path])
    dispatch.install(table)
    try:
        assert explain.table_major(path) == 0
        past = max(e[0] for e in table["entries"]["float32"]) * 4
        lines = explain.explain(4, past, torch.float32, "Test GPU below sm_90")
        assert lines[0] == f"auto for 4x{past} float32: cuda.online (default rule)", lines
    finally:
        dispatch.uninstall("Test GPU below sm_90")


def test_auto_choice_takes_a_model_and_its_capability_together(installed_extension):
    """auto_choice's gpu and major go together: either alone would silently read this machine's device."""
    with pytest.raises(RuntimeError, match="gpu and major go together"):
        torch.ops.lab_tune.auto_choice(4, 2**22, torch.bfloat16, True, "NVIDIA H200")
    with pytest.raises(RuntimeError, match="gpu and major go together"):
        torch.ops.lab_tune.auto_choice(4, 2**22, torch.bfloat16, True, "", 9)


def test_explain_for_another_gpu_model_on_the_command_line(installed_extension, capsys):
    """python -m lab.test --explain MxN --gpu MODEL: the model's committed table; a model without one is refused with
    the list of those that have one, and --gpu without --explain is an error."""
    from lab import test as lab_test

    models = dispatch.committed_models()
    model = sorted(models)[0]
    entries = dispatch.load(models[model])["entries"]["bfloat16"]
    n, m, variant, _ = entries[len(entries) // 2]
    assert lab_test.main(["--explain", f"{m}x{n}", "--gpu", model, "-d", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert f"on {model}, by its committed table" in out and f"auto for {m}x{n} bfloat16: cuda.{variant} (table" in out
    slug = dispatch.gpu_slug(model)  # the model's folder name under results/ names it too
    assert lab_test.main(["--explain", f"{m}x{n}", "--gpu", slug.upper(), "-d", "bfloat16"]) == 0
    assert f"on {model}, by its committed table" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        lab_test.main(["--explain", "4096x20480", "--gpu", "NVIDIA Nonesuch"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "no committed table for that model" in err and model in err and slug in err, err
    with pytest.raises(SystemExit) as e:
        lab_test.main(["--gpu", model])
    assert e.value.code == 2 and "--gpu goes with --explain" in capsys.readouterr().err


def test_lab_softmax_routes_to_the_triton_entry_its_table_names(installed_extension, monkeypatch):
    """A Triton choice calls that variant's entry (lab.ops.TRITON_SOFTMAX; differentiable, like the op); a CUDA
    choice, or none, calls torch.ops.lab.softmax, which picks the CUDA variant itself; a Triton variant the
    product does not know warns and takes torch.ops.lab.softmax."""
    import importlib

    import lab
    from lab.ops import TRITON_SOFTMAX

    monkeypatch.setattr(lab, "_TRITON_KERNELS", {})  # the kernels earlier calls found stay out of it
    choices = {1000: "triton.fused", 5000: "cuda.cluster", 6000: "triton.nonesuch"}
    monkeypatch.setattr(dispatch, "lab_choice", lambda m, n, dtype, device=0: choices.get(n))
    module, function = TRITON_SOFTMAX["triton.fused"]
    assert lab.route(torch.empty(100, 1000, device="meta")) is getattr(importlib.import_module(module), function)
    assert lab.route(torch.empty(100, 5000, device="meta")) is torch.ops.lab.softmax
    assert lab.route(torch.empty(100, 7, device="meta")) is torch.ops.lab.softmax
    with pytest.warns(RuntimeWarning, match="names triton.nonesuch, which cannot run here"):
        assert lab.route(torch.empty(100, 6000, device="meta")) is torch.ops.lab.softmax


def test_the_products_triton_entries_are_the_registered_ones():
    """lab.ops.TRITON_SOFTMAX (what lab.softmax can route to) and the registry's Triton softmax variants are one
    list: every registered one is routable, none routable is unregistered."""
    from lab.ops import TRITON_SOFTMAX
    from lab.registry import variants

    assert sorted(TRITON_SOFTMAX) == sorted(v.name for v in variants("softmax", backends=["triton"]))


def test_lab_softmax_refuses_cpu_tensors():
    import lab

    with pytest.raises(ValueError, match="lab.softmax: expected a CUDA tensor, got one on cpu"):
        lab.softmax(torch.randn(2, 3))
    with pytest.raises(TypeError, match="expected float32, float16 or bfloat16"):
        lab.softmax(torch.ones(2, 3, dtype=torch.int32, device="meta"))


def test_lab_softmax_refuses_a_dim_out_of_range():
    """As torch.softmax does (it raises IndexError); a wrapped dim would silently reduce another one."""
    import lab

    for shape, dim in (((2, 3), 2), ((2, 3), -3), ((4,), 1), ((), 1)):
        with pytest.raises(IndexError, match=f"lab.softmax: dim {dim} is out of range"):
            lab.softmax(torch.ones(shape, device="meta"), dim)


def test_lab_softmax_calls_the_op_under_torch_compile(installed_extension, monkeypatch):
    """While Dynamo traces, lab.softmax asks no table (M may be symbolic there): torch.ops.lab.softmax
    chooses in C++ at run time."""
    import lab

    monkeypatch.setattr(dispatch, "lab_choice", lambda *a: pytest.fail("lab_choice asked while compiling"))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert lab.route(torch.empty(100, 1000, device="meta")) is torch.ops.lab.softmax


def test_lab_softmax_falls_back_from_a_triton_choice_that_cannot_run(installed_extension, monkeypatch):
    import lab

    monkeypatch.setattr(lab, "_TRITON_KERNELS", {})
    monkeypatch.setattr(dispatch, "lab_choice", lambda *a: "triton.no_such_kernel")
    with pytest.warns(RuntimeWarning, match="names triton.no_such_kernel, which cannot run here"):
        assert lab.route(torch.empty(100, 1000, device="meta")) is torch.ops.lab.softmax
    assert lab.route(torch.empty(100, 1000, device="meta")) is torch.ops.lab.softmax  # remembered: no warning


def test_lab_softmax_rows_trace_in_one_graph_as_m_changes(installed_extension, monkeypatch):
    """Dynamo traces lab.softmax's call on its rows as one graph, also once the row count is symbolic
    (the second and third calls), where the table names a Triton kernel for the shape: meta tensors, so
    that it runs without a GPU (the op's fake kernel)."""
    import lab

    monkeypatch.setattr(dispatch, "lab_choice", lambda m, n, dtype, device=0: "triton.fused")  # a table's choice
    torch._dynamo.reset()
    f = torch.compile(lab._call, backend="eager", fullgraph=True)
    for m in (512, 1024, 2048):
        y = f(torch.empty(m, 1000, device="meta"))
        assert y.shape == (m, 1000) and y.device.type == "meta"
