"""One prune, start to end: scores -> plan (or iterative plans) -> surgery -> quality and speed summary."""
from __future__ import annotations

from typing import Callable

import torch

from headcut.arch import mask_shape
from headcut.data import Pairs
from headcut.models import LoadedModel
from headcut.evaluate.compare import compare_models
from headcut.prune.iterative import iterative_plan
from headcut.prune.measure import speed_summary
from headcut.prune.plan import check_keep_ratio, plan_heads
from headcut.prune.scores import check_unpruned, scan_scores
from headcut.prune.surgery import pruned_copy


def prune(
    loaded: LoadedModel,
    *,
    keep_ratio: float,
    layer_prior: float = 0.0,
    min_heads: int = 0,
    scores: torch.Tensor | None = None,
    score_pairs: Pairs | None = None,
    method: str = "ablation",
    iterative: int = 0,
    eval_pairs: Pairs | None = None,
    batch_size: int = 64,
    latency: bool = True,
    latency_seconds: float = 1.0,
    bootstrap: int = 1000,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
) -> tuple[LoadedModel, dict]:
    """Prune `loaded` (left untouched) and return (pruned model, summary for headcut.json and the report).

    Give `scores` (a scan's), or `score_pairs` to scan here with `method`; `iterative` > 0 re-scans
    `score_pairs` between that many steps. `eval_pairs` adds before/after quality with paired CIs.
    `progress(stage, pairs_done)` reports scanning ("scoring...") and grading.
    """
    check_keep_ratio(keep_ratio)
    check_unpruned(loaded)
    max_length = loaded.max_length

    def report(stage):
        return (lambda n: progress(stage, n)) if progress else None

    scans = []

    def score(model):
        scans.append(model)
        stage = f"scoring (step {len(scans)})" if iterative else "scoring"
        return scan_scores(model, loaded.tokenizer, score_pairs, method=method, batch_size=batch_size,
                           max_length=max_length, progress=report(stage), seed=seed)

    if iterative:
        if score_pairs is None:
            raise ValueError("iterative pruning re-scans: give score_pairs")
        plan, model = iterative_plan(loaded.model, score, keep_ratio, steps=iterative, layer_prior=layer_prior,
                                     min_heads=min_heads)
        pruned = LoadedModel(model, loaded.tokenizer, dict(loaded.meta), loaded.path, loaded.weights_hash)
    else:
        if scores is None:
            if score_pairs is None:
                raise ValueError("give scores or score_pairs")
            scores = score(loaded.model)
        plan = plan_heads(scores, keep_ratio, layer_prior=layer_prior, min_heads=min_heads)
        pruned = pruned_copy(loaded, plan)
    layers, heads = mask_shape(loaded.model)
    summary = {
        "source": {"path": loaded.path, "weights_hash": loaded.weights_hash},
        "keep_ratio": keep_ratio, "layer_prior": layer_prior, "min_heads": min_heads, "iterative": iterative,
        "plan": {"num_heads": heads, "total": layers * heads, "kept": plan.num_kept,
                 "heads_per_layer": plan.heads_per_layer, **plan.to_dict()},
        "scores": {"method": method, "values": None if scores is None else scores.tolist()},
    }
    if score_pairs is not None:
        summary["scores"]["data"] = {"source": score_pairs.source, "fingerprint": score_pairs.fingerprint,
                                     "rows": len(score_pairs)}
    seq_len = max_length
    if eval_pairs is not None:
        quality = compare_models(loaded.model, pruned.model, loaded.tokenizer, eval_pairs, batch_size=batch_size,
                                 max_length=max_length, iters=bootstrap, seed=seed, progress=report("grading"))
        quality.pop("logits")
        seq_len = quality["seq_len"]
        summary["quality"] = quality
    summary["speed"] = speed_summary(loaded.model, pruned.model, seq_len=seq_len, latency=latency,
                                     min_seconds=latency_seconds)
    return pruned, summary
