"""Splitting pairs for training and evaluation without leaking a query across the split."""
from __future__ import annotations

import random

from headcut_grader.pairs import Pairs


def split_by_query(pairs: Pairs, fraction: float, *, seed: int = 0) -> tuple[Pairs, Pairs]:
    """Split so that all pairs of one query land on the same side; `fraction` of queries go first."""
    groups = pairs.query_groups()
    order = list(range(len(groups)))
    random.Random(seed).shuffle(order)
    cut = int(round(fraction * len(groups)))
    first = sorted(i for g in order[:cut] for i in groups[g])
    second = sorted(i for g in order[cut:] for i in groups[g])
    return pairs.subset(first), pairs.subset(second)
