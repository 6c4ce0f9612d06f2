"""Timing on a shared machine: contenders take turns run by run, so outside load hits them alike."""
from __future__ import annotations

import time
from typing import Callable


def round_robin(runs: list[Callable[[dict], object]], batch: dict, *, warmup: int = 2, repeats: int = 10) -> list[list[float]]:
    """Seconds per call of each `run(batch)`, after `warmup` untimed calls each, interleaved."""
    for run in runs:
        for _ in range(warmup):
            run(batch)
    times = [[] for _ in runs]
    for _ in range(repeats):
        for run, t in zip(runs, times):
            start = time.perf_counter()
            run(batch)
            t.append(time.perf_counter() - start)
    return times
