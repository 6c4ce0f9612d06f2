"""Layer access: each encoder layer's attention and FFN linears and norms (as `LayerParts`), the original
ids of the heads and neurons a (pruned) layer still has, and the mask shape.

A layer's heads are the `head_size`-wide row blocks of q/k/v (and of DeBERTa's own relative-position
projections; in ModernBERT's fused Wqkv, of each of its three thirds) and the matching column blocks of the
output projection. An FFN neuron is a row of the first linear (in a GLU, the row and its gate, `width` rows
apart) and a column of the second.
"""
from __future__ import annotations

import torch
from torch import nn

from headcut.arch.parts import LayerParts
from headcut.arch.stubs import HeadlessAttention, HeadlessSelfAttention, NeuronlessFFN, NeuronlessOutput
from headcut.arch.table import Architecture, architecture, head_size, num_heads_config
from headcut.model_arguments import takes_model


@takes_model
def encoder_layers(model) -> nn.ModuleList:
    return module_at(model.base_model, architecture(model).layers)


@takes_model
def set_encoder_layers(model, layers: nn.ModuleList) -> None:
    """Swap the encoder's layer list (counts in the config are the caller's business: see keep_layers)."""
    set_module_at(model.base_model, architecture(model).layers, layers)


def module_at(module, path: str):
    for name in path.split("."):
        module = getattr(module, name)
    return module


def set_module_at(module, path: str, value) -> None:
    *parents, name = path.split(".")
    setattr(module_at(module, ".".join(parents)) if parents else module, name, value)


# Original ids of the units a layer still has, kept on the layer module by surgery (absent: all of them), and
# the layer's own original id once surgery removed layers (absent: its position).
HEAD_IDS, NEURON_IDS, LAYER_ID = "headcut_head_ids", "headcut_neuron_ids", "headcut_layer_id"


def _ids(layer: nn.Module, attr: str, count: int) -> list[int]:
    ids = getattr(layer, attr, None)
    return list(range(count)) if ids is None else list(ids)


def _optional(module, path: str | None):
    return None if path is None else module_at(module, path)


@takes_model
def layer_parts(model) -> list[LayerParts]:
    """The linears of every layer, in order."""
    arch = architecture(model)
    size = head_size(model.config)
    layers = encoder_layers(model)
    parts = []
    for i, layer in enumerate(layers):
        headless = isinstance(module_at(layer, arch.attention_block), (HeadlessAttention, HeadlessSelfAttention))
        if headless:
            heads = (None,) * 5
        else:
            qkv = (_optional(layer, p) for p in (arch.query, arch.key, arch.value))
            heads = (module_at(layer, arch.attention), *qkv, module_at(layer, arch.out))
        neuronless = isinstance(module_at(layer, arch.ffn_block), (NeuronlessOutput, NeuronlessFFN))
        ffn = (None, None) if neuronless else (module_at(layer, arch.ffn_in), module_at(layer, arch.ffn_out))
        attention_norm = module_at(layer, arch.headless_norm if headless else arch.attention_norm)
        norms = (attention_norm, _ffn_norm(model, arch, layers, i))
        n_heads = 0 if heads[4] is None else heads[4].in_features // size
        n_neurons = 0 if ffn[1] is None else ffn[1].in_features
        parts.append(LayerParts(i, layer, *heads, *ffn, size, *norms, _ids(layer, HEAD_IDS, n_heads),
                                _ids(layer, NEURON_IDS, n_neurons), int(getattr(layer, LAYER_ID, i))))
    return parts


def _ffn_norm(model, arch: Architecture, layers: nn.ModuleList, index: int) -> nn.Module:
    """The norm whose input is layer `index`'s residual + FFN output: in a post-norm layer its own; pre-norm,
    the next layer's input norm, or the final norm after the last layer."""
    if arch.pre_norm is None:
        return module_at(layers[index], arch.ffn_norm)
    input_norm, final_norm = arch.pre_norm
    if index + 1 < len(layers):
        return module_at(layers[index + 1], input_norm)
    return module_at(model.base_model, final_norm)


@takes_model
def after_attention(model, part: LayerParts, pre_norm: torch.Tensor) -> torch.Tensor:
    """Layer `part`'s output from the input of its attention norm (residual + attention output), as the layer
    computes it (also with a 0-neuron stub). It acts row by row."""
    return architecture(model).finish(part, pre_norm)


@takes_model
def layer_ids(model) -> list[int]:
    """The original id of each present encoder layer, in order (0..L-1 until surgery removes layers)."""
    return [int(getattr(layer, LAYER_ID, i)) for i, layer in enumerate(encoder_layers(model))]


@takes_model
def heads_per_layer(model) -> list[int]:
    return [p.num_heads for p in layer_parts(model)]


@takes_model
def neurons_per_layer(model) -> list[int]:
    return [p.num_neurons for p in layer_parts(model)]


@takes_model
def mask_shape(model) -> tuple[int, int]:
    """Masks and scores are (num_layers, num_heads of the unpruned config), indexed by original head ids:
    column h of layer l is head h of the unpruned model, whether or not a pruned layer still has it. Rows are
    the layers the model has, in order (`layer_ids` names their original ids once layers were removed)."""
    return (len(encoder_layers(model)), num_heads_config(model.config))


@takes_model
def present_heads(model) -> torch.Tensor:
    """(num_layers, num_heads) bool, original ids: True where the (possibly pruned) model still has the head."""
    present = torch.zeros(mask_shape(model), dtype=torch.bool)
    for p in layer_parts(model):
        present[p.index, p.head_ids] = True
    return present
