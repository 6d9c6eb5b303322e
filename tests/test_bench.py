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


def test_rounds_interleave_the_calls_in_a_new_order_every_round():
    ran: list[str] = []
    calls = {name: (lambda name=name: ran.append(name)) for name in "abcd"}

    def sample(fn, count):
        fn()
        return [float(count)]

    samples = bench.interleave(calls, sample, {"a": 1, "b": 2, "c": 3, "d": 4}, rounds=6)
    rounds = ["".join(ran[i:i + 4]) for i in range(0, len(ran), 4)]
    assert len(rounds) == 6 and all(sorted(r) == list("abcd") for r in rounds)  # every call in every round
    assert rounds == ["".join(o) for o in bench.round_orders(list("abcd"), 6)]  # the seeded orders: the same each run
    assert len(set(rounds)) > 3  # new orders, not one order rotated
    before = {name: {r[r.index(name) - 1] for r in rounds if r.index(name) > 0} for name in "abcd"}
    assert all(len(b) >= 2 for b in before.values()), before  # each call behind more than one neighbour
    assert samples == {"a": [1.0] * 6, "b": [2.0] * 6, "c": [3.0] * 6, "d": [4.0] * 6}


def test_time_rounds_on_the_cpu_times_every_call_in_every_round():
    counts = {"slow": 0, "fast": 0}

    def slow():
        counts["slow"] += 1
        time.sleep(0.002)

    def fast():
        counts["fast"] += 1

    t = bench.time_rounds({"slow": slow, "fast": fast}, torch.device("cpu"), rep_ms=20, rounds=3)
    assert set(t) == {"slow", "fast"}
    assert t["slow"].median_ms >= 2.0 > t["fast"].median_ms
    assert t["slow"].p20_ms <= t["slow"].median_ms <= t["slow"].p80_ms
    assert counts["slow"] >= 3 + 2 and counts["fast"] > counts["slow"]  # the warm-up and estimate, then 3 rounds
    with pytest.raises(ValueError, match="rounds must be at least 1"):
        bench.time_rounds({"fast": fast}, torch.device("cpu"), rounds=0)


def test_the_method_names_the_rounds():
    assert bench.method(torch.device("cuda"), rounds=5).endswith("timed in 5 interleaved rounds")
    assert "rounds" not in bench.method(torch.device("cuda"), cudagraph=True, rounds=5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_rounds_on_a_gpu_time_what_a_single_stretch_times():
    """A kernel and a copy of four times the bytes, in rounds: each near its own time_gpu, the copy slower."""
    x = torch.randn(4096, 1024, device="cuda")
    src = torch.empty(4 * x.numel() * 4, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    calls = {"softmax": lambda: torch.softmax(x, -1), "copy": lambda: dst.copy_(src)}
    t = bench.time_rounds(calls, torch.device("cuda"), warmup_ms=5, rep_ms=50)
    alone = bench.time_gpu(calls["softmax"], warmup_ms=5, rep_ms=50)
    assert t["copy"].median_ms > t["softmax"].median_ms
    assert 0.8 < t["softmax"].median_ms / alone.median_ms < 1.25, (t["softmax"], alone)
    assert t["softmax"].host_us > 0 and t["softmax"].flush_us > 0


def test_every_timed_stretch_follows_the_l2_reset(monkeypatch):
    """On a GPU each stretch of a call's timed samples comes right after bench.l2_reset (the same L2 state
    whatever ran before) and a few flushed calls of that same call; nothing else runs between the reset
    and the stretch. The GPU's parts are stood in for here, so that this runs without one."""
    events: list[str] = []

    class Flush:
        def zero_(self):
            events.append("flush")

    def timed_calls(fn, buf, n):
        events.append("stretch")
        fn()  # names the call the stretch times
        return [1.0] * n

    monkeypatch.setattr(bench, "flush_buffer", lambda mb: (Flush(), 60.0))
    monkeypatch.setattr(bench, "_estimate_ms", lambda fn, buf: 1.0)
    monkeypatch.setattr(bench, "l2_reset", lambda buf, calls=bench.RESET_CALLS: events.append("reset"))
    monkeypatch.setattr(bench, "timed_calls", timed_calls)
    calls = {name: (lambda name=name: events.append(name)) for name in "ab"}
    # 60 ms over 3 rounds at 1 ms a call: 20 timed calls a round, after 2 flushed ones
    t = bench._gpu_rounds(calls, warmup_ms=2, rep_ms=60, flush_mb=256, rounds=3, warm=(), host_check=False)
    assert set(t) == {"a", "b"} and t["a"].median_ms == 1.0
    stretches = [i for i, e in enumerate(events) if e == "stretch"]
    assert len(stretches) == 2 * 3 == events.count("reset")
    for i in stretches:
        name = events[i + 1]
        last_reset = max(j for j in range(i) if events[j] == "reset")
        assert events[last_reset + 1:i] == ["flush", name] * 2, events[last_reset + 1:i]


def test_a_single_stretch_takes_the_l2_reset_after_its_warm_up(monkeypatch):
    """time_gpu's loop (the scripts' timing): do_bench's warm-up calls, then bench.l2_reset, then the timed
    calls."""
    events: list[str] = []
    monkeypatch.setattr(bench, "_estimate_ms", lambda fn, buf: 1.0)
    monkeypatch.setattr(bench, "l2_reset", lambda buf, calls=bench.RESET_CALLS: events.append("reset"))
    monkeypatch.setattr(bench, "timed_calls", lambda fn, buf, n: (events.append(f"timed {n}"), [1.0] * n)[1])
    assert bench._loop(lambda: events.append("call"), object(), warmup_ms=3, rep_ms=5) == (1.0, 1.0, 1.0)
    assert events == ["call"] * 3 + ["reset", "timed 5"]
