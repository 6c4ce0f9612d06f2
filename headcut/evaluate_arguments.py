"""The numeric arguments of the evaluate API and a scan's settings, declared once: evaluate_model, predict_logits,
compare_models, head_importance and open_scorer check theirs here; ScanSettings' fields, `headcut scan`'s flags and a
run recipe's [scan] keys read their ranges here. Torch-free, so the command line and the recipe read them without
importing the evaluator."""
from __future__ import annotations

from headcut_grader.ranges import BATCH, MAX_BOOTSTRAP, SEED, SEQ_LEN, Range, check_arguments, range_field

# what a reader of a scan's score file asks for (as_path's `what`: read_scores, prune's scores, --scores)
SCORES_FILE = "a scan's importance.json file's path"
RESAMPLES = Range(10, MAX_BOOTSTRAP)  # of a bootstrap CI: below 10 the interval is noise

# name: (range, whole number, None allowed)
ARGUMENTS = {
    "batch_size": (BATCH, True, False),  # pairs per forward pass
    "max_length": (SEQ_LEN, True, True),  # tokens per pair; None: the model's recorded limit
    # a scan's own (ScanSettings' fields)
    "draws": (Range(1, 1000), True, False),  # random masks per ratio: more narrows the CIs, linearly slower
    "k": (Range(1), True, False),  # term-matching heads masked in experiment 5
    "iters": (RESAMPLES, True, False),  # bootstrap resamples for the scan's CIs
    "bootstrap": (RESAMPLES, True, False),  # bootstrap resamples for a report's (paired) 95% CIs
    "seed": (SEED, True, False),
}


# The defaults of the settings above, declared once: the flags (--batch-size, --max-length, --seed, --bootstrap in
# headcut.cli.common; `headcut scan`'s --draws, --k, --bootstrap), ScanSettings, PruneSettings, the scan's experiments
# and a run recipe's [scan] and [bench] keys read them here.
DEFAULTS = {"batch_size": 64, "max_length": None, "seed": 0,  # max_length None: the model's own limit
            "draws": 5, "k": 5, "iters": 200,  # a scan's (ScanSettings')
            "bootstrap": 1000}  # evaluate's, compare's, prune's and a run's bench CIs
# The head probes' own batch_size (evaluate.probes.probe_heads, `headcut probe --batch-size`): a probe pass holds
# every layer's attention maps, so it takes fewer pairs than DEFAULTS' batch_size.
PROBE_BATCH_SIZE = 32


def units_batch_size(batch_size: int) -> int:
    """Pairs per backward pass that scores every FFN neuron beside the heads (evaluate.fisher.unit_fisher, prune's
    score_units, 32 by default): half a forward pass's `batch_size`, since that pass keeps every neuron's mask
    gradient per pair beside the activations."""
    return max(1, batch_size // 2)


def argument_field(name: str):
    """A dataclass field with shared setting `name`'s default (DEFAULTS) and range."""
    return range_field(DEFAULTS[name], argument_range(name))


def argument_range(name: str) -> Range:
    """The range of argument `name`."""
    return ARGUMENTS[name][0]


def checked_arguments(function: str, **given) -> list:
    """`given` arguments of `function` as plain ints, each checked against its ARGUMENTS range; a UserError names
    the function and the argument (a batch size of 0 was Python's 'range() arg 3 must not be zero')."""
    return check_arguments(ARGUMENTS, function, given)
