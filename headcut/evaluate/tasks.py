"""The one place where metrics depend on the model's task (headcut_grader.tasks): grades go to
`evaluate.metrics`, scores to `evaluate.ranking`. Callers pass logits, the pairs and the model's task."""
from __future__ import annotations

import numpy as np

from headcut_grader.data import Pairs
from headcut_grader.errors import UserError
from headcut.evaluate import metrics, ranking
from headcut_grader.tasks import score_values


def check_task(task: str, pairs: Pairs, where: str) -> None:
    """Refuse pairs whose gold does not fit the model's task, in one sentence. Only a Python caller can get here:
    every command and run reads its pairs with the model's task, so the fix names read_pairs' argument."""
    if pairs.task is None or pairs.task == task:
        return
    if task == "score":
        raise UserError(f"{where} is a one-score reranker (task score), but {pairs.source} holds grades; pass pairs "
                        "read with task='score' (a numeric score column), or use a grades model.")
    raise UserError(f"{where} grades (task grades), but {pairs.source} holds scores; pass pairs read with "
                    "task='grades' (a graded column), or use a one-score model.")


def ranking_values(logits: np.ndarray, *, task: str, grades=None, activation: str = "identity") -> np.ndarray:
    """What orders titles: the expected grade of a grades model, the score of a score model."""
    if task == "score":
        return score_values(logits, activation)
    return metrics.expected_grade(logits, grades)


def check_logits(logits, pairs: Pairs, name: str) -> None:
    """`logits` (argument `name`) are an array with one row per pair of `pairs` (was: numpy's broadcast error, or a
    list's AttributeError, from deep in the metrics)."""
    if not isinstance(logits, np.ndarray) or logits.ndim != 2:
        what = f"{logits.ndim}-D array" if isinstance(logits, np.ndarray) else type(logits).__name__
        raise UserError(f"{name} is a {what}; pass a numpy array of shape (pairs, outputs).")
    if len(logits) != len(pairs):
        raise UserError(f"{name} has {len(logits)} rows but {pairs.source} has {len(pairs)} pairs; pass one row of "
                        f"logits per pair.")


def summary(logits: np.ndarray, pairs: Pairs, *, task: str = "grades", activation: str = "identity") -> dict:
    """Point estimates of the task's metrics on labelled `pairs`."""
    groups = pairs.query_groups()
    if task == "score":
        return ranking.score_summary(score_values(logits, activation), pairs.score_array(), groups)
    return metrics.summarize(logits, pairs.label_array(), pairs.grades, groups)


def missing(value: float | None) -> bool:
    """Whether a figure means nothing here: NaN in memory (no labels, or no two titles of one query to order),
    null once written to JSON."""
    return value is None or value != value


# Why a figure a gate reads can be n/a on its pairs (evaluate.metrics.correlation, ranking._share)
NOT_MEASURABLE = {
    "spearman": "the pairs hold one gold value, so there is no order to correlate with",
    "pair_accuracy": "no query has two titles of different gold, so there is no order to judge",
    "agreement": "no query has two titles, so there is no order to keep",
}


def within_limits(figures: dict) -> bool:
    """Whether every measured figure of `figures` (name -> (value, least it may be)) is at least its least, and
    one was measured: a figure n/a on the pairs (`missing`) counts neither as within nor as outside (`unmeasured`
    names it for the report), and a gate none of whose figures was measured judged nothing, so it is not passed."""
    measured = [value >= least for value, least in figures.values() if not missing(value)]
    return bool(measured) and all(measured)


def unmeasured(figures: dict) -> list[str]:
    """The names of the figures of `figures` (name -> value, or (value, ...)) that are n/a on the pairs."""
    return [name for name, v in figures.items() if missing(v[0] if isinstance(v, tuple) else v)]


def unmeasured_words(names: list[str], *, judged: str) -> str:
    """One sentence for a report: which of a gate's figures were not measurable and why, and what it `judged` on."""
    why = "; ".join(f"{name} (n/a: {NOT_MEASURABLE[name]})" for name in names)
    return f"Not measurable on these pairs, so not judged: {why}; judged on {judged}."


def shown(value: float | None, spec: str = ".4f") -> str:
    """A figure as reports print it, or n/a where it is `missing`."""
    return "n/a" if missing(value) else format(value, spec)


def shown_ci(d: dict, spec: str = "+.4f", *, scale: float = 1.0) -> str:
    """A change (`delta`) or a share (`value`) with its CI as reports print it, `value [low, high]`; n/a where it
    means nothing."""
    value = d["delta"] if "delta" in d else d["value"]
    if missing(value):
        return "n/a"
    low, high = (None if v is None else scale * v for v in d["ci"])
    return f"{scale * value:{spec}} [{shown(low, spec)}, {shown(high, spec)}]"


def summary_ci(logits: np.ndarray, pairs: Pairs, *, task: str = "grades", activation: str = "identity",
               iters: int = 1000, seed: int = 0) -> dict:
    """Bootstrap CIs of `summary` (grades: over pairs, NDCG over queries; scores: over queries)."""
    groups = pairs.query_groups()
    if task == "score":
        return ranking.score_bootstrap(score_values(logits, activation), pairs.score_array(), groups, iters=iters,
                                       seed=seed)
    return metrics.bootstrap_ci(logits, pairs.label_array(), pairs.grades, groups=groups, iters=iters, seed=seed)


def paired(logits_new: np.ndarray, logits_ref: np.ndarray, pairs: Pairs, *, task: str = "grades",
           activation: str = "identity", iters: int = 1000, seed: int = 0) -> dict:
    """new - ref of each metric with paired CIs, and agreement (grades: same grade; scores: within-query order
    and top-1); unlabelled pairs give agreement only."""
    if task == "score":
        gold = pairs.score_array() if pairs.task == "score" else None
        return ranking.paired_score_bootstrap(score_values(logits_new, activation),
                                              score_values(logits_ref, activation),
                                              gold, pairs.query_groups(), iters=iters, seed=seed)
    if not pairs.has_labels:
        return {"agreement": {"value": metrics.agreement(logits_new, logits_ref)}}
    return metrics.paired_bootstrap(logits_new, logits_ref, pairs.label_array(), pairs.grades, iters=iters, seed=seed)


def agreement(logits: np.ndarray, reference: np.ndarray, pairs: Pairs) -> float:
    """Agreement with a reference model on `pairs`: the same grade, or for one-score models (one output) the share
    of within-query title pairs ordered the same way (NaN, n/a, when no two titles of one query are told apart by
    the reference: there is no order to keep)."""
    if logits.shape[1] != 1:
        return metrics.agreement(logits, reference)
    return ranking.order_kept(logits[:, 0], reference[:, 0], pairs.query_groups())
