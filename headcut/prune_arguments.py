"""The numeric arguments of pruning, declared once: the library's `prune` and `prune_to_budget` check them, `headcut
prune` bounds its flags and a run recipe its [prune] keys with the same ranges; and how a prune's messages name an
argument for each of those callers. Torch-free, so the command line reads them without importing the pruner."""
from __future__ import annotations

from headcut_grader import errors
from headcut_grader.ranges import BATCH, SEQ_LEN, Range

SHARE = Range(0.0, 1.0, low_open=True)  # of the heads, FLOPs or latency to keep
# The batch size --latency is timed at (`headcut prune --batch`; prune_to_budget's and budget_of's latency_batch and
# prune.latency.measure_layer_costs' batch, which write it as a number for the API reference; a test checks them)
LATENCY_BATCH = 32

# name: (range, whole number, None allowed)
ARGUMENTS = {
    "keep_ratio": (SHARE, False, False), "flops": (SHARE, False, True), "latency": (SHARE, False, True),
    "layer_prior": (Range(0.0, 100.0), False, False), "min_heads": (Range(0), True, False),
    "iterative": (Range(0, 100), True, False),  # each step re-scores: time
    "seq_len": (SEQ_LEN, True, True),  # headcut bench --seq-lens' range: the same timing of a batch
    "latency_batch": (BATCH, True, False),  # headcut bench --batch-sizes' range: the same timing of a batch
    # timed seconds per model and batch size: PruneSettings.latency_seconds and --latency-seconds; measure_latency's
    # min_seconds reads it closed at 0 (no time is a median of min_runs alone, which the setting does not offer)
    "latency_seconds": (Range(0.0, 600.0, low_open=True), False, False),
    # the pairs a prune samples (PruneSettings' score_rows, calibrate_rows, eval_rows; --score-rows, --calibrate,
    # --eval-rows; a run's prune.score_rows and prune.calibrate): None is all of them
    "score_rows": (Range(1), True, True), "eval_rows": (Range(1), True, True),
    "calibrate_rows": (Range(5, 100_000), True, True),  # every fifth held out to check the fit: at least one
}


def argument_range(name: str) -> Range:
    """The range of pruning argument `name`."""
    return ARGUMENTS[name][0]


# where a caller spells an argument otherwise than NAME, prune.NAME or --NAME (headcut_grader.errors.named); no_tune
# and no_drop_layers: how each caller turns that step off (save_cross_encoder reads no_drop_layers for arch.widen)
SPELLED = {
    "arguments": {"model": "loaded", "no_tune": "tune=False", "calibrate": "settings.calibrate_rows",
                  "no_drop_layers": "drop_layers=False"},
    # a run prunes its teacher, by its scan's score file (named by its path alone) or on data.train
    "keys": {"data": "data.train", "model": "teacher.path", "no_tune": "prune.tune=false",
             "no_drop_layers": "prune.drop_layers=false", "scores": ""},
    "flags": {"latency_batch": "--batch"},
}


def named(name: str, names: str = "arguments") -> str:
    """Pruning argument `name` as a message names it for whoever called the prune: "arguments" the library's own
    (keep_ratio), "keys" a run recipe's (prune.keep_ratio, as --set writes it) or "flags" `headcut prune`'s
    (--keep-ratio); headcut_grader.errors.setting(named(...), value) words it with its value."""
    return errors.named(name, names, section="prune", spelled=SPELLED)
