"""Applying a plan: slice the heads (and FFN neurons, and layers) out of a model's weights (exactly what
masking them computes)."""
from __future__ import annotations

import copy

from headcut.arch import heads_per_layer, keep_heads, keep_layers, keep_neurons, layer_ids, mask_shape
from headcut.models import LoadedModel
from headcut.model_arguments import check_loaded, check_model
from headcut.prune.budget import UnitPlan
from headcut.prune.plan import HeadPlan


def apply_plan(model, plan: HeadPlan) -> None:
    """Physically keep the plan's heads, in place. The model must still have all its heads, because
    the plan numbers heads as in the unpruned model."""
    check_model(model, "apply_plan model")
    shape = mask_shape(model)
    if (len(plan.keep), plan.num_heads) != shape:
        raise ValueError(f"plan is for {len(plan.keep)}x{plan.num_heads} heads, the model has {shape[0]}x{shape[1]}")
    if heads_per_layer(model) != [shape[1]] * shape[0]:
        raise ValueError("apply_plan needs an unpruned model; prune the original, or compose the plans")
    keep_heads(model, [list(k) for k in plan.keep])


def pruned_copy(loaded: LoadedModel, plan: HeadPlan) -> LoadedModel:
    """A pruned deep copy of `loaded`; the original stays untouched (it is the reference in reports)."""
    check_loaded(loaded, "pruned_copy loaded")
    model = copy.deepcopy(loaded.model)
    apply_plan(model, plan)
    model.eval()
    return LoadedModel(model, loaded.tokenizer, dict(loaded.meta), loaded.path, loaded.weights_hash)


def apply_unit_plan(model, plan: UnitPlan) -> None:
    """Physically keep the plan's heads and FFN neurons, then remove the layers it drops, in place. Exact: the
    result equals the unpruned model under the plan's head, neuron and layer masks (`UnitPlan.masks`). A model
    pruned before (a step of an iterative prune) keeps the intersection."""
    if len(plan.heads) != len(layer_ids(model)):
        raise ValueError(f"the plan is for {len(plan.heads)} layers, the model has {len(layer_ids(model))}")
    keep_heads(model, [list(h) for h in plan.heads])
    keep_neurons(model, [list(n) for n in plan.neurons])
    if plan.dropped_layers:
        keep_layers(model, list(plan.kept_layers))
