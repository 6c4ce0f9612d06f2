"""Applying a plan: slice the heads out of a model's weights (exactly what masking them computes)."""
from __future__ import annotations

import copy

from headcut.arch import heads_per_layer, keep_heads, keep_neurons, mask_shape
from headcut.models import LoadedModel
from headcut.prune.budget import UnitPlan
from headcut.prune.plan import HeadPlan


def apply_plan(model, plan: HeadPlan) -> None:
    """Physically keep the plan's heads, in place. The model must still have all its heads, because
    the plan numbers heads as in the unpruned model."""
    shape = mask_shape(model)
    if (len(plan.keep), plan.num_heads) != shape:
        raise ValueError(f"plan is for {len(plan.keep)}x{plan.num_heads} heads, the model has {shape[0]}x{shape[1]}")
    if heads_per_layer(model) != [shape[1]] * shape[0]:
        raise ValueError("apply_plan needs an unpruned model; prune the original, or compose the plans")
    keep_heads(model, [list(k) for k in plan.keep])


def apply_unit_plan(model, plan: UnitPlan) -> None:
    """Keep the plan's heads and FFN neurons (original ids), in place; a model pruned before keeps the intersection."""
    keep_heads(model, [list(h) for h in plan.heads])
    keep_neurons(model, [list(n) for n in plan.neurons])


def pruned_copy(loaded: LoadedModel, plan: HeadPlan) -> LoadedModel:
    """A pruned deep copy of `loaded`; the original stays untouched (it is the reference in reports)."""
    model = copy.deepcopy(loaded.model)
    apply_plan(model, plan)
    model.eval()
    return LoadedModel(model, loaded.tokenizer, dict(loaded.meta), loaded.path, loaded.weights_hash)
