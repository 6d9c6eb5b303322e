"""scripts/profile_point.py: what it runs for a profiler (its arguments here; the runs are the GPU's)."""


import pytest
import scripts_loader
import torch

profile_point = scripts_loader.load("scripts/profile_point.py")


def test_a_cluster_configuration_is_parsed():
    assert profile_point.cluster_config("cluster:20:16:n") == (20, 16, False)
    assert profile_point.cluster_config("cluster:3:1:p") == (3, 1, True)


@pytest.mark.parametrize("bad", ["cluster:20:16", "cluster:x:16:n", "cluster:20:17:n", "cluster:20:0:p",
                                 "cluster:20:16:q", "clusters:20:16:n"])
def test_a_bad_cluster_configuration_is_refused(bad):
    with pytest.raises(ValueError, match="expected cluster:SHAPE:CLUSTER:p|n"):
        profile_point.cluster_config(bad)
    with pytest.raises(SystemExit, match="profile_point: "):
        profile_point.main([bad, "4x8", "bfloat16"])


def test_an_unknown_variant_is_named():
    with pytest.raises(SystemExit, match="softmax has no variant named 'nope.nothing'"):
        profile_point.main(["nope.nothing", "4x8", "bfloat16"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_cluster_configuration_runs_checked():
    if not hasattr(torch.ops, "lab_tune") or not hasattr(torch.ops.lab_tune, "cluster"):
        pytest.skip("lab._C without the tuning ops")
    assert profile_point.main(["cluster:20:2:n", "8x20000", "bfloat16", "--runs", "1"]) == 0


def test_a_negative_flush_is_refused():
    with pytest.raises(SystemExit, match="--flush-mb must be 0 or more"):
        profile_point.main(["torch.softmax", "4x8", "float32", "--flush-mb", "-1"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_flushed_runs_are_checked():
    assert profile_point.main(["torch.softmax", "64x1000", "float32", "--runs", "2", "--flush-mb", "8"]) == 0


def test_a_cluster_configuration_belongs_to_softmax():
    with pytest.raises(SystemExit, match="runs softmax's cluster kernel"):
        profile_point.main(["cluster:20:2:n", "8x20000", "bfloat16", "--op", "softmax_backward"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_another_operator_runs_on_its_own_inputs_checked():
    """The backward's variants take (y, dy); the runs and the check get both."""
    for variant in (v.name for v in profile_point.variants("softmax_backward") if v.availability() is None):
        assert profile_point.main(["--op", "softmax_backward", variant, "64x1000", "bfloat16", "--runs", "1"]) == 0
