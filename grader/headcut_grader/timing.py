"""Timing several models or runtimes in one process on a shared machine: the one timer of headcut.

Variants take turns in short blocks: each block wakes its runtime with one untimed call, then times a
few calls in a row. Turns keep outside load fair to all (it hits every variant in every round), and
blocks keep the runtimes from timing each other: PyTorch's OpenMP threads and ONNX Runtime's pool spin
for a while after each call, so alternating call by call made every variant pay for its neighbour's
spinning. Measured with benchmarks/deploy_bench.py on the Home Depot graders (16 variants, b32 x s64),
before and after this change: the bottom-3 INT8 grader ran 2.32x the PyTorch teacher's speed when the
variants alternated call by call, 4.18x in blocks.

Each call is timed on two clocks: wall time, and this process's CPU time (all its threads). Other jobs
on the machine stretch the first more than the second, but not only the first: benchmarks/scan_speed.py
measured the naive scan's CPU time at 138 s on quiet cores and 315 s beside another job (contended
caches and spinning thread pools), so neither clock makes a shared machine quiet; report both.
"""
from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from typing import Callable


# (models, one batch of inputs, timed seconds per model) -> median milliseconds per call of each model
Timer = Callable[[list, dict, float], "list[float]"]


@dataclass(frozen=True)
class Runtime:
    """Where models are timed: `name` labels results and caches, `version` says which build, `timer` times."""

    name: str
    version: str
    timer: Timer


@dataclass(frozen=True)
class Clocks:
    """One timed call: wall seconds and this process's CPU seconds (all threads)."""

    wall: float
    cpu: float


def round_robin(runs: list[Callable[[dict], object]], batch: dict | None, *, warmup: int = 2, repeats: int = 10,
                block: int = 5, min_seconds: float = 0.0, wake: bool = True) -> list[list[float]]:
    """Wall seconds per call of each `run(batch)` (see `round_robin_clocks`)."""
    return [[c.wall for c in t] for t in round_robin_clocks(runs, batch, warmup=warmup, repeats=repeats, block=block,
                                                             min_seconds=min_seconds, wake=wake)]


def round_robin_clocks(runs: list[Callable[[dict], object]], batch: dict | None, *, warmup: int = 2,
                       repeats: int = 10, block: int = 5, min_seconds: float = 0.0,
                       wake: bool = True) -> list[list[Clocks]]:
    """Wall and CPU seconds per call of each `run(batch)`: `warmup` untimed calls each, then rounds of up
    to `block` consecutive timed calls per variant (each block after one untimed call unless `wake` is
    False: a call of seconds needs no waking), until every variant has `repeats` timed calls and
    `min_seconds` of timed wall time."""
    for run in runs:
        for _ in range(warmup):
            run(batch)
    times: list[list[Clocks]] = [[] for _ in runs]

    def wanted(t: list[Clocks]) -> int:
        return min(block, repeats - len(t)) if sum(c.wall for c in t) >= min_seconds else block

    r = 0
    while any(wanted(t) > 0 for t in times):
        order = list(range(len(runs)))
        order = order[r % len(runs):] + order[: r % len(runs)]  # rotate who goes first
        for i in order:
            n = wanted(times[i])
            if n <= 0:
                continue
            if wake:
                runs[i](batch)  # wake this runtime's threads; not timed
            for _ in range(n):
                start, cpu = time.perf_counter(), time.process_time()
                runs[i](batch)
                times[i].append(Clocks(time.perf_counter() - start, time.process_time() - cpu))
        r += 1
    return times


@dataclass(frozen=True)
class Cpu:
    """The processor a time was measured on: model name and feature flags (from /proc/cpuinfo where there is one)."""

    model: str
    flags: frozenset[str]


def cpu_info() -> Cpu:
    model, flags = platform.processor() or platform.machine(), frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() in ("flags", "Features"):  # x86, ARM
                    flags = frozenset(value.split())
    except OSError:
        pass
    return Cpu(model, flags)
