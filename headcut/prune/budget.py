"""Which heads and FFN neurons to keep under a FLOPs budget: the most total importance that fits.

Costs are additive (`arch.unit_flops`): every head of a layer costs the same, every neuron too. So for a
given number of kept heads the best choice is the top heads by score, and the rest of the budget is best
spent on the top neurons; sweeping the number of heads (Kwon et al. 2022) finds the exact optimum of the
sum of kept scores. Scores are Fisher importances (loss units, comparable between heads and neurons),
multiplied by the layer prior `1 + layer_prior * (L - 1 - l) / (L - 1)` as for heads alone.
A layer may lose all its heads or all its neurons: surgery then leaves an exact stub.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from headcut.arch import UnitFlops
from headcut_grader.errors import UserError, setting
from headcut.evaluate.fisher import UnitScores, check_unit_scores
from headcut.prune.plan import layer_weights


@dataclass(frozen=True)
class UnitPlan:
    """Kept heads and FFN neurons per layer, by original id."""

    heads: tuple[tuple[int, ...], ...]
    neurons: tuple[tuple[int, ...], ...]

    @property
    def heads_per_layer(self) -> list[int]:
        return [len(h) for h in self.heads]

    @property
    def neurons_per_layer(self) -> list[int]:
        return [len(n) for n in self.neurons]

    def flops(self, costs: UnitFlops) -> int:
        return costs.total(self.heads_per_layer, self.neurons_per_layer)

    def to_dict(self) -> dict:
        return {"heads_per_layer": self.heads_per_layer, "neurons_per_layer": self.neurons_per_layer,
                "heads": [list(h) for h in self.heads], "neurons": [list(n) for n in self.neurons]}


def check_budget(flops: float, costs: UnitFlops, full: int, *, flag: str = "--flops") -> int:
    """The budget in FLOPs for a share `flops` of the full model's; refused when nothing fits."""
    if not (0 < flops <= 1):
        raise UserError(f"{setting(flag, flops)} is outside (0, 1]; pass the share of the model's FLOPs to keep, "
                        f"e.g. {setting(flag, 0.5)}.")
    budget = int(flops * full)
    if budget < costs.fixed:
        raise UserError(f"{setting(flag, flops)} allows {budget:,} FLOPs per pair, less than the pooler and classifier "
                        f"alone need ({costs.fixed:,}, {costs.fixed / full:.2g} of the model); pass a larger share.")
    return budget


def _order(scores: torch.Tensor, cost: list[int], layer_prior: float):
    """Present units sorted by prior-weighted score per FLOP: (layer, id) pairs, cumulative value and cost."""
    weighted = scores.to(torch.float64) * layer_weights(scores.shape[0], layer_prior)[:, None]
    unit_cost = torch.tensor(cost, dtype=torch.float64)[:, None].expand_as(weighted)
    present = torch.isfinite(weighted)
    flat = torch.nonzero(present)
    ratio = weighted[present] / unit_cost[present]
    order = torch.argsort(ratio, descending=True, stable=True)
    units = flat[order]
    value = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(weighted[present][order], 0)])
    spent = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(unit_cost[present][order], 0)])
    return units, value, spent


def plan_budget(scores: UnitScores, costs: UnitFlops, budget: int, *, layer_prior: float = 0.0) -> UnitPlan:
    """Keep the heads and neurons of largest total (prior-weighted) score whose FLOPs fit `budget`."""
    if layer_prior < 0 or layer_prior != layer_prior:
        raise UserError(f"--layer-prior {layer_prior} is not a number >= 0; pass 0 (global ranking) or more.")
    check_unit_scores(scores)
    head_units, head_value, head_spent = _order(scores.heads, costs.per_head, layer_prior)
    neuron_units, neuron_value, neuron_spent = _order(scores.neurons, costs.per_neuron, layer_prior)
    room = budget - costs.fixed - head_spent  # left for neurons after the k best heads, k = 0..H
    fits = room >= 0
    if not fits.any():
        raise UserError(f"a budget of {budget:,} FLOPs is below the fixed cost {costs.fixed:,}; pass a larger share.")
    # the most neurons whose cumulative cost fits the room left by each head count
    count = torch.searchsorted(neuron_spent, room.clamp_min(0), right=True) - 1
    total = torch.where(fits, head_value + neuron_value[count.clamp_min(0)], torch.tensor(float("-inf"), dtype=torch.float64))
    k = int(torch.argmax(total))
    m = int(count[k])
    layers = scores.heads.shape[0]
    heads = [[] for _ in range(layers)]
    for layer, unit in head_units[:k].tolist():
        heads[layer].append(unit)
    neurons = [[] for _ in range(layers)]
    for layer, unit in neuron_units[:m].tolist():
        neurons[layer].append(unit)
    return UnitPlan(tuple(tuple(sorted(h)) for h in heads), tuple(tuple(sorted(n)) for n in neurons))
