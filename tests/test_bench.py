"""lab/bench.py: the timing loop, its flush and the host-bound verdict."""

import time

import pytest
import torch

from lab import bench


def test_host_bound_is_a_call_faster_behind_the_longer_flush():
    assert bench.Timing(0.060, 0.05, 0.07, host_us=75.0, flush_us=57.0, long_flush_ms=0.008).host_bound
    assert not bench.Timing(0.0070, 0.0069, 0.0071, host_us=40.0, flush_us=57.0, long_flush_ms=0.0069).host_bound
    assert not bench.Timing(0.0070, 0.0069, 0.0071, host_us=40.0, flush_us=57.0, long_flush_ms=0.0074).host_bound
    assert not bench.Timing(0.010, 0.009, 0.011, host_us=10.0, flush_us=57.0).host_bound  # not timed again: not claimed


def test_the_method_names_the_flush():
    assert "a 1024 MB write" in bench.method(torch.device("cuda"), flush_mb=1024)
    assert bench.method(torch.device("cpu")) == bench.WALL_CLOCK


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_call_slower_on_the_host_than_the_flush_is_host_bound():
    x = torch.randn(64, 64, device="cuda")
    # do_bench's 256 MB flush (about 60 us of GPU time on an H200) hides a short torch call's host time
    # (about 12 us); a 64 MB one did not: that call then read 17.7 us, 4.6 behind a 256 MB flush.
    fast = bench.time_gpu(lambda: torch.softmax(x, -1), warmup_ms=2, rep_ms=10)
    assert fast.flush_us > 0 and fast.host_us > 0 and not fast.host_bound, fast

    def slow():
        time.sleep(0.0002)  # 200 us of host work before the launch, against a 16 MB flush's few microseconds
        return torch.softmax(x, -1)

    t = bench.time_gpu(slow, warmup_ms=2, rep_ms=20, flush_mb=16)
    assert t.host_us > 150 and t.median_ms > 0.05  # the wait is in the timed median: what host_bound warns of
    assert t.long_flush_ms is not None and t.host_bound, t


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_the_flush_write_is_timed_at_a_bandwidth_a_gpu_can_have():
    """flush_buffer times its write as any call is timed: a write of 64 MB between 100 GB/s and 20 TB/s
    (a time of nothing, or of the wrong thing, falls outside)."""
    buf, us = bench.flush_buffer(64)
    assert buf.numel() * buf.element_size() == 64 * 2**20
    gbps = buf.numel() * buf.element_size() / (us * 1e-6) / 1e9
    assert 100 < gbps < 20000, f"the 64 MB flush write timed at {us:.1f} us: {gbps:.0f} GB/s"
