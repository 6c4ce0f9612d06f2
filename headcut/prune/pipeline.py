"""One prune, start to end: scores -> plan (or iterative plans) -> surgery -> quality and speed summary."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

import torch

from headcut.arch import flops_per_pair, intermediate_size, keep_heads, keep_neurons, mask_shape, unit_flops
from headcut.batching import encode
from headcut.data import Pairs
from headcut.errors import UserError
from headcut.evaluate.compare import compare_logits, compare_models
from headcut.evaluate.fisher import TARGETS, UnitScores, unit_fisher
from headcut.evaluate.predict import predict_logits
from headcut.models import LoadedModel
from headcut.prune.budget import check_budget, plan_budget
from headcut.prune.latency import check_latency_budget, default_cache, layer_costs, plan_latency
from headcut.prune.refit import refit_head
from headcut.prune.tune import tune_scales
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
    scores_meta: dict | None = None,
    score_pairs: Pairs | None = None,
    method: str = "fisher",
    iterative: int = 0,
    eval_pairs: Pairs | None = None,
    batch_size: int = 64,
    timing: bool = True,
    latency_seconds: float = 1.0,
    bootstrap: int = 1000,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
) -> tuple[LoadedModel, dict]:
    """Prune `loaded` (left untouched) and return (pruned model, summary for headcut.json and the report).

    Give `scores` (a scan's, with `scores_meta` from `scores_from_file` to record where they came from),
    or `score_pairs` to scan here with `method`; `iterative` > 0 re-scans `score_pairs` between that many
    steps. `eval_pairs` adds before/after quality with paired CIs (flagged as optimistic when they are
    the scoring pairs).
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
        "scores": _score_record(scores, scores_meta, method, score_pairs),
    }
    seq_len = max_length
    if eval_pairs is not None:
        quality = compare_models(loaded.model, pruned.model, loaded.tokenizer, eval_pairs, batch_size=batch_size,
                                 max_length=max_length, iters=bootstrap, seed=seed, progress=report("grading"))
        quality.pop("logits")
        seq_len = quality["seq_len"]
        summary["quality"] = _flag_optimistic(quality, eval_pairs, score_pairs)
    summary["speed"] = speed_summary(loaded.model, pruned.model, seq_len=seq_len, latency=timing,
                                     min_seconds=latency_seconds)
    return pruned, summary


def prune_to_budget(
    loaded: LoadedModel,
    *,
    flops: float | None = None,
    latency: float | None = None,
    score_pairs: Pairs,
    calibrate_pairs: Pairs | None = None,
    unit_scores: UnitScores | None = None,
    targets: str = "teacher",
    layer_prior: float = 0.0,
    tune: bool = True,
    eval_pairs: Pairs | None = None,
    seq_len: int | None = None,
    latency_batch: int = 32,
    latency_cache: str | Path | None = None,
    batch_size: int = 64,
    timing: bool = True,
    latency_seconds: float = 1.0,
    bootstrap: int = 1000,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
) -> tuple[LoadedModel, dict]:
    """Prune heads and FFN neurons of `loaded` (left untouched) to a share `flops` of its FLOPs per pair
    at `seq_len` (default: the model's max_length), or to a share `latency` of its PyTorch latency per
    batch of `latency_batch` x `seq_len` measured here (`prune.latency`; tables cached in `latency_cache`,
    default `default_cache()`),
    with no gradient training: Fisher scores of every
    unit on `score_pairs` (see `evaluate.fisher`; or `unit_scores` computed on them before), the best
    plan under the budget (`prune.budget`), then, with `tune`, per-unit scales and bias shifts re-fitted by
    least squares on `calibrate_pairs` (default: the scoring pairs; labels unused) and folded into the
    weights (`prune.tune`), then the classification head re-fitted to the unpruned outputs (`prune.refit`).
    `eval_pairs` adds quality with paired CIs, also of the untuned model when tuning ran. Returns (pruned model, summary for headcut.json and the report)."""
    if targets not in TARGETS:
        raise UserError(f"--targets {targets} is unknown; choose one of: {', '.join(TARGETS)}.")
    if targets == "grades" and not score_pairs.has_labels:
        raise UserError(f"{score_pairs.source} has no grades, which --targets grades needs; use --targets teacher.")
    if (flops is None) == (latency is None):
        raise UserError("pass exactly one budget: --flops F or --latency S.")
    check_unpruned(loaded)
    seq_len = int(seq_len or loaded.max_length)
    costs = unit_flops(loaded.model, seq_len)
    full = flops_per_pair(loaded.model, seq_len)
    if flops is not None:
        budget = check_budget(flops, costs, full)
    else:
        if not 0 < latency <= 1:
            raise UserError(f"--latency {latency} is outside (0, 1]; pass the share of the measured latency to keep.")
        if progress:
            progress("timing layers", 0)
        ms_costs = layer_costs(loaded.model, batch=latency_batch, seq_len=seq_len, cache=latency_cache or default_cache())
        ms_budget = check_latency_budget(latency, ms_costs)
    max_length = loaded.max_length

    def report(stage):
        return (lambda n: progress(stage, n)) if progress else None

    scores = unit_scores
    if scores is None:
        encoded = encode(loaded.tokenizer, score_pairs, max_length=max_length, model=loaded.model)
        labels = score_pairs.label_array() if targets == "grades" else None
        scores = unit_fisher(loaded.model, encoded, labels=labels, batch_size=max(1, batch_size // 2),
                             progress=report("scoring"))
    if flops is not None:
        plan = plan_budget(scores, costs, budget, layer_prior=layer_prior)
    else:
        plan = plan_latency(scores, ms_costs, ms_budget, layer_prior=layer_prior)
    model = copy.deepcopy(loaded.model)
    keep_heads(model, [list(h) for h in plan.heads])
    keep_neurons(model, [list(n) for n in plan.neurons])
    model.eval()
    untuned, fits, head_fits = None, [], []
    calibrate_pairs = calibrate_pairs if calibrate_pairs is not None else score_pairs
    if tune:
        untuned = copy.deepcopy(model) if eval_pairs is not None else None
        calibration = encode(loaded.tokenizer, calibrate_pairs, max_length=max_length, model=loaded.model)
        fits = tune_scales(loaded.model, model, calibration, batch_size=batch_size,
                           progress=(lambda stage: progress("tuning", 1)) if progress else None)
        head_fits = refit_head(loaded.model, model, calibration, batch_size=batch_size)
    pruned = LoadedModel(model, loaded.tokenizer, dict(loaded.meta), loaded.path, loaded.weights_hash)
    layers, heads = mask_shape(loaded.model)
    summary = {
        "source": {"path": loaded.path, "weights_hash": loaded.weights_hash},
        "budget": {"flops": flops, "seq_len": seq_len, "full_flops": full, "fixed_flops": costs.fixed,
                   "plan_flops": plan.flops(costs)},
        "layer_prior": layer_prior,
        "plan": {"num_heads": heads, "total": layers * heads, "kept": sum(plan.heads_per_layer),
                 "num_neurons": intermediate_size(loaded.model.config), **plan.to_dict()},
        "scores": {"how": f"fisher ({scores.targets} targets) of {len(score_pairs)} pairs from {score_pairs.source}",
                   "data": _data_record(score_pairs), **scores.to_dict()},
        "tuning": {"enabled": tune, "data": _data_record(calibrate_pairs) if tune else None,
                   "accepted": sum(f.accepted for f in fits), "sublayers": len(fits),
                   "fits": [f.to_dict() for f in fits], "head": [f.to_dict() for f in head_fits]},
    }
    if flops is not None:
        summary["budget"]["budget_flops"] = budget
    else:
        summary["budget"].update(latency=latency, costs=ms_costs.to_dict(), budget_ms=ms_budget,
                                 full_ms=ms_budget / latency,
                                 plan_ms=ms_costs.total(plan.heads_per_layer, plan.neurons_per_layer))
    if eval_pairs is not None:
        eval_encoded = encode(loaded.tokenizer, eval_pairs, max_length=max_length, model=loaded.model)

        def logits(m, stage):
            return predict_logits(m, None, None, batch_size=batch_size, encoded=eval_encoded, progress=report(stage))

        reference = logits(loaded.model, "grading")
        quality = compare_logits(reference, logits(model, "grading"), eval_pairs, iters=bootstrap, seed=seed)
        quality.pop("logits")
        summary["quality"] = _flag_optimistic(quality, eval_pairs, score_pairs, calibrate_pairs if tune else None)
        if untuned is not None:
            before_tuning = compare_logits(reference, logits(untuned, "grading"), eval_pairs, iters=bootstrap, seed=seed)
            before_tuning.pop("logits")
            summary["quality_untuned"] = before_tuning
    summary["speed"] = speed_summary(loaded.model, model, seq_len=seq_len, latency=timing,
                                     min_seconds=latency_seconds)
    return pruned, summary


def _data_record(pairs: Pairs) -> dict:
    return {"source": pairs.source, "fingerprint": pairs.fingerprint, "rows": len(pairs)}


def _score_record(scores, meta: dict | None, method: str, pairs: Pairs | None) -> dict:
    """Where the head scores came from: the method of the file actually read, or the scan run here."""
    if meta is not None:
        used = meta.get("method", method)
        return {"method": used, "how": f"{meta.get('file')} ({used})", "values": scores.tolist(),
                "file": {"path": meta.get("file"), "data": meta.get("data"), "model": meta.get("model")}}
    record = {"method": method, "values": None if scores is None else scores.tolist()}
    if pairs is not None:
        record["how"] = f"{method} scan of {len(pairs)} pairs from {pairs.source}"
        record["data"] = _data_record(pairs)
    return record


def _flag_optimistic(quality: dict, eval_pairs: Pairs, *chose: Pairs | None) -> dict:
    """Mark a quality report whose pairs also chose (or tuned) the pruned model."""
    if any(p is not None and p.fingerprint == eval_pairs.fingerprint for p in chose):
        quality["note"] = ("These pairs also chose the pruned units, so the change is optimistic; "
                           "pass --eval-data for held-out pairs.")
    return quality
