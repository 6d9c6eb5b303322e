"""lab/bench.py: the timing loop, its flush and the host-bound verdict."""

import time

import pytest
import torch

from lab import bench


def test_host_bound_needs_a_host_time_beyond_the_flush_and_the_call():
    assert bench.Timing(0.010, 0.009, 0.011, host_us=100.0, flush_us=50.0).host_bound  # 100 > 50 + 10
    assert not bench.Timing(0.100, 0.09, 0.11, host_us=100.0, flush_us=50.0).host_bound  # 100 < 50 + 100
    assert not bench.Timing(0.010, 0.009, 0.011).host_bound  # not measured: not claimed


def test_the_method_names_the_flush():
    assert "a 1024 MB write" in bench.method(torch.device("cuda"), flush_mb=1024)
    assert bench.method(torch.device("cpu")) == bench.WALL_CLOCK


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_call_slower_on_the_host_than_the_flush_is_host_bound():
    x = torch.randn(64, 64, device="cuda")
    fast = bench.time_gpu(lambda: torch.softmax(x, -1), warmup_ms=2, rep_ms=10, flush_mb=64)
    assert fast.flush_us > 0 and fast.host_us > 0 and not fast.host_bound

    def slow():
        time.sleep(0.002)  # 2 ms of host work before the launch, against a 64 MB flush's tens of microseconds
        return torch.softmax(x, -1)

    t = bench.time_gpu(slow, warmup_ms=2, rep_ms=20, flush_mb=64)
    assert t.host_bound and t.host_us > 1500
    assert t.median_ms > 0.5  # the wait is in the timed median: what host_bound warns of
