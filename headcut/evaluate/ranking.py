"""Metrics for one-score models (rerankers), with bootstrap CIs over queries.

A reranker is used to order one query's titles, so its metrics are per query (NDCG@10, MRR, the share of
title pairs ordered as the gold orders them) beside Spearman and Pearson against the gold score over all
pairs. CIs resample queries, not pairs: titles of one query share the query's difficulty, so resampling
pairs would make the intervals too narrow.

Agreement with a teacher is what a reranker's user sees change: `pair_order`, the share of within-query
title pairs the two order the same way (a swapped pair is a swapped result on the page), and `top1`, the
share of queries whose first title stays first (what a single-answer surface shows).
"""
from __future__ import annotations

import numpy as np
from scipy.stats import pearsonr

from headcut.evaluate.metrics import (by_query, check_level, check_resampling, correlation, ndcg_at_k, one_value,
                                      spearman)

METRICS = ("spearman", "pearson", "ndcg@10", "mrr", "pair_accuracy", "loss")
AGREEMENT = ("pair_order", "top1")


def pearson(predicted, gold) -> float:
    """Pearson's r of `predicted` with `gold`; NaN where the gold holds one value (metrics.correlation)."""
    return correlation(pearsonr, predicted, gold)


# Reference scores closer than this are a tie: float32 rounding (another batch's padding, another runtime's
# kernels) splits a tie by about 1e-7, and judging such a pair would judge noise.
TIE = 1e-6


def _order_agreement(scores: np.ndarray, reference: np.ndarray) -> tuple[float, int]:
    """(pairs ordered as `reference` orders them, pairs `reference` orders: apart by more than TIE) within one
    query; a tie in `scores` counts half (a coin flip on the page)."""
    i, j = np.triu_indices(len(scores), k=1)
    ref = np.sign(reference[i] - reference[j])
    got = np.sign(scores[i] - scores[j])
    ordered = np.abs(reference[i] - reference[j]) > TIE
    same = np.where(got[ordered] == 0, 0.5, (got[ordered] == ref[ordered]).astype(np.float64))
    return float(same.sum()), int(ordered.sum())


def _reciprocal_rank(scores: np.ndarray, gold: np.ndarray) -> float:
    """1 / rank of the first title with the query's best gold score."""
    order = np.argsort(-scores, kind="stable")
    return 1.0 / (1 + int(np.flatnonzero(gold[order] == gold.max())[0]))


def per_query(scores, gold, groups) -> dict:
    """Per-query terms `(queries,)` of the ranking metrics; NaN where a query has nothing to rank (one title,
    or all its titles scored alike by the gold)."""
    scores, gold = np.asarray(scores, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    lowest = gold.min() if len(gold) else 0.0
    out = {k: np.full(len(groups), np.nan) for k in ("ndcg@10", "mrr", "same", "pairs")}
    for q, g in enumerate(groups):
        if one_value(gold[g]):  # the rule ndcg_at_k applies to a grades model's queries too
            continue
        out["ndcg@10"][q] = ndcg_at_k(scores[g], gold[g] - lowest, [np.arange(len(g))])  # gain 2^(s - lowest) - 1
        out["mrr"][q] = _reciprocal_rank(scores[g], gold[g])
        out["same"][q], out["pairs"][q] = _order_agreement(scores[g], gold[g])
    return out


def _mean(values: np.ndarray) -> float:
    """The mean of the finite per-query terms; NaN (n/a) where no query has one."""
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if len(finite) else float("nan")


def _share(same: np.ndarray, pairs: np.ndarray) -> float:
    """Pairs ordered alike over pairs judged; NaN (n/a) where no pair was judged."""
    total = np.nansum(pairs)
    return float(np.nansum(same) / total) if total else float("nan")


def _from_terms(terms: dict, pick: np.ndarray) -> dict:
    return {"ndcg@10": _mean(terms["ndcg@10"][pick]), "mrr": _mean(terms["mrr"][pick]),
            "pair_accuracy": _share(terms["same"][pick], terms["pairs"][pick])}


def _rows(groups, pick) -> np.ndarray:
    return np.concatenate([groups[q] for q in pick]) if len(pick) else np.zeros(0, dtype=np.int64)


def score_summary(scores, gold, groups) -> dict:
    """Point estimates: Spearman, Pearson (NaN, n/a, where the gold holds one value) and mean squared error against
    the gold, and the per-query metrics (NaN, n/a, where no query has two titles of different gold);
    `judged_pairs`: how many within-query title pairs of different gold the pair accuracy counts."""
    scores, gold = np.asarray(scores, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    terms = per_query(scores, gold, groups)
    out = {"spearman": spearman(scores, gold), "pearson": pearson(scores, gold),
           "loss": float(np.mean((scores - gold) ** 2)), "n": int(len(gold)), "queries": len(groups),
           "judged_pairs": int(np.nansum(terms["pairs"]))}
    return out | _from_terms(terms, np.arange(len(groups)))


def _resampled(scores, gold, groups, terms, pick) -> dict:
    rows = _rows(groups, pick)
    return {"spearman": spearman(scores[rows], gold[rows]), "pearson": pearson(scores[rows], gold[rows]),
            "loss": float(np.mean((scores[rows] - gold[rows]) ** 2))} | _from_terms(terms, pick)


def score_bootstrap(scores, gold, groups, *, iters: int = 1000, seed: int = 0, level: float = 0.95) -> dict:
    """Percentile CIs of every score metric, resampling queries: {metric: [low, high]}; n/a on one query
    (metrics.by_query)."""
    iters, seed = check_resampling(iters, seed, "score_bootstrap")
    level = check_level(level, "score_bootstrap")
    scores, gold = np.asarray(scores, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    rng = np.random.default_rng(seed)
    terms = per_query(scores, gold, groups)
    samples = [_resampled(scores, gold, groups, terms, rng.integers(0, len(groups), len(groups))) for _ in range(iters)]
    return {m: by_query([s[m] for s in samples], level, len(groups)) for m in METRICS}


def ranking_agreement(scores, reference, groups) -> dict:
    """Per-query agreement terms of `scores` with a `reference` model: pair order and the top-1 title."""
    scores, reference = np.asarray(scores, dtype=np.float64), np.asarray(reference, dtype=np.float64)
    out = {k: np.full(len(groups), np.nan) for k in ("same", "pairs", "top1")}
    for q, g in enumerate(groups):
        if len(g) < 2:
            continue
        out["same"][q], out["pairs"][q] = _order_agreement(scores[g], reference[g])
        out["top1"][q] = float(np.argmax(scores[g]) == np.argmax(reference[g]))
    return out


def order_kept(scores, reference, groups) -> float:
    """The share of within-query title pairs `scores` order as `reference` does; NaN where there is none."""
    terms = ranking_agreement(scores, reference, groups)
    return _share(terms["same"], terms["pairs"])


def _agreement_values(terms: dict, pick: np.ndarray) -> dict:
    return {"pair_order": _share(terms["same"][pick], terms["pairs"][pick]), "top1": _mean(terms["top1"][pick])}


def paired_score_bootstrap(scores_new, scores_ref, gold, groups, *, iters: int = 1000, seed: int = 0,
                           level: float = 0.95) -> dict:
    """new - ref of each score metric on the same resampled queries, with a CI, plus agreement with ref
    (`pair_order`, `top1`, see the module docstring). Without gold (`gold` None) agreement only."""
    iters, seed = check_resampling(iters, seed, "paired_score_bootstrap")
    level = check_level(level, "paired_score_bootstrap")
    new, ref = np.asarray(scores_new, dtype=np.float64), np.asarray(scores_ref, dtype=np.float64)
    rng = np.random.default_rng(seed)
    agree = ranking_agreement(new, ref, groups)
    out, every = {}, np.arange(len(groups))
    picks = [rng.integers(0, len(groups), len(groups)) for _ in range(iters)]
    if gold is not None:
        gold = np.asarray(gold, dtype=np.float64)
        terms_new, terms_ref = per_query(new, gold, groups), per_query(ref, gold, groups)

        def delta(pick):
            a, b = _resampled(new, gold, groups, terms_new, pick), _resampled(ref, gold, groups, terms_ref, pick)
            return {m: a[m] - b[m] for m in METRICS}

        point, samples = delta(every), [delta(p) for p in picks]
        out = {m: {"delta": point[m], "ci": by_query([s[m] for s in samples], level, len(groups))} for m in METRICS}
    point = _agreement_values(agree, every)
    samples = [_agreement_values(agree, p) for p in picks]
    for m in AGREEMENT:
        out[m] = {"value": point[m], "ci": by_query([s[m] for s in samples], level, len(groups))}
    out["agreement"] = out["pair_order"]  # the headline agreement of a score model (what gates use)
    return out
