"""What `benchmark` times, declared once: `headcut bench`'s --batch-sizes, --seq-lens and --repeats and a run
recipe's [bench] batch, seq_len and repeats read these ranges. Torch-free, so the command line and a recipe read them
without importing the benchmark."""
from __future__ import annotations

from dataclasses import dataclass

from headcut_grader.ranges import BATCH, SEQ_LEN, THREADS, check_ranges, range_field, ranged


@dataclass(frozen=True)
class BenchSettings:
    batch_sizes: tuple[int, ...] = range_field((1, 8, 32), BATCH)
    seq_lens: tuple[int, ...] = range_field((32, 64, 128), SEQ_LEN)
    # the toolkit's threads: `headcut bench` and `headcut export` --threads, a run's [export] and [bench] threads and
    # build_grader's default read this (the runtime's own default is 1: a server or grade job runs several workers)
    threads: int = range_field(2, THREADS)
    warmup: int = ranged(2, 0, 1000)  # untimed runs per variant and cell before the timed ones
    repeats: int = ranged(10, 1, 10_000)  # timed runs per variant and cell; p50/p95 come from these

    def __post_init__(self):
        check_ranges(self, "BenchSettings")
