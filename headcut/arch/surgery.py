"""Surgery: physically keep only the listed heads, FFN neurons or layers of a model (exact: the result equals
the model with the rest masked to zero), the shape record that rebuilds a pruned model, and `widen` back to
the unpruned shape."""
from __future__ import annotations

import copy

import torch
from torch import nn

from headcut_grader.errors import UserError

from headcut.arch.layers import (HEAD_IDS, LAYER_ID, NEURON_IDS, encoder_layers, layer_ids, layer_parts, module_at,
                                 set_encoder_layers, set_module_at)
from headcut.arch.table import architecture
from headcut.model_arguments import check_model, takes_model


def _slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear keeping `index` rows (dim=0: outputs) or columns (dim=1: inputs)."""
    weight = linear.weight.detach().index_select(dim, index).clone()
    bias = None
    if linear.bias is not None:
        bias = linear.bias.detach().clone() if dim == 1 else linear.bias.detach()[index].clone()
    new = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device=weight.device, dtype=weight.dtype)
    new.weight = nn.Parameter(weight, requires_grad=linear.weight.requires_grad)
    if bias is not None:
        new.bias = nn.Parameter(bias, requires_grad=linear.bias.requires_grad)
    return new


def _positions(layer: int, what: str, present: list[int], keep) -> list[int]:
    """Weight positions of the original ids in `keep`, in weight order; an id the layer lacks is an error."""
    where = {unit: i for i, unit in enumerate(present)}
    missing = sorted(set(int(u) for u in keep) - set(where))
    if missing:
        raise ValueError(f"layer {layer} has no {what} {missing} (it has {present})")
    return sorted(where[int(u)] for u in set(int(u) for u in keep))


def _blocks(index: torch.Tensor, blocks: int, width: int) -> torch.Tensor:
    """`index` repeated in each of `blocks` stacked blocks of `width` rows (fused q/k/v thirds, GLU halves)."""
    return torch.cat([index + b * width for b in range(blocks)])


@takes_model
def keep_heads(model, keep: list[list[int]]) -> None:
    """Physically keep only the listed heads of each layer, in place. Heads are named by their original
    ids (the unpruned model's numbering, as in masks and scores), so plans compose on a pruned model.

    Slices q/k/v rows (also of fused or relative-position projections) and the output projection's columns;
    a layer left with no heads gets an exact stub.
    Exact: the result equals the model with the other heads masked to zero. Each layer remembers the
    original ids of the heads it keeps (`LayerParts.head_ids`).
    """
    parts = layer_parts(model)
    if len(keep) != len(parts):
        raise ValueError(f"keep lists {len(keep)} layers, the model has {len(parts)}")
    arch = architecture(model)
    for p, heads in zip(parts, keep):
        heads = _positions(p.index, "heads", p.head_ids, heads)
        if p.attention is None or heads == list(range(p.num_heads)):
            continue
        setattr(p.layer, HEAD_IDS, [p.head_ids[h] for h in heads])
        if not heads:
            arch.headless(p.layer, _bias(p.out))
            continue
        rows = torch.cat([torch.arange(h * p.head_size, (h + 1) * p.head_size) for h in heads]).to(p.out.weight.device)
        for path in (arch.query, arch.key, arch.value, *arch.head_rows):
            if path is not None and _has(p.layer, path):
                linear = module_at(p.layer, path)
                blocks = linear.out_features // p.out.in_features  # 3: a fused q/k/v linear
                set_module_at(p.layer, path, _slice_linear(linear, _blocks(rows, blocks, p.out.in_features), 0))
        set_module_at(p.layer, arch.out, _slice_linear(p.out, rows, 1))
        if arch.heads_attr:
            setattr(p.attention, arch.heads_attr, len(heads))
        if arch.all_head_size_attr:
            setattr(p.attention, arch.all_head_size_attr, len(heads) * p.head_size)


def _has(module, path: str) -> bool:
    """Whether `path` names a module (DeBERTa builds its relative-position projections only for some configs)."""
    *parents, name = path.split(".")
    return hasattr(module_at(module, ".".join(parents)) if parents else module, name)


def _bias(linear: nn.Linear) -> torch.Tensor:
    return linear.bias.detach() if linear.bias is not None else torch.zeros(linear.out_features)


@takes_model
def keep_neurons(model, keep: list[list[int]]) -> None:
    """Physically keep only the listed FFN neurons per layer (original ids: rows of ffn_in, columns of
    ffn_out; in a GLU also the gate rows), in place. A layer left with none gets an exact stub. Exact: equals
    the model with the other neurons masked to zero; each layer remembers the kept neurons' original ids
    (`LayerParts.neuron_ids`)."""
    parts = layer_parts(model)
    if len(keep) != len(parts):
        raise ValueError(f"keep lists {len(keep)} layers, the model has {len(parts)}")
    arch = architecture(model)
    for p, neurons in zip(parts, keep):
        neurons = _positions(p.index, "FFN neurons", p.neuron_ids, neurons)
        if p.ffn_in is None or neurons == list(range(p.num_neurons)):
            continue
        setattr(p.layer, NEURON_IDS, [p.neuron_ids[n] for n in neurons])
        if not neurons:
            arch.neuronless(p.layer, _bias(p.ffn_out))
            continue
        index = torch.tensor(neurons, device=p.ffn_in.weight.device)
        rows = _blocks(index, arch.ffn_in_blocks, p.num_neurons)
        set_module_at(p.layer, arch.ffn_in, _slice_linear(p.ffn_in, rows, 0))
        set_module_at(p.layer, arch.ffn_out, _slice_linear(p.ffn_out, index, 1))


@takes_model
def keep_layers(model, keep: list[int]) -> None:
    """Keep only the listed encoder layers (positions in the model as it is, in order), in place; updates the
    config's layer count and per-layer lists. Exact: the result equals the model with the other layers skipped
    (`masking.layer_mask`). Each kept layer remembers its original id (`arch.layer_ids`)."""
    layers = encoder_layers(model)
    keep = sorted(set(int(i) for i in keep))
    if not keep or keep[0] < 0 or keep[-1] >= len(layers):
        raise ValueError(f"keep_layers needs 1 or more of the layers 0..{len(layers) - 1}, got {keep}")
    for i, original in enumerate(layer_ids(model)):
        setattr(layers[i], LAYER_ID, original)
    kept = nn.ModuleList([layers[i] for i in keep])
    set_encoder_layers(model, kept)
    model.config.num_hidden_layers = len(kept)
    arch = architecture(model)
    for path in arch.layer_counts:
        set_module_at(model.base_model, path, len(kept))
    for name in arch.layer_lists:
        setattr(model.config, name, [getattr(model.config, name)[i] for i in keep])
    for new_index, layer in enumerate(kept):
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = new_index


@takes_model
def shape_record(model) -> dict:
    """What `apply_shape` needs to rebuild this model's (pruned) structure from its config (which counts the
    layers it has), with the original ids of the layers, and of the heads and FFN neurons each layer kept (one
    numbering for masks and scores)."""
    parts = layer_parts(model)
    return {
        "layer_ids": [p.layer_id for p in parts],
        "heads_per_layer": [p.num_heads for p in parts],
        "intermediate_per_layer": [p.num_neurons for p in parts],
        "head_ids": [p.head_ids for p in parts],
        "neuron_ids": [p.neuron_ids for p in parts],
    }


@takes_model
def apply_shape(model, record: dict) -> None:
    """Give a freshly built model the structure in `record` (weights are loaded afterwards). The config built
    the right number of layers (`keep_layers` counted them); records without layer ids mean every layer, and
    records written before unit ids were kept mean each layer's first heads/neurons."""
    ids = record.get("layer_ids")
    if ids is not None:
        layers = encoder_layers(model)
        if len(ids) != len(layers):
            raise ValueError(f"the shape record names {len(ids)} layers, the config builds {len(layers)}")
        arch = architecture(model)
        for layer, original in zip(layers, ids):
            setattr(layer, LAYER_ID, int(original))
            if arch.moved_layer is not None:
                arch.moved_layer(layer, model.config, int(original))
    heads = record.get("head_ids") or [list(range(n)) for n in record.get("heads_per_layer") or []]
    if heads:
        keep_heads(model, heads)
    neurons = record.get("neuron_ids") or [list(range(n)) for n in record.get("intermediate_per_layer") or []]
    if neurons:
        keep_neurons(model, neurons)


@takes_model
def widen(model, full, *, keep_layers_said: str = "") -> None:
    """Copy `model` (pruned, or not) into `full`, its unpruned twin built from the same config, in place: each
    kept head / neuron at its original id, every pruned one zero. Exact: a zero head or neuron adds nothing, as a
    masked one (GELU(0) = 0), and a 0-unit stub's bias is the zero sublayer's output bias. For readers that cannot
    rebuild per-layer shapes (sentence-transformers, plain `from_pretrained`). Removed layers stay removed: `full`
    has the layers `model` kept (its config counts them), each at full width; refused where a plain reader would
    build a moved layer differently (ModernBERT without its first layer), naming `keep_layers_said`, the prune setting
    that keeps layers as the caller writes it (models.save_cross_encoder passes its caller's: drop_layers=False,
    --no-drop-layers; arch names no other room's settings)."""
    check_model(full, "widen full")
    if len(encoder_layers(full)) != len(encoder_layers(model)):
        raise ValueError(f"widen needs a twin with the model's {len(encoder_layers(model))} layers, "
                         f"got {len(encoder_layers(full))}")
    changed = _moved_layers_differ(model, full)
    if changed is not None:
        keep = f" ({keep_layers_said})" if keep_layers_said else ""
        raise UserError(f"this {full.config.model_type} model lost the encoder layers below its layer {changed}, "
                        "which a plain transformers reader rebuilds without parts that layer has; prune it without "
                        f"dropping layers{keep} to write a CrossEncoder folder.")
    own, target = model.state_dict(), full.state_dict()
    full.load_state_dict({k: own[k] if k in own and own[k].shape == v.shape else v for k, v in target.items()})
    arch = architecture(full)
    with torch.no_grad():
        for p, f in zip(layer_parts(model), layer_parts(full)):
            rows = [torch.arange(h * p.head_size, (h + 1) * p.head_size) for h in p.head_ids]
            rows = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)
            stub = None if p.attention is not None else module_at(p.layer, arch.attention_block)
            _widen_pair(f.query, f.key, f.value, f.out, p.query, p.key, p.value, p.out, rows, stub)
            stub = None if p.ffn_in is not None else module_at(p.layer, arch.ffn_block)
            _widen_pair(f.ffn_in, None, None, f.ffn_out, p.ffn_in, None, None, p.ffn_out,
                        torch.tensor(p.neuron_ids, dtype=torch.long), stub)
            f.attention_norm.load_state_dict(p.attention_norm.state_dict())
            f.ffn_norm.load_state_dict(p.ffn_norm.state_dict())


def _moved_layers_differ(model, full) -> int | None:
    """The original id of the first layer of `model` whose fresh build at its new position (in `full`, as a
    plain reader builds it) lacks or adds parameters that the architecture's `moved_layer` would fix; None when
    every layer rebuilds as it is."""
    arch = architecture(full)
    if arch.moved_layer is None:
        return None
    for layer, original in zip(encoder_layers(full), layer_ids(model)):
        fixed = copy.deepcopy(layer)
        arch.moved_layer(fixed, full.config, original)
        if set(fixed.state_dict()) != set(layer.state_dict()):
            return original
    return None


def _widen_pair(full_ins, full_k, full_v, full_out, ins, k, v, out, rows, stub) -> None:
    """Inputs' kept rows and the output's kept columns into zeroed full linears; a stub gives the output bias."""
    for full_in, part in ((full_ins, ins), (full_k, k), (full_v, v)):
        if full_in is None:
            continue
        full_in.weight.zero_()
        full_in.bias.zero_()
        if part is not None:
            full_in.weight[rows] = part.weight
            full_in.bias[rows] = part.bias
    full_out.weight.zero_()
    if out is not None:
        full_out.weight[:, rows] = out.weight
        full_out.bias.copy_(_bias(out))
    else:
        full_out.bias.copy_(stub.bias.detach())
