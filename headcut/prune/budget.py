"""Which heads and FFN neurons to keep under a FLOPs budget: the most total importance that fits.

Costs are additive (`arch.unit_flops`): every head of a layer costs the same, every neuron too. So for a
given number of kept heads the best choice is the top heads by score, and the rest of the budget is best
spent on the top neurons; sweeping the number of heads (Kwon et al. 2022) finds the exact optimum of the
sum of kept scores. Scores are Fisher importances (loss units, comparable between heads and neurons),
multiplied by the layer prior `1 + layer_prior * (L - 1 - l) / (L - 1)` as for heads alone.
A layer may lose all its heads or all its neurons: surgery then leaves an exact stub. A plan may also drop
whole layers (`layers`, chosen by measurement in `prune.layers`): they cost nothing, as a layer of two stubs,
but surgery removes them, so their biases and LayerNorms no longer act either.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from headcut.arch import UnitFlops
from headcut_grader.errors import UserError, setting
from headcut.evaluate.fisher import UnitScores, check_unit_scores
from headcut.prune.plan import layer_weights


@dataclass(frozen=True)
class UnitPlan:
    """Kept heads and FFN neurons per layer, by original id, and the kept layers (original ids; None: all). A
    dropped layer keeps no units: it costs nothing and surgery removes it whole."""

    heads: tuple[tuple[int, ...], ...]
    neurons: tuple[tuple[int, ...], ...]
    layers: tuple[int, ...] | None = None

    def __post_init__(self):
        busy = [i for i in range(len(self.heads)) if i not in self.kept_layers and (self.heads[i] or self.neurons[i])]
        if busy:
            raise ValueError(f"the plan drops layers {busy} but keeps units in them")

    @property
    def kept_layers(self) -> tuple[int, ...]:
        return tuple(range(len(self.heads))) if self.layers is None else tuple(self.layers)

    @property
    def dropped_layers(self) -> list[int]:
        return [i for i in range(len(self.heads)) if i not in self.kept_layers]

    @property
    def heads_per_layer(self) -> list[int]:
        return [len(h) for h in self.heads]

    @property
    def neurons_per_layer(self) -> list[int]:
        return [len(n) for n in self.neurons]

    def flops(self, costs: UnitFlops) -> int:
        return costs.total(self.heads_per_layer, self.neurons_per_layer)  # a dropped layer has no units: 0

    def masks(self, num_heads: int, num_neurons: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The plan as masks of the unpruned model, 1 = keep: heads (layers, num_heads), FFN neurons
        (layers, num_neurons) and layers (layers,) (`masking.head_mask`, `neuron_mask`, `layer_mask`)."""
        layers = len(self.heads)
        heads, neurons = torch.zeros(layers, num_heads), torch.zeros(layers, num_neurons)
        for i, (h, n) in enumerate(zip(self.heads, self.neurons)):
            heads[i, list(h)] = 1.0
            neurons[i, list(n)] = 1.0
        kept = torch.zeros(layers)
        kept[list(self.kept_layers)] = 1.0
        return heads, neurons, kept

    def to_dict(self) -> dict:
        return {"heads_per_layer": self.heads_per_layer, "neurons_per_layer": self.neurons_per_layer,
                "heads": [list(h) for h in self.heads], "neurons": [list(n) for n in self.neurons],
                "layers": list(self.kept_layers)}


def check_budget(flops: float, costs: UnitFlops, full: int, *, flag: str = "flops") -> int:
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


def only_layers(scores: UnitScores, layers) -> UnitScores:
    """`scores` with every unit outside `layers` (layer ids) absent (-inf), so plans keep none of them."""
    drop = torch.ones(scores.heads.shape[0], dtype=torch.bool)
    drop[list(layers)] = False
    heads, neurons = scores.heads.clone(), scores.neurons.clone()
    heads[drop], neurons[drop] = float("-inf"), float("-inf")
    return replace(scores, heads=heads, neurons=neurons)


def plan_budget(scores: UnitScores, costs: UnitFlops, budget: int, *, layer_prior: float = 0.0,
                layers=None) -> UnitPlan:
    """Keep the heads and neurons of largest total (prior-weighted) score whose FLOPs fit `budget`; with
    `layers` (ids), only units of those layers, and the plan drops the others whole."""
    if layer_prior < 0 or layer_prior != layer_prior:
        raise UserError(f"layer_prior={layer_prior} is not a number >= 0; pass 0 (global ranking) or more.")
    check_unit_scores(scores)
    if layers is not None:
        layers = tuple(sorted(set(int(i) for i in layers)))
        scores = only_layers(scores, layers)
    head_units, head_value, head_spent = _order(scores.heads, costs.per_head, layer_prior)
    neuron_units, neuron_value, neuron_spent = _order(scores.neurons, costs.per_neuron, layer_prior)
    room = budget - costs.fixed - head_spent  # left for neurons after the k best heads, k = 0..H
    fits = room >= 0
    if not fits.any():
        raise UserError(f"a budget of {budget:,} FLOPs is below the fixed cost {costs.fixed:,}; pass a larger share.")
    # the most neurons whose cumulative cost fits the room left by each head count
    count = torch.searchsorted(neuron_spent, room.clamp_min(0), right=True) - 1
    total = torch.where(fits, head_value + neuron_value[count.clamp_min(0)],
                        torch.tensor(float("-inf"), dtype=torch.float64))
    k = int(torch.argmax(total))
    m = int(count[k])
    depth = scores.heads.shape[0]
    heads = [[] for _ in range(depth)]
    for layer, unit in head_units[:k].tolist():
        heads[layer].append(unit)
    neurons = [[] for _ in range(depth)]
    for layer, unit in neuron_units[:m].tolist():
        neurons[layer].append(unit)
    return UnitPlan(tuple(tuple(sorted(h)) for h in heads), tuple(tuple(sorted(n)) for n in neurons), layers)
