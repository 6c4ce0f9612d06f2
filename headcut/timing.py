"""Timing several models or runtimes in one process on a shared machine: the one timer of headcut.

Variants take turns in short blocks: each block wakes its runtime with one untimed call, then times a
few calls in a row. Turns keep outside load fair to all (it hits every variant in every round), and
blocks keep the runtimes from timing each other: PyTorch's OpenMP threads and ONNX Runtime's pool spin
for a while after each call, so alternating call by call made every variant pay for its neighbour's
spinning. Measured with benchmarks/deploy_bench.py on the Home Depot graders (16 variants, b32 x s64),
before and after this change: the bottom-3 INT8 grader ran 2.32x the PyTorch teacher's speed when the
variants alternated call by call, 4.18x in blocks.
"""
from __future__ import annotations

import time
from typing import Callable


def round_robin(runs: list[Callable[[dict], object]], batch: dict | None, *, warmup: int = 2, repeats: int = 10,
                block: int = 5, min_seconds: float = 0.0) -> list[list[float]]:
    """Seconds per call of each `run(batch)`: `warmup` untimed calls each, then rounds of up to `block`
    consecutive timed calls per variant (each block after one untimed call), until every variant has
    `repeats` timed calls and `min_seconds` of timed calls."""
    for run in runs:
        for _ in range(warmup):
            run(batch)
    times = [[] for _ in runs]

    def wanted(t: list[float]) -> int:
        return min(block, repeats - len(t)) if sum(t) >= min_seconds else block

    r = 0
    while any(wanted(t) > 0 for t in times):
        order = list(range(len(runs)))
        order = order[r % len(runs):] + order[: r % len(runs)]  # rotate who goes first
        for i in order:
            n = wanted(times[i])
            if n <= 0:
                continue
            runs[i](batch)  # wake this runtime's threads; not timed
            for _ in range(n):
                start = time.perf_counter()
                runs[i](batch)
                times[i].append(time.perf_counter() - start)
        r += 1
    return times
