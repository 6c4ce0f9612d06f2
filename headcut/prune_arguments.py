"""The numeric arguments of pruning, declared once: the library's `prune` and `prune_to_budget` check them, `headcut
prune` bounds its flags and a run recipe its [prune] keys with the same ranges. Torch-free, so the command line reads
them without importing the pruner."""
from __future__ import annotations

from headcut_grader.ranges import Range

SHARE = Range(0.0, 1.0, low_open=True)  # of the heads, FLOPs or latency to keep

# name: (range, whole number, None allowed)
ARGUMENTS = {
    "keep_ratio": (SHARE, False, False), "flops": (SHARE, False, True), "latency": (SHARE, False, True),
    "layer_prior": (Range(0.0, 100.0), False, False), "min_heads": (Range(0), True, False),
    "iterative": (Range(0, 100), True, False),  # each step re-scores: time
    "seq_len": (Range(1, 8192), True, True), "latency_batch": (Range(1, 4096), True, False),
}


def argument_range(name: str) -> Range:
    """The range of pruning argument `name`."""
    return ARGUMENTS[name][0]
