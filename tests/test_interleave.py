"""scripts/interleave.py: variants timed in interleaved rounds (GPU only; here its arguments and refusals)."""

import pytest
import scripts_loader
import torch

from lab.registry import variants

interleave = scripts_loader.load("scripts/interleave.py")

SOFTMAX = [v.name for v in variants() if v.op == "softmax"]


def test_unknown_variant_is_named():
    with pytest.raises(SystemExit, match="no softmax variant named nope.nothing"):
        interleave.main(["--variants", f"{SOFTMAX[0]},nope.nothing", "--shape", "4x8"])


@pytest.mark.parametrize("bad", [["--rounds", "0"], ["--reps", "0"], ["--flush-mb", "0"], ["--flush-mb", "1.5"]])
def test_bad_counts_are_refused(bad):
    with pytest.raises(SystemExit, match="interleave: "):
        interleave.main(["--variants", SOFTMAX[0], "--shape", "4x8", *bad])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_refuses_without_a_gpu():
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        interleave.main(["--variants", SOFTMAX[0], "--shape", "4x8"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_times_each_variant_each_round(capsys):
    names = [v.name for v in variants(backends=["torch"]) if v.op == "softmax"][:1] + \
            [v.name for v in variants(backends=["cuda"]) if v.op == "softmax"][:1]
    assert interleave.main(["--variants", ",".join(names), "--shape", "64x100", "--shape", "8x1000",
                            "--dtype", "bfloat16", "--rounds", "2", "--reps", "5", "--flush-mb", "8"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("flush")]
    assert len(lines) == 2 * len(names), lines
    for line in lines:
        assert "median" in line and "host" in line, line  # timed, not skipped or failed


def test_a_per_shape_variant_is_built_for_each_shape():
    """torch.compile's variant compiles one graph per shape (per_shape): checked_calls builds it anew at
    each shape, as the lab does, so a script timing many shapes never reaches Dynamo's recompile limit
    (tune_register_cached.py had torch.compile fail its check at the ninth shape)."""
    from lab.registry import Traffic, Variant

    built = []

    def build():
        built.append(1)
        return lambda x, out=None: torch.softmax(x, -1)

    v = Variant(op="softmax", name="test.per_shape", backend="torch", description="a per-shape build",
                build=build, traffic=Traffic(1, 1), per_shape=True, runs_on_cpu=True)
    for n in (8, 16, 32):
        x = torch.randn(4, n)
        fns, skipped, failed = interleave.checked_calls({v.name: v.kernel()}, {v.name: v}, x,
                                                        torch.softmax(x.double(), -1))
        assert set(fns) == {v.name} and not skipped and not failed
    assert len(built) == 3 + 3  # the test's own v.kernel() at each shape, and checked_calls' build there
