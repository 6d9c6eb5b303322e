"""lab.measure.time_point: a point's variants checked, then timed with the copy in interleaved rounds; a variant
with a `prepare` (auto) prepared from a selection pass of the others, whose timings the dispatch table
is built from. Runs on the CPU with torch kernels standing in for variants."""

import pytest
import torch

from lab import bench, inputs, measure, tabulate
from lab import test as lab_test
from lab.operators.softmax import SOFTMAX
from lab.registry import Traffic, Variant, variants

ARGS = lab_test.parse_args(["--no-save", "--rep", "4", "--rounds", "2"])
SHAPE = inputs.Shape(8, 100)


def variant(name: str, fn, prepare=None, writes_out: bool = False) -> measure.Runnable:
    return measure.Runnable(Variant(op="softmax", name=name, backend="torch", description=name, build=lambda: fn,
                                     traffic=Traffic(1, 1), runs_on_cpu=True, prepare=prepare,
                                     writes_out=writes_out))


def softmax_into(x, out):
    return out.copy_(torch.softmax(x, -1))


def run(runnable, args=ARGS, results=None):
    case = SOFTMAX.make_inputs(SHAPE, torch.float32, torch.device("cpu"), 0)
    ref = SOFTMAX.reference(*case)
    return measure.time_point(SOFTMAX, runnable, "cpu", SHAPE, case, ref, torch.device("cpu"), args, results or [])


def test_auto_is_prepared_from_a_selection_pass_then_timed_with_the_others():
    seen: list = []

    def prepare(results):
        seen.extend((r.variant, r.status, r.selection_gbps, r.gbps) for r in results)

    plain = [variant("torch.a", lambda x: torch.softmax(x, -1)),
             variant("torch.b", softmax_into, writes_out=True)]
    auto = variant("torch.auto_like", lambda x: torch.softmax(x, -1), prepare=prepare)
    earlier = run(plain)  # a point before, without a prepared variant: no selection pass
    assert all(r.status == "ok" and r.selection_gbps is None for r in earlier)
    point = run([plain[0], auto, plain[1]], results=earlier)
    assert [r.variant for r in point] == ["torch.a", "torch.auto_like", "torch.b"]  # the runnable order
    # prepare saw the earlier point as timed, and this point's others checked and selected, not yet timed
    assert [s[:2] for s in seen] == [("torch.a", "ok"), ("torch.b", "ok"), ("torch.a", "checked"),
                                     ("torch.b", "checked")]
    assert all(s[2] > 0 and s[3] is None for s in seen[2:])
    by_name = {r.variant: r for r in point}
    assert all(r.status == "ok" and r.gbps > 0 and "2 interleaved rounds" in r.timing for r in point)
    assert by_name["torch.auto_like"].selection_gbps is None  # timed only in the rounds
    assert by_name["torch.a"].selection_gbps > 0 and by_name["torch.b"].selection_ms > 0
    assert point[0].copy_gbps > 0 and len({r.copy_gbps for r in point}) == 1  # one copy, timed in the same rounds


def test_a_variant_that_fails_its_check_is_neither_selected_nor_timed():
    seen: list = []
    wrong = variant("torch.wrong", lambda x: torch.softmax(x, -1) * 1.5)
    auto = variant("torch.auto_like", lambda x: torch.softmax(x, -1),
                   prepare=lambda rs: seen.extend(r.status for r in rs))
    point = run([wrong, variant("torch.a", lambda x: torch.softmax(x, -1)), auto])
    assert point[0].status == "failed" and point[0].gbps is None and point[0].selection_gbps is None
    assert seen == ["failed", "checked"]
    assert point[1].status == point[2].status == "ok"


def test_check_only_times_nothing():
    args = lab_test.parse_args(["--no-save", "--check-only"])
    point = run([variant("torch.a", lambda x: torch.softmax(x, -1)),
                 variant("torch.auto_like", lambda x: torch.softmax(x, -1), prepare=lambda rs: None)], args=args)
    assert all(r.status == "checked" and r.gbps is None and r.selection_gbps is None for r in point)


def test_the_table_is_built_from_the_selection_pass():
    """A variant that wins the reported rounds but lost the selection keeps its numbers in the results, and
    the table names the variant that the selection chose (the one auto ran)."""
    base = {"backend": "cuda", "status": "ok", "dtype": "float32", "n": 1024, "m": 4096}
    results = [{**base, "variant": "cuda.cluster", "gbps": 3900, "selection_gbps": 3800, "median_ms": 0.1},
               {**base, "variant": "cuda.register_cached", "gbps": 3850, "selection_gbps": 3870, "median_ms": 0.1}]
    table = tabulate.build_table(results, "GPU", "test")
    assert table["entries"]["float32"] == [[1024, 4096, "register_cached", 3870.0]]
    no_pass = [{k: v for k, v in r.items() if k != "selection_gbps"} for r in results]
    assert tabulate.build_table(no_pass, "GPU", "test")["entries"]["float32"][0][2] == "cluster"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_variants_write_to_one_block_on_a_gpu():
    """Each variant given an output gets one per call from the caching allocator (bench.timed_call), so that
    it writes where the one before it wrote, and where the operator's baseline, which allocates its own, does."""
    case = SOFTMAX.make_inputs(inputs.Shape(256, 1000), torch.float32, torch.device("cuda"), 0)
    names = [v.name for v in variants("softmax") if v.writes_out or v.name == SOFTMAX.baseline]
    addresses = {}
    for v in variants("softmax"):
        if v.name not in names or v.unavailable_on("cuda") or v.skip_reason(inputs.Shape(256, 1000), torch.float32):
            continue
        y = bench.timed_call(v.kernel(), case, v.writes_out, lambda: torch.empty_like(case[0]))()
        addresses[v.name] = y.data_ptr()
        del y
    assert len(addresses) > 2 and len(set(addresses.values())) == 1, addresses


def test_an_operator_built_on_matmuls_is_timed_against_its_matmuls(monkeypatch):
    """linear_cross_entropy's point: its variants timed with its three matmuls (the ceiling) in the same rounds, in
    TFLOP/s and the ceiling's share of their time, no GB/s; a variant that runs out of GPU memory is skipped with the
    reason, not failed."""
    from lab.operators import get

    op = get("linear_cross_entropy")
    shape = inputs.Shape(32, 96, None, 24)
    case = op.make_inputs(shape, torch.float32, torch.device("cpu"), 0)
    eager = measure.Runnable(next(v for v in variants(op.name) if v.name == op.baseline))

    def out_of_memory(*inputs):
        raise torch.OutOfMemoryError("CUDA out of memory (a stand-in)")

    big = measure.Runnable(Variant(op=op.name, name="torch.too_big", backend="torch", description="",
                                   build=lambda: out_of_memory, runs_on_cpu=True))
    monkeypatch.setattr(measure, "out_of_memory", lambda device: measure.OUT_OF_MEMORY)  # no GPU to ask what is free
    point = measure.time_point(op, [eager, big], "cpu", shape, case, op.reference(*case), torch.device("cpu"), ARGS,
                               [])
    r = point[0]
    assert r.status == "ok" and r.gbps is None and r.copy_gbps is None and r.k == 24
    assert r.tflops == pytest.approx(op.flops(shape) / r.median_ms / 1e9) and r.ceiling_ms > 0
    assert r.pct_ceiling == pytest.approx(100 * r.ceiling_ms / r.median_ms)
    assert point[1].status == "skipped" and point[1].reason.startswith(measure.OUT_OF_MEMORY)
