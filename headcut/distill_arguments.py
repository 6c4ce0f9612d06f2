"""The numeric arguments of distillation's search, declared once: `tune` checks its trials here and `headcut distill
--tune` bounds its flag with the same range. Torch-free, so the command line reads it without importing the trainer."""
from __future__ import annotations

from headcut_grader.ranges import Range

TRIALS = Range(1, 10_000)  # trials of one search (`tune` trials, `headcut distill --tune`, where 0 trains once)
