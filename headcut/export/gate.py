"""The INT8 gate: how far an INT8 graph may move from its fp32 graph and still ship. Its limits are declared
here once, with their ranges; `headcut export`'s flags and a run recipe's export section read them; and how an
export's messages name its settings for each of those callers."""
from __future__ import annotations

from dataclasses import dataclass

from headcut_grader import errors
from headcut_grader.errors import setting
from headcut_grader.ranges import SEQ_LEN, THREADS, Range, range_field, ranged

# build_grader's numeric arguments, declared once: `headcut export`'s --opset and --threads read them here
ARGUMENTS = {"opset": Range(14, 20), "threads": THREADS, "max_length": SEQ_LEN}


# Fewest pairs the gate judges a precision on: below it one pair moves agreement by 5 points and a quantised
# graph's drift cannot show (a run's export.rows has the same floor).
MIN_GATE_PAIRS = 20


GATE_LIMITS = ("min_agreement", "max_spearman_drift", "max_drop")  # what `headcut export` and a recipe set
# where a caller spells a setting otherwise than NAME, export.NAME or --NAME (headcut_grader.errors.named)
SPELLED = {
    "arguments": {"data": "pairs", "int8": "int8=True", "model": "loaded", **{g: f"gate.{g}" for g in GATE_LIMITS}},
    # a run exports the stage's model into a folder of its own (named by its path alone) on pairs it chose (named by
    # their file alone), export.rows of them
    "keys": {"data": "", "limit": "export.rows", "model": "", "out": ""},
}


def named(name: str, names: str = "arguments") -> str:
    """Export setting `name` as a message names it for whoever called build_grader: "arguments" its own
    (precision), "keys" a run recipe's (export.precision) or "flags" `headcut export`'s (--precision)."""
    return errors.named(name, names, section="export", spelled=SPELLED)


def int8_said(names: str) -> str:
    """How a caller asks for INT8: int8=True, --int8, or a recipe's export.precision=int8, its key named as any other
    (a --set export.precision=int8 by that --set)."""
    return setting(named("precision", names), "int8") if names == "keys" else named("int8", names)


def more_pairs(names: str) -> str:
    """How a caller asks for more pairs: a larger --limit or export.rows (a Python caller passes them)."""
    return "more pairs" if names == "arguments" else f"more pairs (a larger {named('limit', names)})"


def labelled_pairs(names: str) -> str:
    """How a caller passes labelled pairs."""
    return "pairs=read_pairs(FILE)" if names == "arguments" else setting(named("data", names), "FILE")


def gate_fix(names: str, *, int8: bool) -> str:
    """What a caller whose graph failed the gate can do: ship fp32, or relax the gate."""
    fp32 = f"drop {int8_said(names)}" if int8 else f"export {setting(named('precision', names), 'fp32')}"
    return f"{fp32}, or relax {'/'.join(named(g, names) for g in GATE_LIMITS)}"


# How much a grader may lose against the one it is judged by, as the metric's scale bounds it: accuracy is a
# percentage, so at most 100 points; Spearman lies in [-1, 1], so it moves by at most 2. The INT8 gate (against
# the fp32 graph) and a run's floor (pipeline.recipe.FloorSection, against the teacher) read these.
ACCURACY_LOSS = Range(0.0, 100.0)
SPEARMAN_LOSS = Range(0.0, 2.0)


@dataclass(frozen=True)
class Int8Gate:
    min_agreement: float = ranged(0.97, 0.0, 1.0)
    max_spearman_drift: float = range_field(0.005, SPEARMAN_LOSS)
    max_drop: float = range_field(1.0, ACCURACY_LOSS)  # accuracy points
    # The alternative to an INT8 graph is the fp32 one, so that is the yardstick: a recipe slower than the
    # default INT8 (timing noise, or fp32 nodes kept) still beats shipping fp32 when it is clearly faster.
    min_speed_vs_fp32: float = ranged(1.15, 0.0)
    # A pair's grade must not depend on its neighbours: 0.01 expected grade allows float rounding between
    # kernels of different batch shapes (fp32 and fixed-scale INT8 show 0 here), not per-batch scales (0.2-0.4).
    max_batch_drift: float = ranged(0.01, 0.0)

    def passes(self, trial) -> bool:
        """Whether an Int8Trial (headcut.export.quantize) is within every limit; its quality figures that the pairs
        cannot measure (trial.not_measured) are judged by neither side (evaluate.tasks.within_limits)."""
        from headcut.evaluate.tasks import within_limits

        quality = {"agreement": (trial.agreement, self.min_agreement),
                   "spearman": (-abs(trial.spearman_drift), -self.max_spearman_drift),
                   "accuracy": (-trial.accuracy_drop, -self.max_drop)}
        return (within_limits(quality) and trial.speed_vs_fp32 >= self.min_speed_vs_fp32
                and trial.batch_drift <= self.max_batch_drift)
