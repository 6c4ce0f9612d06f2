"""One prune, start to end: data -> scores -> plan (or iterative plans) -> surgery -> quality and speed, as a
`PruneResult`."""
from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np

from headcut.arch import UnitFlops, flops_per_pair, intermediate_size, mask_shape, unit_flops
from headcut.batching import Encoded, encode
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError, check_names, concerning, quoted, setting
from headcut_grader.ranges import check_arguments, check_callbacks
from headcut.evaluate.compare import compare_logits, compare_models
from headcut.evaluate.criteria import ScoringData, check_targets, criterion, gold_name
from headcut.evaluate.fisher import UnitScores
from headcut.evaluate.importance import gold
from headcut.evaluate.predict import predict_logits
from headcut.evaluate_arguments import units_batch_size
from headcut.models import LoadedModel
from headcut.model_arguments import check_loaded
from headcut.prune.budget import UnitPlan, check_budget, plan_budget
from headcut.prune.targets import one_plan_problem, one_target_problem
from headcut.timing import Runtime
from headcut.prune.latency import LayerCosts, check_latency_budget, layer_costs, plan_latency
from headcut.run_folder import check_headcut_cache, headcut_cache
from headcut.prune.refit import refit_head
from headcut.prune.tune import DEFAULT_MODE, MODES, tune_scales
from headcut.prune.inputs import (check_calibration_size, data_pool, eval_sample, file_score_record,
                                  notes_for, scan_score_record, stage)
from headcut.prune.iterative import budget_shares, iterative_plan
from headcut.prune.measure import speed_summary, timed_length
from headcut.prune.plan import check_head_counts, plan_heads
from headcut.prune.result import PruneResult, PruneSettings
from headcut.prune.scores import DEFAULT_METHOD, check_unpruned, scan_scores, scores_from_file
from headcut.prune.layers import LayerSearch, choose_layer_drops, held_out_divergence, settle_drops
from headcut.prune.surgery import apply_unit_plan, pruned_copy
from headcut.prune_arguments import ARGUMENTS, named


def checked_arguments(function: str, **given) -> list:
    """`given` numeric arguments of `function` as plain ints and floats (a numpy number is one), each checked against
    its ARGUMENTS range; a UserError names the function and the argument."""
    return check_arguments(ARGUMENTS, function, given)


def scores_flag(names: str) -> str:
    """How a refusal of prune's `scores` path names it, as errors.caller reads it: its own argument for a Python
    caller (prune scores), --scores for `headcut prune`, nothing for a run (its scan's file, said by its path)."""
    return "prune scores" if names == "arguments" else named("scores", names)


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
    names: str = "arguments",
) -> PruneResult:
    """Prune the heads of `loaded` (left untouched) to `keep_ratio` of them.

    Heads are ranked by the scan file `scores` (importance.json of this model; `method`: which of its
    methods, default fisher when it has it, else its first), or else by a `method` scan (default fisher)
    of `settings.score_rows` pairs of `data` (default: the dev data `headcut finetune` recorded);
    `iterative` > 0 re-scans between that many steps. Quality with paired CIs is measured on `eval_data`
    (`settings.eval_rows` of it), else on the scoring pairs when they have grades, with a note that it is
    then optimistic.
    `progress(stage, pairs_done, stage_total)` reports scanning ("scoring...") and grading. `names`: how a
    refusal names the arguments, "arguments" (keep_ratio), a run recipe's "keys" or `headcut prune`'s "flags"
    (`prune_arguments.named`).
    """
    check_names(names, "prune names")
    check_callbacks("prune", progress=progress)
    keep_ratio, layer_prior, min_heads, iterative = checked_arguments(
        "prune", keep_ratio=keep_ratio, layer_prior=layer_prior, min_heads=min_heads, iterative=iterative)
    check_loaded(loaded, "prune loaded")
    with concerning("model"):
        check_unpruned(loaded, named("model", names))
    check_head_counts(keep_ratio, min_heads, *mask_shape(loaded.model), names=names)  # before any scoring
    if scores is not None and iterative:
        said = {name: named(name, names) for name in ("iterative", "data", "scores")}
        raise UserError(f"{setting(said['iterative'], iterative)} re-scans between steps; pass {said['data']} (or "
                        f"nothing) instead of {said['scores']}.", about=("iterative", "scores"))
    max_length, batch_size, seed = loaded.max_length, settings.batch_size, settings.seed
    score_pairs = None
    if scores is None:
        method = method or DEFAULT_METHOD
        with concerning("method"):
            criterion(method, flag=named("method", names))  # named as the caller wrote it, before the data is read
        with concerning("data"):
            score_pairs = data_pool(loaded, data, names, eval_data=eval_data, method=method).sample(
                settings.score_rows, seed=seed)
    scans = []

    def score(model):
        scans.append(model)
        name = f"scoring (step {len(scans)})" if iterative else "scoring"
        return scan_scores(model, loaded.tokenizer, score_pairs, method=method, batch_size=batch_size,
                           max_length=max_length, progress=stage(progress, name, len(score_pairs)), seed=seed,
                           flag=named("method", names))

    head_scores = None
    if iterative:
        plan, model = iterative_plan(loaded.model, score, keep_ratio, steps=iterative, layer_prior=layer_prior,
                                     min_heads=min_heads)
        pruned = LoadedModel(model, loaded.tokenizer, dict(loaded.meta), loaded.path, loaded.weights_hash)
    else:
        if scores is not None:
            with concerning("scores"):
                head_scores, meta = scores_from_file(scores, loaded, method=method, names=names,
                                                     flag=scores_flag(names))
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
        seq_len = timed_length(quality["seq_len"])
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
        quality=quality, notes=notes_for(eval_pairs, score_pairs), names=names)


@dataclass(frozen=True)
class Budget:
    """What a budget prune must fit: a FLOPs share (`budget` FLOPs per pair at `seq_len`), or a latency share
    (`budget` ms per batch from the layer cost table `ms_costs`)."""

    flops: float | None
    latency: float | None
    seq_len: int
    costs: UnitFlops
    full: int
    budget: float
    ms_costs: LayerCosts | None = None

    def at(self, share: float) -> "Budget":
        """The same budget shrunk to `share` of the full model (a step of an iterative prune)."""
        if self.flops is not None:
            return replace(self, budget=int(share * self.full))
        return replace(self, budget=self.budget * share / self.latency)

    def plan(self, scores: UnitScores, layer_prior: float) -> UnitPlan:
        if self.flops is not None:
            return plan_budget(scores, self.costs, int(self.budget), layer_prior=layer_prior)
        return plan_latency(scores, self.ms_costs, self.budget, layer_prior=layer_prior)

    def record(self, plan: UnitPlan, search: LayerSearch | None = None) -> dict:
        out = {"flops": self.flops, "seq_len": self.seq_len, "full_flops": self.full, "fixed_flops": self.costs.fixed,
               "plan_flops": plan.flops(self.costs), **({"layer_search": search.to_dict()} if search else {})}
        if self.flops is not None:
            return {**out, "budget_flops": int(self.budget)}
        return {**out, "latency": self.latency, "costs": self.ms_costs.to_dict(), "budget_ms": self.budget,
                "full_ms": self.budget / self.latency,
                "plan_ms": self.ms_costs.total(plan.heads_per_layer, plan.neurons_per_layer)}


def budget_of(loaded: LoadedModel, *, flops: float | None, latency: float | None, seq_len: int | None,
              latency_batch: int = 32, latency_cache: str | Path | None = None, latency_runtime: Runtime | None = None,
              progress=None, notice=None, names: str = "arguments") -> Budget:
    """Check the one target and its range, and (for `latency`) time or read the layer cost table; `names` as
    `prune_to_budget`'s."""
    target = one_target_problem({"flops": flops, "latency": latency}, flags=names == "flags")
    if target:
        raise UserError(f"pass {target}.", about=("flops", "latency"))
    with concerning("model"):
        check_unpruned(loaded, named("model", names))
    seq_len = int(seq_len or loaded.max_length)
    costs = unit_flops(loaded.model, seq_len)
    full = flops_per_pair(loaded.model, seq_len)
    if flops is not None:
        with concerning("flops"):
            share = check_budget(flops, costs, full, flag=named("flops", names))
        return Budget(flops, None, seq_len, costs, full, share)
    if not 0 < latency <= 1:
        raise UserError(f"{setting(named('latency', names), latency)} is outside (0, 1]; pass the share of the "
                        "measured latency to keep.", about=("latency",))
    if progress:
        progress("timing layers", 0, None)
    ms_costs = layer_costs(loaded.model, batch=latency_batch, seq_len=seq_len, cache=latency_cache or headcut_cache(),
                           runtime=latency_runtime, notice=notice,
                           before_write=None if latency_cache else check_headcut_cache)
    with concerning("latency"):
        share = check_latency_budget(latency, ms_costs, flag=named("latency", names))
    return Budget(None, latency, seq_len, costs, full, share, ms_costs)


def score_units(loaded: LoadedModel, pairs: Pairs, *, method: str = DEFAULT_METHOD, targets: str = "teacher",
                batch_size: int = 32, progress=None) -> UnitScores:
    """Heads and FFN neurons of `loaded` scored by criterion `method` (`evaluate.criteria`) on `pairs`."""
    encoded = encode(loaded.tokenizer, pairs, max_length=loaded.max_length, model=loaded.model)
    data = ScoringData(loaded.model, encoded, gold(pairs), source=str(pairs.source),
                       targets=targets, neurons=True, batch_size=batch_size,
                       progress=(lambda _, n: progress(n)) if progress else None)
    return criterion(method, flag="score_units method", neurons=True).score(data)


@dataclass
class Tuning:
    """Mask tuning's outcome: the fits of each sublayer and of the classification head, on `pairs`."""

    pairs: Pairs | None
    fits: list
    head_fits: list
    fit: str | None = None  # `prune.tune` mode: scales, weights or best

    def record(self, enabled: bool, asked: int | None) -> dict:
        return {"enabled": enabled, "fit": self.fit if enabled else None,
                "data": {**self.pairs.provenance(), "asked": asked} if enabled else None,
                "accepted": sum(f.accepted for f in self.fits), "sublayers": len(self.fits),
                "fits": [f.to_dict() for f in self.fits], "head": [f.to_dict() for f in self.head_fits]}


def tune_pruned(loaded: LoadedModel, model, pairs: Pairs, *, batch_size: int, fit: str = DEFAULT_MODE,
                progress=None) -> Tuning:
    """Re-fit each sublayer (`prune.tune`: per-unit scales and bias shifts, or the projection, as `fit` says), then
    the classification head (`prune.refit`), of the pruned `model` to the unpruned one's outputs on `pairs`
    (labels unused)."""
    calibration = encode(loaded.tokenizer, pairs, max_length=loaded.max_length, model=loaded.model)
    fits = tune_scales(loaded.model, model, calibration, batch_size=batch_size, mode=fit,
                       progress=(lambda _: progress("tuning", 1, None)) if progress else None)
    return Tuning(pairs, fits, refit_head(loaded.model, model, calibration, batch_size=batch_size), fit)


def budget_quality(loaded: LoadedModel, models: list, pairs: Pairs, settings: PruneSettings, progress=None) -> list:
    """Quality with paired CIs of each of `models` against `loaded` on `pairs` (one reference pass)."""
    encoded = encode(loaded.tokenizer, pairs, max_length=loaded.max_length, model=loaded.model)
    grading = stage(progress, "grading", len(pairs) * (1 + len(models)))

    def logits(m):
        return predict_logits(m, None, None, batch_size=settings.batch_size, encoded=encoded, progress=grading)

    reference = logits(loaded.model)
    out = []
    for m in models:
        quality = compare_logits(reference, logits(m), pairs, iters=settings.bootstrap, seed=settings.seed,
                                 activation=loaded.activation)
        quality.pop("logits")
        out.append(quality)
    return out


def prune_to_budget(
    loaded: LoadedModel,
    *,
    flops: float | None = None,
    latency: float | None = None,
    data: Pairs | None = None,
    unit_scores: UnitScores | None = None,
    method: str = DEFAULT_METHOD,
    targets: str = "teacher",
    layer_prior: float = 0.0,
    drop_layers: bool = False,
    tune: bool = True,
    tune_fit: str = DEFAULT_MODE,
    iterative: int = 0,
    eval_data: Pairs | None = None,
    seq_len: int | None = None,
    latency_batch: int = 32,
    latency_cache: str | Path | None = None,
    latency_runtime: Runtime | None = None,
    settings: PruneSettings = PruneSettings(),
    progress: Callable[[str, int, int | None], None] | None = None,
    notice: Callable[[str], None] | None = None,
    names: str = "arguments",
) -> PruneResult:
    """Prune heads and FFN neurons of `loaded` (left untouched) to a share `flops` of its FLOPs per pair
    at `seq_len` (default: the model's max_length), or to a share `latency` of its latency per batch of
    `latency_batch` x `seq_len` measured here on `latency_runtime` (default PyTorch fp32; ONNX Runtime INT8
    from `headcut.export.layer_timer.onnx_runtime`), from layer cost tables (`prune.latency`, cached in
    `latency_cache`, default headcut's cache folder; `notice` gets a line when a cached table is timed again),
    with no gradient training: scores of every unit by criterion `method` (default fisher, with `targets`;
    `evaluate.criteria`) on `settings.score_rows` pairs of `data` (default: the dev data `headcut finetune`
    recorded; or `unit_scores` computed on that sample before), the best plan under the budget
    (`prune.budget`) — with `drop_layers` (`flops` only), whole layers dropped where that brings the masked plan's
    outputs closer to the unpruned model's on the calibration sample (`prune.layers`; with `tune`, only where the
    tuned result is also closer than the tuned plan over all layers) — then, with `tune`,
    each sublayer re-fitted by least squares (`tune_fit`: per-unit scales and bias shifts, the whole output
    projection, or per sublayer the better of the two on held-out pairs) on another
    seeded sample of `settings.calibrate_rows` pairs of the same data (labels unused) and folded into the
    weights (`prune.tune`), then the classification head re-fitted to the unpruned model's outputs
    (`prune.refit`). With `iterative` > 1 (as for `prune`; 0 and 1 are one shot) the budget is reached in that
    many steps of geometrically shrinking shares (`budget_shares`), the smaller model re-scored and re-tuned after
    each. Quality with paired CIs
    (also of the final plan untuned when tuning ran) is measured as `prune` does; refusals name the arguments
    as `names` says (as `prune`'s)."""
    check_names(names, "prune_to_budget names")
    check_callbacks("prune_to_budget", progress=progress, notice=notice)
    said = {name: named(name, names) for name in ("tune_fit", "drop_layers", "flops", "iterative")}
    if tune_fit not in MODES:
        raise UserError(f"{said['tune_fit']} {quoted(tune_fit)} is unknown; choose one of {', '.join(MODES)}.",
                        about=("tune_fit",))
    flops, latency, layer_prior, iterative, seq_len, latency_batch = checked_arguments(
        "prune_to_budget", flops=flops, latency=latency, layer_prior=layer_prior, iterative=iterative,
        seq_len=seq_len, latency_batch=latency_batch)
    check_loaded(loaded, "prune_to_budget loaded")
    steps = max(1, iterative)
    with concerning("method"):
        chosen = criterion(method, flag=named("method", names), neurons=True)
    with concerning("targets"):
        check_targets(targets, flag=named("targets", names))
    if drop_layers and flops is None:
        raise UserError(f"{said['drop_layers']} plans against {said['flops']}; the latency tables do not time a "
                        f"removed layer, so drop {said['drop_layers']} or pass {said['flops']}.",
                        about=("drop_layers", "flops"))
    if drop_layers and steps > 1:
        raise UserError(one_plan_problem(said["drop_layers"], said["iterative"], steps) + ".",
                        about=("drop_layers", "iterative"))
    with concerning("data"):
        pool = data_pool(loaded, data, names, eval_data=eval_data, method=chosen.name, targets=targets)
    check_calibration_size(pool, settings, tune=tune, names=names)
    score_pairs = pool.sample(settings.score_rows, seed=settings.seed)
    eval_pairs = eval_sample(eval_data, score_pairs, settings)
    with concerning("targets"):
        check_targets(targets, has_gold=gold(score_pairs) is not None, source=str(score_pairs.source),
                      flag=named("targets", names), gold_name=gold_name(loaded.task))
    budget = budget_of(loaded, flops=flops, latency=latency, seq_len=seq_len, latency_batch=latency_batch,
                       latency_cache=latency_cache, latency_runtime=latency_runtime, progress=progress, notice=notice,
                       names=names)
    calibration = pool.sample(settings.calibrate_rows, seed=settings.seed + 1)

    def rescore(model, step: int) -> UnitScores:
        return score_units(_as_loaded(loaded, model), score_pairs, method=chosen.name, targets=targets,
                           batch_size=units_batch_size(settings.batch_size),
                           progress=stage(progress, "scoring" + (f" (step {step} of {steps})" if steps > 1 else ""),
                                          len(score_pairs)))

    def retune(model) -> Tuning:
        return tune_pruned(loaded, model, calibration, batch_size=settings.batch_size, fit=tune_fit, progress=progress)

    scores = unit_scores or rescore(loaded.model, 1)
    search = calibrated = None
    if drop_layers:
        calibrated = _calibrated(loaded, calibration, settings)
        search = _layer_search(loaded, scores, budget, calibrated, layer_prior, settings, progress)

    def run(planner):
        return prune_in_steps(loaded.model, budget, budget_shares(flops if flops is not None else latency, steps),
                              scores, rescore, retune if tune else None, planner)

    all_layers = (lambda b, s: b.plan(s, layer_prior))
    pruned_run = run((lambda b, s: search.plan) if search else all_layers)
    if search is not None and search.dropped and tune:
        pruned_run, search = _settle_drops(search, pruned_run, lambda: run(all_layers), calibrated, settings)
    model, plan, tuning, stepped = pruned_run
    untuned = None
    if tune and eval_pairs is not None:  # the final plan with masks only, for the report's before/after tuning
        untuned = copy.deepcopy(loaded.model).eval()
        apply_unit_plan(untuned, plan)
    pruned = _as_loaded(loaded, model)
    quality = quality_untuned = None
    if eval_pairs is not None:
        quality, *rest = budget_quality(loaded, [model] + ([untuned] if untuned is not None else []), eval_pairs,
                                        settings, progress)
        quality_untuned = rest[0] if rest else None
    layers, heads = mask_shape(loaded.model)
    return PruneResult(
        pruned, loaded, request={"layer_prior": layer_prior, "drop_layers": drop_layers},
        plan={"num_heads": heads, "total": layers * heads, "kept": sum(plan.heads_per_layer),
              "num_neurons": intermediate_size(loaded.model.config), **plan.to_dict()},
        scores={"how": _scores_how(scores, score_pairs), "data": score_pairs.provenance(), **scores.to_dict()},
        speed=speed_summary(loaded.model, model, seq_len=budget.seq_len, latency=settings.timing,
                            min_seconds=settings.latency_seconds),
        budget={**budget.record(plan, search), **({"steps": stepped} if steps > 1 else {})},
        tuning=tuning.record(tune, settings.calibrate_rows),
        quality=quality, quality_untuned=quality_untuned, notes=notes_for(eval_pairs, score_pairs, tuning.pairs),
        names=names)


def prune_in_steps(teacher, budget: Budget, shares: list[float], scores: UnitScores,
                   rescore: Callable[[object, int], UnitScores], retune: Callable[[object], Tuning] | None,
                   plan: Callable[[Budget, UnitScores], UnitPlan]) -> tuple:
    """A pruned copy of `teacher` planned by `plan(budget at the step's share, scores)` at each of `shares` in
    turn: `scores` plan the first step, `rescore(model, step)` the later ones, and `retune(model)` (None: no
    tuning) runs after every step. Returns the model, the final plan, the final tuning and one record per step."""
    model, chosen, tuning, stepped = copy.deepcopy(teacher).eval(), None, Tuning(None, [], []), []
    for step, share in enumerate(shares, start=1):
        if step > 1:  # the smaller, tuned model is judged again: a unit that backed up a removed one may matter now
            scores = rescore(model, step)
        chosen = plan(budget.at(share), scores)
        apply_unit_plan(model, chosen)
        if retune is not None:
            tuning = retune(model)
        stepped.append({"share": share, "plan_flops": chosen.flops(budget.costs),
                        "heads_per_layer": chosen.heads_per_layer, "neurons_per_layer": chosen.neurons_per_layer})
    return model, chosen, tuning, stepped


def _calibrated(loaded: LoadedModel, calibration: Pairs, settings: PruneSettings) -> tuple[Encoded, np.ndarray]:
    """The calibration pairs encoded and the unpruned model's logits on them, shared by the layer search and the
    check of its drops after tuning."""
    encoded = encode(loaded.tokenizer, calibration, max_length=loaded.max_length, model=loaded.model)
    return encoded, predict_logits(loaded.model, None, None, batch_size=settings.batch_size, encoded=encoded)


def _layer_search(loaded: LoadedModel, scores: UnitScores, budget: Budget, calibrated: tuple[Encoded, np.ndarray],
                  layer_prior: float, settings: PruneSettings, progress) -> LayerSearch:
    """Whole layers dropped where that brings the masked plan closer to the unpruned model (`prune.layers`)."""
    encoded, reference = calibrated
    depth = mask_shape(loaded.model)[0]
    return choose_layer_drops(loaded.model, scores, budget.costs, int(budget.budget), encoded,
                              reference=reference, layer_prior=layer_prior, batch_size=settings.batch_size,
                              progress=stage(progress, "choosing layers", depth * (depth + 1) // 2))


def _settle_drops(search: LayerSearch, with_drops: tuple, all_layers: Callable[[], tuple],
                  calibrated: tuple[Encoded, np.ndarray], settings: PruneSettings) -> tuple:
    """Tune the plan over all layers too and keep whichever tuned run (`prune_in_steps`'s tuple) is closer to the
    unpruned model on the calibration pairs tuning held out (`prune.layers.settle_drops`)."""
    encoded, reference = calibrated
    other = all_layers()
    divergences = [held_out_divergence(run[0], encoded, reference, batch_size=settings.batch_size)
                   for run in (with_drops, other)]
    search = settle_drops(search, *divergences, other[1])
    return (with_drops if search.dropped else other), search  # called only when the search dropped layers


def _as_loaded(loaded: LoadedModel, model) -> LoadedModel:
    """`model` (a pruned copy) with `loaded`'s tokenizer and record, for the passes that take a LoadedModel."""
    return LoadedModel(model, loaded.tokenizer, dict(loaded.meta), loaded.path, loaded.weights_hash)


def _scores_how(scores: UnitScores, pairs: Pairs) -> str:
    targets = f" ({scores.targets} targets)" if scores.targets else ""
    return f"{scores.method}{targets} of {len(pairs)} pairs from {pairs.source}"
