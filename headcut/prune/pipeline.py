"""One prune, start to end: data -> scores -> plan (or iterative plans) -> surgery -> quality and speed, as a
`PruneResult`."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable

from headcut.arch import flops_per_pair, intermediate_size, keep_heads, keep_neurons, mask_shape, unit_flops
from headcut.batching import encode
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError
from headcut.evaluate.compare import compare_logits, compare_models
from headcut.evaluate.fisher import TARGETS, UnitScores, unit_fisher
from headcut.evaluate.importance import gold
from headcut.evaluate.predict import predict_logits
from headcut.models import LoadedModel
from headcut.prune.budget import check_budget, plan_budget
from headcut.prune.targets import one_target_problem
from headcut.timing import Runtime
from headcut.prune.latency import check_latency_budget, default_cache, layer_costs, plan_latency
from headcut.prune.refit import refit_head
from headcut.prune.tune import tune_scales
from headcut.prune.inputs import (check_calibration_size, data_pool, eval_sample, file_score_record,
                                  notes_for, scan_score_record, stage)
from headcut.prune.iterative import iterative_plan
from headcut.prune.measure import speed_summary
from headcut.prune.plan import check_keep_ratio, plan_heads
from headcut.prune.result import PruneResult, PruneSettings
from headcut.prune.scores import DEFAULT_METHOD, check_unpruned, scan_scores, scores_from_file
from headcut.prune.surgery import pruned_copy


def prune(
    loaded: LoadedModel,
    *,
    keep_ratio: float,
    layer_prior: float = 0.0,
    min_heads: int = 0,
    scores: str | Path | None = None,
    method: str | None = None,
    iterative: int = 0,
    data: Pairs | None = None,
    eval_data: Pairs | None = None,
    settings: PruneSettings = PruneSettings(),
    progress: Callable[[str, int, int | None], None] | None = None,
) -> PruneResult:
    """Prune the heads of `loaded` (left untouched) to `keep_ratio` of them.

    Heads are ranked by the scan file `scores` (importance.json of this model; `method`: which of its
    methods, default fisher when it has it, else its first), or else by a `method` scan (default fisher)
    of `settings.score_rows` pairs of `data` (default: the dev data `headcut finetune` recorded);
    `iterative` > 0 re-scans between that many steps. Quality with paired CIs is measured on `eval_data`
    (`settings.eval_rows` of it), else on the scoring pairs when they have grades, with a note that it is
    then optimistic.
    `progress(stage, pairs_done, stage_total)` reports scanning ("scoring...") and grading.
    """
    check_keep_ratio(keep_ratio)
    check_unpruned(loaded)
    if scores is not None and iterative:
        raise UserError("--iterative re-scans between steps; pass --data (or nothing) instead of --scores.")
    max_length, batch_size, seed = loaded.max_length, settings.batch_size, settings.seed
    score_pairs = None
    if scores is None:
        method = method or DEFAULT_METHOD
        score_pairs = data_pool(loaded, data).sample(settings.score_rows, seed=seed)
    scans = []

    def score(model):
        scans.append(model)
        name = f"scoring (step {len(scans)})" if iterative else "scoring"
        return scan_scores(model, loaded.tokenizer, score_pairs, method=method, batch_size=batch_size,
                           max_length=max_length, progress=stage(progress, name, len(score_pairs)), seed=seed)

    head_scores = None
    if iterative:
        plan, model = iterative_plan(loaded.model, score, keep_ratio, steps=iterative, layer_prior=layer_prior,
                                     min_heads=min_heads)
        pruned = LoadedModel(model, loaded.tokenizer, dict(loaded.meta), loaded.path, loaded.weights_hash)
    else:
        if scores is not None:
            head_scores, meta = scores_from_file(scores, loaded, method=method)
        else:
            head_scores = score(loaded.model)
        plan = plan_heads(head_scores, keep_ratio, layer_prior=layer_prior, min_heads=min_heads)
        pruned = pruned_copy(loaded, plan)
    layers, heads = mask_shape(loaded.model)
    eval_pairs = eval_sample(eval_data, score_pairs, settings)
    seq_len, quality = max_length, None
    if eval_pairs is not None:
        quality = compare_models(loaded.model, pruned.model, loaded.tokenizer, eval_pairs, batch_size=batch_size,
                                 max_length=max_length, iters=settings.bootstrap, seed=seed,
                                 progress=stage(progress, "grading", 2 * len(eval_pairs)), activation=loaded.activation)
        quality.pop("logits")
        seq_len = quality["seq_len"]
    return PruneResult(
        pruned, loaded,
        request={"keep_ratio": keep_ratio, "layer_prior": layer_prior, "min_heads": min_heads,
                 "iterative": iterative},
        plan={"num_heads": heads, "total": layers * heads, "kept": plan.num_kept,
              "heads_per_layer": plan.heads_per_layer, **plan.to_dict()},
        scores=(file_score_record(head_scores, meta) if scores is not None
                else scan_score_record(head_scores, method, score_pairs)),
        speed=speed_summary(loaded.model, pruned.model, seq_len=seq_len, latency=settings.timing,
                            min_seconds=settings.latency_seconds),
        quality=quality, notes=notes_for(eval_pairs, score_pairs))


def prune_to_budget(
    loaded: LoadedModel,
    *,
    flops: float | None = None,
    latency: float | None = None,
    data: Pairs | None = None,
    unit_scores: UnitScores | None = None,
    targets: str = "teacher",
    layer_prior: float = 0.0,
    tune: bool = True,
    eval_data: Pairs | None = None,
    seq_len: int | None = None,
    latency_batch: int = 32,
    latency_cache: str | Path | None = None,
    latency_runtime: Runtime | None = None,
    settings: PruneSettings = PruneSettings(),
    progress: Callable[[str, int, int | None], None] | None = None,
    notice: Callable[[str], None] | None = None,
) -> PruneResult:
    """Prune heads and FFN neurons of `loaded` (left untouched) to a share `flops` of its FLOPs per pair
    at `seq_len` (default: the model's max_length), or to a share `latency` of its latency per batch of
    `latency_batch` x `seq_len` measured here on `latency_runtime` (default PyTorch fp32; ONNX Runtime INT8
    from `headcut.export.layer_timer.onnx_runtime`), from layer cost tables (`prune.latency`, cached in
    `latency_cache`, default `default_cache()`; `notice` gets a line when a cached table is timed again),
    with no gradient training: Fisher scores of every
    unit on `settings.score_rows` pairs of `data` (default: the dev data `headcut finetune` recorded; see
    `evaluate.fisher`; or `unit_scores` computed on that sample before), the best
    plan under the budget (`prune.budget`), then, with `tune`, per-unit scales and bias shifts re-fitted by
    least squares on another seeded sample of `settings.calibrate_rows` pairs of the same data (labels
    unused) and folded into the weights (`prune.tune`), then the classification head re-fitted to the
    unpruned model's outputs (`prune.refit`).
    Quality with paired CIs (also of the untuned model when tuning ran) is measured as `prune` does."""
    if targets not in TARGETS:
        raise UserError(f"--targets {targets} is unknown; choose one of: {', '.join(TARGETS)}.")
    batch_size, bootstrap, seed = settings.batch_size, settings.bootstrap, settings.seed
    pool = data_pool(loaded, data)
    check_calibration_size(pool, settings, tune=tune)
    score_pairs = pool.sample(settings.score_rows, seed=seed)
    eval_pairs = eval_sample(eval_data, score_pairs, settings)
    if targets == "grades" and score_pairs.task is None:
        raise UserError(f"{score_pairs.source} has no grades, which --targets grades needs; use --targets teacher.")
    target = one_target_problem({"flops": flops, "latency": latency}, flags=True)
    if target:
        raise UserError(f"pass {target}.")
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
            progress("timing layers", 0, None)
        ms_costs = layer_costs(loaded.model, batch=latency_batch, seq_len=seq_len, cache=latency_cache or default_cache(),
                               runtime=latency_runtime, notice=notice)
        ms_budget = check_latency_budget(latency, ms_costs)
    max_length = loaded.max_length
    scores = unit_scores
    if scores is None:
        encoded = encode(loaded.tokenizer, score_pairs, max_length=max_length, model=loaded.model)
        labels = gold(score_pairs) if targets == "grades" else None
        scores = unit_fisher(loaded.model, encoded, labels=labels, batch_size=max(1, batch_size // 2),
                             progress=stage(progress, "scoring", len(score_pairs)))
    if flops is not None:
        plan = plan_budget(scores, costs, budget, layer_prior=layer_prior)
    else:
        plan = plan_latency(scores, ms_costs, ms_budget, layer_prior=layer_prior)
    model = copy.deepcopy(loaded.model)
    keep_heads(model, [list(h) for h in plan.heads])
    keep_neurons(model, [list(n) for n in plan.neurons])
    model.eval()
    untuned, fits, head_fits = None, [], []
    calibrate_pairs = pool.sample(settings.calibrate_rows, seed=seed + 1) if tune else None
    if tune:
        untuned = copy.deepcopy(model) if eval_pairs is not None else None
        calibration = encode(loaded.tokenizer, calibrate_pairs, max_length=max_length, model=loaded.model)
        fits = tune_scales(loaded.model, model, calibration, batch_size=batch_size,
                           progress=(lambda _: progress("tuning", 1, None)) if progress else None)
        head_fits = refit_head(loaded.model, model, calibration, batch_size=batch_size)
    pruned = LoadedModel(model, loaded.tokenizer, dict(loaded.meta), loaded.path, loaded.weights_hash)
    layers, heads = mask_shape(loaded.model)
    budget_record = {"flops": flops, "seq_len": seq_len, "full_flops": full, "fixed_flops": costs.fixed,
                     "plan_flops": plan.flops(costs)}
    if flops is not None:
        budget_record["budget_flops"] = budget
    else:
        budget_record.update(latency=latency, costs=ms_costs.to_dict(), budget_ms=ms_budget,
                             full_ms=ms_budget / latency,
                             plan_ms=ms_costs.total(plan.heads_per_layer, plan.neurons_per_layer))
    quality = quality_untuned = None
    if eval_pairs is not None:
        eval_encoded = encode(loaded.tokenizer, eval_pairs, max_length=max_length, model=loaded.model)
        grading = stage(progress, "grading", len(eval_pairs) * (3 if untuned is not None else 2))

        def logits(m):
            return predict_logits(m, None, None, batch_size=batch_size, encoded=eval_encoded, progress=grading)

        reference = logits(loaded.model)
        quality = compare_logits(reference, logits(model), eval_pairs, iters=bootstrap, seed=seed,
                                 activation=loaded.activation)
        quality.pop("logits")
        if untuned is not None:
            quality_untuned = compare_logits(reference, logits(untuned), eval_pairs, iters=bootstrap, seed=seed,
                                             activation=loaded.activation)
            quality_untuned.pop("logits")
    return PruneResult(
        pruned, loaded, request={"layer_prior": layer_prior},
        plan={"num_heads": heads, "total": layers * heads, "kept": sum(plan.heads_per_layer),
              "num_neurons": intermediate_size(loaded.model.config), **plan.to_dict()},
        scores={"how": f"fisher ({scores.targets} targets) of {len(score_pairs)} pairs from {score_pairs.source}",
                "data": score_pairs.provenance(), **scores.to_dict()},
        speed=speed_summary(loaded.model, model, seq_len=seq_len, latency=settings.timing,
                            min_seconds=settings.latency_seconds),
        budget=budget_record, tuning={"enabled": tune, "data": {**calibrate_pairs.provenance(), "asked": settings.calibrate_rows} if tune else None,
                              "accepted": sum(f.accepted for f in fits), "sublayers": len(fits),
                              "fits": [f.to_dict() for f in fits], "head": [f.to_dict() for f in head_fits]},
        quality=quality, quality_untuned=quality_untuned, notes=notes_for(eval_pairs, score_pairs, calibrate_pairs))
