"""Dropping whole encoder layers under a FLOPs budget, chosen by measurement.

A FLOPs plan (`prune.budget`) may already leave a layer with no heads and no neurons, but that layer still
acts: its output biases and LayerNorms move the hidden state. Removing it instead frees nothing in FLOPs
terms but changes what the model computes, and dropping a layer that keeps units gives its FLOPs to the
other layers' best units. Whether either helps is a question for the data, so the search asks it: starting
from the plan over all layers, each round tries dropping each remaining layer, re-plans the budget over the
others' units, and scores the candidate by its divergence from the unpruned model's outputs on calibration
pairs, with masks only (no copies, no tuning). The best drop is kept if it lowers the divergence; the search
stops when no drop helps or one layer remains. At most L(L+1)/2 masked passes over the calibration pairs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from headcut.arch import UnitFlops, intermediate_size, mask_shape
from headcut.batching import Encoded
from headcut.evaluate.fisher import UnitScores
from headcut.evaluate.importance import example_change
from headcut.evaluate.predict import predict_logits
from headcut.masking import head_mask, layer_mask, neuron_mask
from headcut.prune.budget import UnitPlan, plan_budget


@dataclass(frozen=True)
class LayerTrial:
    """One candidate of the search: the plan that drops `layer` too (after `round - 1` earlier drops), and its
    mean divergence from the unpruned model on the calibration pairs."""

    round: int
    layer: int
    divergence: float

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LayerSearch:
    """The plan the search chose, the divergence of the plan over all layers (`baseline`) and of the chosen one,
    and every candidate tried. Divergence: mean KL(unpruned || plan) of the grade distributions, or the mean
    squared change of a one-score model's score. `tuned` (when tuning checked the drops, `settle_drops`): the
    tuned models' divergences with the drops the search `proposed` and over all layers; `plan` is then the
    closer one's."""

    plan: UnitPlan
    baseline: float
    divergence: float
    trials: list[LayerTrial]
    pairs: int
    proposed: tuple[int, ...] = ()
    tuned: dict | None = None

    @property
    def dropped(self) -> list[int]:
        return self.plan.dropped_layers

    def to_dict(self) -> dict:
        return {"dropped": self.dropped, "kept": list(self.plan.kept_layers), "pairs": self.pairs,
                "divergence_all_layers": self.baseline, "divergence": self.divergence,
                "trials": [t.to_dict() for t in self.trials],
                **({"proposed": list(self.proposed), "tuned": self.tuned} if self.tuned else {})}


def held_out_divergence(model, encoded: Encoded, reference: np.ndarray, *, batch_size: int = 64) -> float:
    """Mean divergence of `model` (a pruned, tuned copy) from the unpruned model's `reference` logits on the
    calibration pairs mask tuning holds out (every fifth, `prune.tune`)."""
    logits = predict_logits(model, None, None, batch_size=batch_size, encoded=encoded)
    held = np.arange(len(reference)) % 5 == 4
    return float(example_change(reference[held], logits[held]).mean())


def settle_drops(search: LayerSearch, with_drops: float, all_layers: float, all_layers_plan: UnitPlan) -> LayerSearch:
    """The search judged masked, untuned plans, and tuning repairs a thinned layer better than a missing one; so
    its drops stand only if, tuned, they are closer to the unpruned model (`with_drops`) than the tuned plan over
    all layers (`all_layers`, `all_layers_plan`)."""
    plan = search.plan if with_drops < all_layers else all_layers_plan
    return replace(search, plan=plan, proposed=tuple(search.dropped),
                   tuned={"with_drops": with_drops, "all_layers": all_layers})


def plan_divergence(teacher, plan: UnitPlan, encoded: Encoded, reference: np.ndarray, *,
                    batch_size: int = 64) -> float:
    """Mean divergence of `teacher` under the plan's head, neuron and layer masks from its own `reference`
    logits on `encoded` (`evaluate.importance.example_change`)."""
    heads, neurons, layers = plan.masks(mask_shape(teacher)[1], intermediate_size(teacher.config))
    with head_mask(teacher, heads), neuron_mask(teacher, neurons), layer_mask(teacher, layers):
        logits = predict_logits(teacher, None, None, batch_size=batch_size, encoded=encoded)
    return float(example_change(reference, logits).mean())


def choose_layer_drops(teacher, scores: UnitScores, costs: UnitFlops, budget: int, encoded: Encoded,
                       reference: np.ndarray | None = None, *, layer_prior: float = 0.0, batch_size: int = 64,
                       progress: Callable[[int], None] | None = None) -> LayerSearch:
    """Greedy layer drops for `teacher` (unpruned) under `budget` FLOPs per pair (`costs` at its sequence
    length), each candidate re-planned with `plan_budget` over the layers it keeps and measured on the
    calibration pairs `encoded` (labels unused) against the teacher's `reference` logits on them (None: computed
    here). `progress(1)` after each masked pass."""
    if reference is None:
        reference = predict_logits(teacher, None, None, batch_size=batch_size, encoded=encoded)

    def measure(plan: UnitPlan) -> float:
        divergence = plan_divergence(teacher, plan, encoded, reference, batch_size=batch_size)
        if progress:
            progress(1)
        return divergence

    kept = list(range(mask_shape(teacher)[0]))
    best = plan_budget(scores, costs, budget, layer_prior=layer_prior)
    baseline = current = measure(best)
    trials = []
    for round_ in range(1, len(kept)):
        candidates = []
        for layer in kept:
            plan = plan_budget(scores, costs, budget, layer_prior=layer_prior, layers=[i for i in kept if i != layer])
            divergence = measure(plan)
            trials.append(LayerTrial(round_, layer, divergence))
            candidates.append((divergence, layer, plan))
        divergence, layer, plan = min(candidates, key=lambda c: (c[0], c[1]))
        if not divergence < current:
            break
        current, best = divergence, plan
        kept.remove(layer)
    return LayerSearch(best, baseline, current, trials, len(encoded))
