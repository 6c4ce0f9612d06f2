"""Timing several runtimes in one process on a shared machine.

Variants take turns in short blocks: each block wakes its runtime with one untimed call, then times a
few calls in a row. Turns keep outside load fair to all (it hits every variant in every round), and
blocks keep the runtimes from timing each other: PyTorch's OpenMP threads and ONNX Runtime's pool spin
for a while after each call, so alternating call by call made every variant pay for its neighbour's
spinning. Measured with benchmarks/deploy_bench.py on the Home Depot graders (16 variants, b32 x s64),
before and after this change: the bottom-3 INT8 grader ran 2.32x the PyTorch teacher's speed when the
variants alternated call by call, 4.18x in blocks.
"""
from __future__ import annotations

import math
import time
from typing import Callable


def round_robin(runs: list[Callable[[dict], object]], batch: dict, *, warmup: int = 2, repeats: int = 10,
                block: int = 5) -> list[list[float]]:
    """Seconds per call of each `run(batch)`: `warmup` untimed calls each, then `repeats` timed calls each,
    in rounds of `block` consecutive calls per variant (each block after one untimed call)."""
    for run in runs:
        for _ in range(warmup):
            run(batch)
    times = [[] for _ in runs]
    rounds = math.ceil(repeats / block)
    for r in range(rounds):
        order = list(range(len(runs)))
        order = order[r % len(runs):] + order[: r % len(runs)]  # rotate who goes first
        for i in order:
            runs[i](batch)  # wake this runtime's threads; not timed
            for _ in range(min(block, repeats - len(times[i]))):
                start = time.perf_counter()
                runs[i](batch)
                times[i].append(time.perf_counter() - start)
    return times
