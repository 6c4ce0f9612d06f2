"""The study's head-masking experiments, each reported the study's way (accuracy change relative to the
unmasked model, in percent: +1% = 1% above baseline) and beside it the change of loss and Spearman and
the flip rate (share of pairs whose predicted grade changes), since accuracy alone hides large changes.

1. `random`: mask a random 10..90% of all heads (several draws per ratio);
2. `halves`: mask 10..50% of all heads, drawn only from the lower or only from the upper half of layers;
3. `layers`: mask one whole layer at a time;
4. `heads`: mask one head at a time (the heat map; from the exact ablation scan);
5. `term`: mask the k strongest term-matching heads, k random heads, the whole lower half, and the
   lower half except those k.
CIs (95%) resample pairs and draws together, so they cover both the data and the random choice of heads.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from scipy.stats import rankdata

from headcut.arch import present_heads
from headcut.batching import Encoded
from headcut.evaluate.ablation import masked_logits
from headcut.evaluate.importance import example_nll
from headcut.evaluate.metrics import expected_grade

EXPERIMENTS = ("random", "halves", "layers", "heads", "term")
RANDOM_RATIOS = tuple(round(0.1 * i, 1) for i in range(1, 10))
HALF_RATIOS = (0.1, 0.2, 0.3, 0.4, 0.5)


def _row_spearman(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Spearman of each row of `scores` (rows, n) with the matching row of `labels`: 0 where a row of `scores` is
    constant, as metrics.correlation scores a constant prediction (a collapsed masked model ranks nothing, the largest
    effect a mask has, not an undefined one); a row of one gold grade is NaN in `effects` (its one_grade)."""
    a, b = rankdata(scores, axis=1), rankdata(labels, axis=1)
    a, b = a - a.mean(1, keepdims=True), b - b.mean(1, keepdims=True)
    denom = np.sqrt((a * a).sum(1) * (b * b).sum(1))
    return np.where(denom > 0, (a * b).sum(1) / np.where(denom > 0, denom, 1), 0.0)


def effects(logits: np.ndarray, base: np.ndarray, labels, grades, *, iters: int = 200, seed: int = 0) -> dict:
    """Effect of masking, averaged over draws: `logits` (draws, pairs, classes) vs the unmasked `base`.

    Returns relative_accuracy_pct, accuracy, loss_delta, spearman_delta, flip_rate, each with a 95% CI
    from a bootstrap that resamples pairs and draws (paired: the baseline sees the same pairs); NaN where it means
    nothing (relative_accuracy_pct where the baseline grades no pair right, spearman_delta where the gold holds one
    grade).
    """
    labels = np.asarray(labels)
    draws, n = logits.shape[:2]
    correct = logits.argmax(-1) == labels
    base_correct = base.argmax(-1) == labels
    loss = example_nll(logits, labels)
    base_loss = example_nll(base, labels)
    flips = logits.argmax(-1) != base.argmax(-1)
    score = np.stack([expected_grade(x, grades) for x in logits])
    base_score = expected_grade(base, grades)

    def stats(d, i):  # d: (iters, draws) draw picks, i: (iters, n) pair picks
        take = lambda a: np.take_along_axis(a[d], np.broadcast_to(i[:, None], d.shape + (i.shape[1],)), 2)
        base_acc = base_correct[i].mean(1)
        acc = take(correct).mean(2).mean(1)
        rows, lab = d.shape[0] * draws, np.repeat(labels[i], draws, axis=0)
        rho = _row_spearman(take(score).reshape(rows, -1), lab).reshape(d.shape).mean(1)
        # no share of a baseline that grades nothing right, and no Spearman of one gold grade: NaN, not a number
        # (were 100 x the accuracy, as if the baseline were 1, and a change of 0)
        one_grade = (labels[i] == labels[i][:, :1]).all(1)
        some_right = base_acc > 0
        return {
            "relative_accuracy_pct": np.where(some_right, 100 * (acc - base_acc) / np.where(some_right, base_acc, 1),
                                              np.nan),
            "accuracy": acc,
            "loss_delta": take(loss).mean(2).mean(1) - base_loss[i].mean(1),
            "spearman_delta": np.where(one_grade, np.nan, rho - _row_spearman(base_score[i], labels[i])),
            "flip_rate": take(flips).mean(2).mean(1),
        }

    point = stats(np.arange(draws)[None], np.arange(n)[None])
    out = {k: float(v[0]) for k, v in point.items()}
    if iters:
        rng = np.random.default_rng(seed)
        samples = {k: [] for k in point}
        for first in range(0, iters, 50):  # chunks keep the (iters, draws, n) index arrays small
            m = min(50, iters - first)
            s = stats(rng.integers(0, draws, (m, draws)), rng.integers(0, n, (m, n)))
            for k in samples:
                samples[k].append(s[k])
        for k, v in samples.items():
            v = np.concatenate(v)
            v = v[np.isfinite(v)]  # a resample may hold one grade, or a baseline with none right
            out[f"{k}_ci"] = ([float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))]
                              if len(v) and np.isfinite(out[k]) else [float("nan")] * 2)
    out["draws"] = int(draws)
    return out


def random_masks(allowed: torch.Tensor, count: int, *, draws: int, generator: torch.Generator) -> torch.Tensor:
    """`draws` masks (1 = keep) each dropping `count` heads chosen uniformly among `allowed`."""
    index = allowed.flatten().nonzero().flatten()
    masks = torch.ones(draws, allowed.numel())
    for d in range(draws):
        drop = index[torch.randperm(len(index), generator=generator)[:count]]
        masks[d, drop] = 0
    return masks.view(draws, *allowed.shape)


def _layers_between(model, first: int, last: int) -> torch.Tensor:
    allowed = present_heads(model).clone()
    allowed[:first] = False
    allowed[last:] = False
    return allowed


def run_experiments(model, encoded: Encoded, labels, grades, *, base: np.ndarray, single: np.ndarray | None = None,
                    term_scores: torch.Tensor | None = None, which=EXPERIMENTS, draws: int = 5,
                    k: int = 5, iters: int = 200, seed: int = 0, batch_size: int = 64,
                    progress: Callable[[str, int], None] | None = None) -> dict:
    """Run the named experiments; `single` are the single-head ablation logits (`ablation_logits`),
    `term_scores` the term-matching probe scores (experiment 5). Returns JSON-ready tables.

    `progress(experiment, pairs_done)` reports each experiment's pass over the data.
    """
    gen = torch.Generator().manual_seed(seed)
    present = present_heads(model)
    total = int(present.sum())
    layers = present.shape[0]
    half = layers // 2

    def run(name, masks):
        report = (lambda n: progress(name, n)) if progress else None
        return masked_logits(model, encoded, masks, batch_size=batch_size, progress=report)

    def measure(logits):
        return effects(logits, base, labels, grades, iters=iters, seed=seed)

    out: dict = {"heads_total": total, "pairs": int(len(encoded)), "draws": draws, "seed": seed}
    if "random" in which:
        counts = [round(r * total) for r in RANDOM_RATIOS]
        masks = torch.cat([random_masks(present, c, draws=draws, generator=gen) for c in counts])
        logits = run("random", masks).reshape(len(counts), draws, len(encoded), -1)
        out["random"] = [{"ratio": r, "heads_masked": c, **measure(x)}
                         for r, c, x in zip(RANDOM_RATIOS, counts, logits)]
    if "halves" in which:
        out["halves"] = {}
        for name, allowed in (("lower", _layers_between(model, 0, half)),
                              ("upper", _layers_between(model, half, layers))):
            counts = [min(round(r * total), int(allowed.sum())) for r in HALF_RATIOS]
            masks = torch.cat([random_masks(allowed, c, draws=draws, generator=gen) for c in counts])
            logits = run(f"halves ({name})", masks).reshape(len(counts), draws, len(encoded), -1)
            out["halves"][name] = [{"ratio": r, "heads_masked": c, **measure(x)}
                                   for r, c, x in zip(HALF_RATIOS, counts, logits)]
    if "layers" in which:
        masks = torch.ones(layers, *present.shape)
        for layer in range(layers):
            masks[layer, layer] = 0
        logits = run("layers", masks)
        out["layers"] = [{"layer": i, "heads_masked": int(present[i].sum()), **measure(x[None])}
                         for i, x in enumerate(logits)]
    if "heads" in which and single is not None:
        out["heads"] = [{"layer": i, "head": h, **measure(single[i, h][None])}
                        for i in range(layers) for h in range(present.shape[1]) if present[i, h]]
    if "term" in which and term_scores is not None:
        out["term"] = _term_table(model, present, term_scores, k=k, half=half, draws=draws, gen=gen,
                                  run=run, measure=measure, n=len(encoded))
    return out


def _term_table(model, present, term_scores, *, k, half, draws, gen, run, measure, n) -> list[dict]:
    scores = torch.as_tensor(term_scores, dtype=torch.float32).masked_fill(~present, float("-inf"))
    top = torch.topk(scores.flatten(), k).indices
    strongest = torch.ones(present.numel())
    strongest[top] = 0
    strongest = strongest.view_as(present)
    lower = _layers_between(model, 0, half)
    lower_mask = (~lower).float()
    except_k = torch.where(strongest == 0, torch.ones_like(lower_mask), lower_mask)
    fixed = torch.stack([strongest, lower_mask, except_k])
    randoms = random_masks(present, k, draws=draws, generator=gen)
    logits = run("term", torch.cat([fixed, randoms]))
    heads = [[int(i) // present.shape[1], int(i) % present.shape[1]] for i in top]
    return [
        {"condition": f"{k} strongest term-matching heads", "heads": heads, "heads_masked": k, **measure(logits[:1])},
        {"condition": f"{k} random heads", "heads_masked": k, **measure(logits[3:])},
        {"condition": "all lower-half heads", "heads_masked": int(lower.sum()), **measure(logits[1:2])},
        {"condition": f"lower half except the {k} term-matching heads",
         "heads_masked": int((except_k == 0).sum()), **measure(logits[2:3])},
    ]
