"""What `benchmark` times, declared once: `headcut bench`'s --batch-sizes, --seq-lens and --repeats and a run
recipe's [bench] batch, seq_len and repeats read these ranges. Torch-free, so the command line and a recipe read them
without importing the benchmark."""
from __future__ import annotations

from dataclasses import dataclass

from headcut_grader.ranges import (BATCH, REPEATS, SEQ_LEN, THREADS, WARMUP, check_settings, check_timed_batch,
                                   range_field)


@dataclass(frozen=True)
class BenchSettings:
    batch_sizes: tuple[int, ...] = range_field((1, 8, 32), BATCH)
    seq_lens: tuple[int, ...] = range_field((32, 64, 128), SEQ_LEN)
    # the toolkit's threads: `headcut bench` and `headcut export` --threads and a run's [export] and [bench] threads
    # read this; build_grader writes the same number, which a test holds to it. The runtime's API defaults to
    # ranges.RUNTIME_THREADS (1), and headcut-grader's grade and serve --threads to the cores over the workers
    threads: int = range_field(2, THREADS)
    warmup: int = range_field(2, WARMUP)  # untimed runs per variant and cell before the timed ones
    repeats: int = range_field(10, REPEATS)  # timed runs per variant and cell; p50/p95 come from these

    def __post_init__(self):
        check_settings(self)  # a Python caller's: headcut bench and a run recipe check their flags and keys first
        check_timed_batch(max(self.batch_sizes), max(self.seq_lens), flags="BenchSettings(batch_sizes, seq_lens)")
