"""The INT8 gate: how far an INT8 graph may move from its fp32 graph and still ship. Its limits are declared
here once, with their ranges; `headcut export`'s flags and a run recipe's export section read them."""
from __future__ import annotations

from dataclasses import dataclass

from headcut_grader.ranges import ranged


# Fewest pairs the gate judges a precision on: below it one pair moves agreement by 5 points and a quantised
# graph's drift cannot show (a run's export.rows has the same floor).
MIN_GATE_PAIRS = 20


@dataclass(frozen=True)
class Int8Gate:
    min_agreement: float = ranged(0.97, 0.0, 1.0)
    max_spearman_drift: float = ranged(0.005, 0.0, 2.0)
    max_drop: float = ranged(1.0, 0.0, 100.0)  # accuracy points
    # The alternative to an INT8 graph is the fp32 one, so that is the yardstick: a recipe slower than the
    # default INT8 (timing noise, or fp32 nodes kept) still beats shipping fp32 when it is clearly faster.
    min_speed_vs_fp32: float = ranged(1.15, 0.0)
    # A pair's grade must not depend on its neighbours: 0.01 expected grade allows float rounding between
    # kernels of different batch shapes (fp32 and fixed-scale INT8 show 0 here), not per-batch scales (0.2-0.4).
    max_batch_drift: float = ranged(0.01, 0.0)

    def passes(self, trial) -> bool:
        """Whether an Int8Trial (headcut.export.quantize) is within every limit."""
        return (trial.agreement >= self.min_agreement and abs(trial.spearman_drift) <= self.max_spearman_drift
                and trial.accuracy_drop <= self.max_drop and trial.speed_vs_fp32 >= self.min_speed_vs_fp32
                and trial.batch_drift <= self.max_batch_drift)
