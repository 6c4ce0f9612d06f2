"""The one timer: variants take turns in blocks, never call by call (headcut/timing.py says why)."""
from __future__ import annotations

import time

from headcut.prune import measure_latency
from headcut.timing import round_robin, round_robin_clocks
from tests.conftest import tiny_model


def runs_of(names, calls):
    return [lambda batch, name=name: calls.append(name) for name in names]


def streaks(calls):
    """Lengths of the runs of consecutive calls to the same variant."""
    out = []
    for i, name in enumerate(calls):
        if i and calls[i - 1] == name:
            out[-1] += 1
        else:
            out.append(1)
    return out


def test_round_robin_times_each_variant_in_blocks_after_one_wake_call():
    calls = []
    times = round_robin(runs_of("ab", calls), {}, warmup=2, repeats=10, block=5)
    assert [len(t) for t in times] == [10, 10]
    # after 2+2 warm-up calls, blocks of 1 untimed + 5 timed; who goes first rotates (a b, then b a)
    assert calls[4:] == ["a"] * 6 + ["b"] * 12 + ["a"] * 6


def test_round_robin_keeps_taking_turns_until_each_variant_has_min_seconds():
    def slow(batch):
        time.sleep(0.002)

    times = round_robin([slow, slow], None, warmup=0, repeats=1, block=2, min_seconds=0.02)
    assert all(sum(t) >= 0.02 and len(t) >= 1 for t in times)


def test_measure_latency_times_models_in_blocks():
    models = [tiny_model("bert"), tiny_model("distilbert")]
    calls = []
    for i, m in enumerate(models):
        m.register_forward_pre_hook(lambda module, args, i=i: calls.append(i))
    rows = measure_latency(models, seq_len=8, batch_sizes=(2,), min_seconds=0.0, min_runs=5, warmup=1)
    assert [r[0]["runs"] for r in rows] == [5, 5]
    assert streaks(calls) == [1, 1, 6, 6]  # one warm-up each, then one block of 1 untimed + 5 timed


def test_round_robin_without_wake_calls_times_every_call_it_makes():
    calls = []
    times = round_robin(runs_of("ab", calls), None, warmup=0, repeats=2, block=1, wake=False)
    assert [len(t) for t in times] == [2, 2]
    assert calls == ["a", "b", "b", "a"]  # one call per block, who goes first rotates


def test_round_robin_clocks_count_this_process_cpu_apart_from_wall_time():
    def sleep(batch):
        time.sleep(0.05)

    def busy(batch):
        start = time.process_time()
        while time.process_time() - start < 0.05:
            pass

    idle, working = round_robin_clocks([sleep, busy], None, warmup=0, repeats=2, block=1, wake=False)
    assert all(c.wall >= 0.05 and c.cpu < 0.02 for c in idle)  # waiting costs wall time, not CPU
    assert all(c.cpu >= 0.05 and c.wall >= c.cpu * 0.5 for c in working)
