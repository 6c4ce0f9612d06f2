"""Metrics for graders, with bootstrap confidence intervals.

Accuracy alone hides whether a grader learned (a majority-grade model scores 43% on Home Depot), so
every summary carries macro-F1, Spearman of the expected grade, loss and NDCG@10 too.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import spearmanr

from headcut.evaluate_arguments import argument_range
from headcut_grader.ranges import Range, checked_number


def check_resampling(iters, seed, where: str) -> tuple[int, int]:
    """A bootstrap's `iters` (the range --bootstrap and a recipe's bootstrap keys take, evaluate_arguments.RESAMPLES)
    and `seed` as plain ints, else UserError naming the public function `where` (numpy's own errors name neither:
    'index -1 is out of bounds' for iters=0)."""
    return (checked_number(iters, f"{where} iters", argument_range("iters"), whole=True),
            checked_number(seed, f"{where} seed", argument_range("seed"), whole=True))


def check_level(level, where: str) -> float:
    """A CI's `level` as a plain float strictly between 0 and 1, else UserError naming the public function `where`
    (level=1.5 gave numpy's 'Percentiles must be in the range [0, 100]' after every resample; 0 or 1 a CI of
    nothing)."""
    return checked_number(level, f"{where} level", Range(0, 1, low_open=True, high_open=True))


def softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def expected_grade(logits: np.ndarray, grades) -> np.ndarray:
    """sum_i p_i * grade_i: a continuous relevance score for ranking and Spearman."""
    return softmax(logits) @ np.asarray(grades, dtype=np.float64)


def accuracy(labels, preds) -> float:
    return float(np.mean(np.asarray(labels) == np.asarray(preds)))


def macro_f1(labels, preds, num_labels: int) -> float:
    num_labels = checked_number(num_labels, "macro_f1 num_labels", Range(1), whole=True)  # 0 gave 0.0, no error
    labels, preds = np.asarray(labels), np.asarray(preds)
    f1s = []
    for c in range(num_labels):
        tp = np.sum((preds == c) & (labels == c))
        fp = np.sum((preds == c) & (labels != c))
        fn = np.sum((preds != c) & (labels == c))
        if tp + fp + fn == 0:
            continue  # class absent from both: it neither helps nor hurts
        f1s.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(f1s)) if f1s else 0.0


def one_value(gold) -> bool:
    """Whether `gold` holds fewer than two distinct values: there is then no order for a metric to follow."""
    gold = np.asarray(gold, dtype=np.float64)
    return len(gold) == 0 or bool(np.ptp(gold) == 0)


def correlation(statistic, predicted, gold) -> float:
    """`statistic` (scipy's spearmanr, pearsonr) of `predicted` with `gold`: NaN (n/a) where the gold holds one value
    (nothing to correlate with: a one-pair file measured nothing), 0.0 where only the prediction is constant (a
    constant predictor ranks nothing: what a scan's collapsed model must score)."""
    predicted, gold = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    if one_value(gold):
        return float("nan")
    if predicted.std() == 0:
        return 0.0
    return float(statistic(predicted, gold).statistic)


def spearman(predicted, gold) -> float:
    """Spearman's rho of `predicted` with `gold`; NaN where the gold holds one value (see `correlation`)."""
    return correlation(spearmanr, predicted, gold)


def nll(logits: np.ndarray, labels) -> float:
    """Mean cross-entropy (the loss that ranks heads more cleanly than accuracy)."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-np.mean(logp[np.arange(len(logp)), np.asarray(labels)]))


def ndcg_at_k(scores, labels, groups, *, k: int = 10) -> float:
    """Mean NDCG@k (gain 2^label - 1, labels 0-based) over the queries whose titles hold two or more labels, NaN (n/a)
    where none does: every order of one label is ideal, so such a query's 1.0 would measure nothing. The one rule of
    both tasks' NDCG (ranking.per_query skips the same queries), and of their bootstrap resamples."""
    k = checked_number(k, "ndcg_at_k k", Range(1), whole=True)  # 0 was numpy's AxisError
    scores, labels = np.asarray(scores), np.asarray(labels)
    values = []
    for g in groups:
        if one_value(labels[g]):
            continue
        gains = 2.0 ** labels[g] - 1
        ideal = np.sort(gains)[::-1][:k]
        discounts = 1 / np.log2(np.arange(2, len(ideal) + 2))
        best = float(ideal @ discounts)
        got = gains[np.argsort(-scores[g], kind="stable")][:k]
        values.append(float(got @ discounts[: len(got)]) / best)
    return float(np.mean(values)) if values else float("nan")


def agreement(logits_a: np.ndarray, logits_b: np.ndarray) -> float:
    """Share of pairs given the same grade by both models (1 - flip rate)."""
    return float(np.mean(logits_a.argmax(1) == logits_b.argmax(1)))


def summarize(logits: np.ndarray, labels, grades, groups=None) -> dict:
    """Point estimates of every metric."""
    labels = np.asarray(labels)
    preds = logits.argmax(1)
    out = {
        "accuracy": accuracy(labels, preds),
        "macro_f1": macro_f1(labels, preds, len(grades)),
        "spearman": spearman(expected_grade(logits, grades), labels),
        "loss": nll(logits, labels),
        "n": int(len(labels)),
    }
    if groups is not None:
        out["ndcg@10"] = ndcg_at_k(expected_grade(logits, grades), labels, groups)
        out["queries"] = len(groups)  # NDCG's CI resamples these: n/a on one (by_query)
    return out


METRICS = ("accuracy", "macro_f1", "spearman", "loss")


def percentiles(values, level: float) -> list[float]:
    """The CI of bootstrap `values`, over the resamples where the metric exists (a resample of one gold value has no
    order to correlate with, one of only queries of one gold value none to judge); [NaN, NaN] where none has it."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if not len(values):
        return [float("nan"), float("nan")]
    lo, hi = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    return [float(np.percentile(values, lo)), float(np.percentile(values, hi))]


def by_query(values, level: float, queries: int) -> list[float]:
    """The CI of bootstrap `values` that resample `queries` queries; [NaN, NaN] (n/a) on one query, where every
    resample is that query: its CI would be the point itself, and measures nothing of how a metric varies between
    queries."""
    return percentiles(values, level) if queries > 1 else [float("nan"), float("nan")]


def _metric(name, logits, labels, grades):
    preds = logits.argmax(1)
    if name == "accuracy":
        return accuracy(labels, preds)
    if name == "macro_f1":
        return macro_f1(labels, preds, len(grades))
    if name == "spearman":
        return spearman(expected_grade(logits, grades), labels)
    if name == "loss":
        return nll(logits, labels)
    raise ValueError(name)


def bootstrap_ci(
    logits: np.ndarray, labels, grades, *, groups=None, iters: int = 1000, seed: int = 0, level: float = 0.95
) -> dict:
    """Percentile bootstrap CIs over pairs (NDCG: over queries). Returns {metric: [low, high]}, NaN where a metric is
    n/a; NDCG's on one query too (by_query)."""
    iters, seed = check_resampling(iters, seed, "bootstrap_ci")
    level = check_level(level, "bootstrap_ci")
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    n = len(labels)
    samples = {m: [] for m in METRICS}
    for _ in range(iters):
        idx = rng.integers(0, n, n)
        for m in METRICS:
            samples[m].append(_metric(m, logits[idx], labels[idx], grades))
    out = {m: percentiles(v, level) for m, v in samples.items()}
    if groups is not None:
        scores = expected_grade(logits, grades)
        vals = []
        for _ in range(iters):
            pick = rng.integers(0, len(groups), len(groups))
            vals.append(ndcg_at_k(scores, labels, [groups[i] for i in pick]))
        out["ndcg@10"] = by_query(vals, level, len(groups))
    return out


def paired_bootstrap(
    logits_new: np.ndarray, logits_ref: np.ndarray, labels, grades, *, iters: int = 1000, seed: int = 0,
    level: float = 0.95
) -> dict:
    """Difference new - ref of each metric on the same resampled pairs, with a CI, plus agreement.

    Pairing removes the between-pair noise that dominates unpaired CIs on a few thousand noisy pairs.
    """
    iters, seed = check_resampling(iters, seed, "paired_bootstrap")
    level = check_level(level, "paired_bootstrap")
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    n = len(labels)
    point = {m: _metric(m, logits_new, labels, grades) - _metric(m, logits_ref, labels, grades) for m in METRICS}
    same = logits_new.argmax(1) == logits_ref.argmax(1)
    samples = {m: [] for m in METRICS}
    agree = []
    for _ in range(iters):
        idx = rng.integers(0, n, n)
        for m in METRICS:
            samples[m].append(_metric(m, logits_new[idx], labels[idx], grades)
                              - _metric(m, logits_ref[idx], labels[idx], grades))
        agree.append(same[idx].mean())
    out = {m: {"delta": point[m], "ci": percentiles(samples[m], level)} for m in METRICS}
    out["agreement"] = {"value": float(same.mean()), "ci": percentiles(agree, level)}
    return out
