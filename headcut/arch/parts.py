"""`LayerParts`: the linears and norms of one encoder layer, as `layers.layer_parts` finds them. Its own module, so
the architecture table (`table`), which `layers` reads, names it without importing `layers` back."""
from __future__ import annotations

from dataclasses import dataclass

from torch import nn


@dataclass
class LayerParts:
    """The linears of one transformer layer. `attention` is None once the layer has lost every head."""

    index: int
    layer: nn.Module
    attention: nn.Module | None  # the module whose forward splits heads (holds q/k/v)
    query: nn.Linear | None  # None also where q, k and v are one fused linear (ModernBERT)
    key: nn.Linear | None
    value: nn.Linear | None
    out: nn.Linear | None  # attention output projection: input = concatenated head outputs
    ffn_in: nn.Linear | None  # None once the layer has lost every FFN neuron
    ffn_out: nn.Linear | None
    head_size: int
    attention_norm: nn.Module  # the norm whose input is residual + attention output (also in a stub)
    ffn_norm: nn.Module  # the norm whose input is residual + FFN output (pre-norm: the next layer's, or the final)
    head_ids: list[int]  # original (unpruned) id of each present head, in weight order
    neuron_ids: list[int]  # original id of each present FFN neuron, in weight order
    layer_id: int  # original id of the layer (differs from `index` once surgery removed layers below it)

    @property
    def num_heads(self) -> int:
        return len(self.head_ids)

    @property
    def num_neurons(self) -> int:
        return len(self.neuron_ids)
