"""What a model costs: matrix-multiply FLOPs of one pair (split by what pruning can remove) and parameters."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from headcut.arch.layers import encoder_layers, layer_parts
from headcut.arch.table import architecture
from headcut.model_arguments import takes_model
from headcut_grader.ranges import Range, checked_number


@takes_model
def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())


@dataclass(frozen=True)
class UnitFlops:
    """Matrix-multiply FLOPs of one pair at a sequence length, split by what pruning can remove:
    flops_per_pair = fixed + sum over layers of (heads x per_head[l] + neurons x per_neuron[l])."""

    per_head: list[int]
    per_neuron: list[int]
    fixed: int

    def total(self, heads: list[int], neurons: list[int]) -> int:
        return self.fixed + sum(h * c for h, c in zip(heads, self.per_head)) + sum(
            n * c for n, c in zip(neurons, self.per_neuron))


@takes_model
def unit_flops(model, seq_len: int) -> UnitFlops:
    """Per-head and per-neuron FLOPs of every layer (as if unpruned: the cost of one more unit), and the
    fixed part: the pooler and classifier, which read the first token only. Embeddings, LayerNorm and
    softmax are left out (under 1% here). 2 FLOPs per multiply-add. A local-attention layer counts the
    query/key pairs inside its window; a GLU neuron, its value and gate rows."""
    n = checked_number(seq_len, "unit_flops seq_len", Range(1), whole=True)  # 0 or -64 counted 0 or negative FLOPs
    config = model.config
    d = config.hidden_size
    arch = architecture(model)
    layers = len(encoder_layers(model))
    per_head = [arch.head_flops(config, layer, n) for layer in range(layers)]
    per_neuron = 2 * n * d * (arch.ffn_in_blocks + 1)  # the FFN's first linear's row(s), a column of its second
    encoder = {id(m) for m in encoder_layers(model).modules()}
    embeddings = {id(m) for m in model.base_model.embeddings.modules()}
    fixed = sum(2 * m.in_features * m.out_features for m in model.modules()
                if isinstance(m, torch.nn.Linear) and id(m) not in encoder and id(m) not in embeddings)
    return UnitFlops(per_head, [per_neuron] * layers, int(fixed))


@takes_model
def flops_per_pair(model, seq_len: int) -> int:
    """Matrix-multiply FLOPs (2 per multiply-add) of one forward pass of one pair of `seq_len` tokens,
    counted from the model's present heads and neurons (see `unit_flops`)."""
    seq_len = checked_number(seq_len, "flops_per_pair seq_len", Range(1), whole=True)
    parts = layer_parts(model)
    return unit_flops(model, seq_len).total([p.num_heads for p in parts], [p.num_neurons for p in parts])
