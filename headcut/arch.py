"""Per-architecture access to each layer's attention and FFN linears, and the head/neuron surgery
that every other module builds on.

Supported: BERT (incl. MiniLM), RoBERTa, XLM-R, ELECTRA, DistilBERT, each one entry of ARCHITECTURES
(at the end of this file): adding an architecture means adding an entry and its tests. A layer's heads
are the `head_size`-wide row blocks of q/k/v and the matching column blocks of the output projection.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import nn

from headcut.errors import UserError

@dataclass
class LayerParts:
    """The linears of one transformer layer. `attention` is None once the layer has lost every head."""

    index: int
    layer: nn.Module
    attention: nn.Module | None  # the module whose forward splits heads (holds q/k/v)
    query: nn.Linear | None
    key: nn.Linear | None
    value: nn.Linear | None
    out: nn.Linear | None  # attention output projection: input = concatenated head outputs
    ffn_in: nn.Linear | None  # None once the layer has lost every FFN neuron
    ffn_out: nn.Linear | None
    head_size: int
    attention_norm: nn.Module  # LayerNorm whose input is residual + attention output (also in a stub)
    ffn_norm: nn.Module  # LayerNorm whose input is residual + FFN output
    head_ids: list[int]  # original (unpruned) id of each present head, in weight order
    neuron_ids: list[int]  # original id of each present FFN neuron, in weight order

    @property
    def num_heads(self) -> int:
        return len(self.head_ids)

    @property
    def num_neurons(self) -> int:
        return len(self.neuron_ids)


def model_type(model) -> str:
    return _kind(model.config)


def _kind(config) -> str:
    kind = getattr(config, "model_type", None)
    if kind not in ARCHITECTURES:
        raise UserError(
            f"model type '{kind}' is not supported; headcut supports {', '.join(SUPPORTED)} "
            "(sequence-classification models)."
        )
    return kind


def architecture(model) -> "Architecture":
    """The table entry of `model`'s architecture (a UserError names the supported ones)."""
    return ARCHITECTURES[model_type(model)]


def takes_token_types(model) -> bool:
    """Whether `model` has a token_type_ids input (DistilBERT has none)."""
    return architecture(model).token_types


def usable_positions(config) -> int | None:
    """How many tokens a pair may have: the position embeddings, less the padding offset where an
    architecture's positions start after the padding index (RoBERTa, XLM-R). None when unknown."""
    positions = getattr(config, "max_position_embeddings", None)
    arch = ARCHITECTURES.get(getattr(config, "model_type", None))
    if positions is not None and arch is not None and arch.positions_after_padding:
        positions -= config.pad_token_id + 1
    return positions


def head_size(config) -> int:
    return config.hidden_size // config.num_attention_heads  # DistilBERT's config maps these to dim, n_heads


def num_heads_config(config) -> int:
    return config.num_attention_heads


def encoder_layers(model) -> nn.ModuleList:
    return _get(model.base_model, architecture(model).layers)


def set_encoder_layers(model, layers: nn.ModuleList) -> None:
    """Swap the encoder's layer list (counts in the config are the caller's business: see keep_layers)."""
    _set(model.base_model, architecture(model).layers, layers)


def _get(module, path: str):
    for name in path.split("."):
        module = getattr(module, name)
    return module


def _set(module, path: str, value) -> None:
    *parents, name = path.split(".")
    setattr(_get(module, ".".join(parents)) if parents else module, name, value)


# Original ids of the units a layer still has, kept on the layer module by surgery (absent: all of them).
HEAD_IDS, NEURON_IDS = "headcut_head_ids", "headcut_neuron_ids"


def _ids(layer: nn.Module, attr: str, count: int) -> list[int]:
    ids = getattr(layer, attr, None)
    return list(range(count)) if ids is None else list(ids)


def layer_parts(model) -> list[LayerParts]:
    """The linears of every layer, in order."""
    arch = architecture(model)
    size = head_size(model.config)
    parts = []
    for i, layer in enumerate(encoder_layers(model)):
        headless = isinstance(_get(layer, arch.attention_block), (HeadlessAttention, HeadlessSelfAttention))
        if headless:
            heads = (None,) * 5
        else:
            heads = tuple(_get(layer, path) for path in (arch.attention, arch.query, arch.key, arch.value, arch.out))
        neuronless = isinstance(_get(layer, arch.ffn_block), (NeuronlessOutput, NeuronlessFFN))
        ffn = (None, None) if neuronless else (_get(layer, arch.ffn_in), _get(layer, arch.ffn_out))
        norms = (_get(layer, arch.headless_norm if headless else arch.attention_norm), _get(layer, arch.ffn_norm))
        n_heads = 0 if heads[1] is None else heads[1].out_features // size
        n_neurons = 0 if ffn[0] is None else ffn[0].out_features
        parts.append(LayerParts(i, layer, *heads, *ffn, size, *norms, _ids(layer, HEAD_IDS, n_heads),
                                _ids(layer, NEURON_IDS, n_neurons)))
    return parts


def ffn_sublayer(model, part: LayerParts, hidden: torch.Tensor) -> torch.Tensor:
    """Layer `part`'s FFN sublayer on `hidden` (the attention sublayer's output): LayerNorm(hidden + FFN(hidden)),
    as the layer computes it (also with a 0-neuron stub). It acts row by row."""
    return architecture(model).ffn(part.layer, hidden)


def heads_per_layer(model) -> list[int]:
    return [p.num_heads for p in layer_parts(model)]


def neurons_per_layer(model) -> list[int]:
    return [p.num_neurons for p in layer_parts(model)]


def intermediate_size(config) -> int:
    return getattr(config, ARCHITECTURES[_kind(config)].intermediate)


def mask_shape(model) -> tuple[int, int]:
    """Masks and scores are (num_layers, num_heads of the unpruned config), indexed by original head ids:
    column h of layer l is head h of the unpruned model, whether or not a pruned layer still has it."""
    return (len(encoder_layers(model)), num_heads_config(model.config))


def present_heads(model) -> torch.Tensor:
    """(num_layers, num_heads) bool, original ids: True where the (possibly pruned) model still has the head."""
    present = torch.zeros(mask_shape(model), dtype=torch.bool)
    for p in layer_parts(model):
        present[p.index, p.head_ids] = True
    return present


# --- surgery -----------------------------------------------------------------------------------


class HeadlessAttention(nn.Module):
    """BERT-family attention sublayer with 0 heads: exactly LayerNorm(x + output bias).

    Zero-width q/k/v tensors break ONNX Runtime, so the empty sublayer is replaced by what it computes.
    """

    def __init__(self, bias: torch.Tensor, layer_norm: nn.LayerNorm):
        super().__init__()
        self.bias = nn.Parameter(bias.detach().clone())
        self.LayerNorm = layer_norm

    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        return self.LayerNorm(hidden_states + self.bias), None


class HeadlessSelfAttention(nn.Module):
    """DistilBERT self-attention with 0 heads: its output is the output projection's bias."""

    def __init__(self, bias: torch.Tensor):
        super().__init__()
        self.bias = nn.Parameter(bias.detach().clone())

    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        return self.bias.expand_as(hidden_states), None


class NeuronlessIntermediate(nn.Module):
    """BERT-family FFN input with 0 neurons: passes its input on (the stub output ignores it)."""

    def forward(self, hidden_states):
        return hidden_states


class NeuronlessOutput(nn.Module):
    """BERT-family FFN output with 0 neurons: exactly LayerNorm(input + output bias)."""

    def __init__(self, bias: torch.Tensor, layer_norm: nn.LayerNorm):
        super().__init__()
        self.bias = nn.Parameter(bias.detach().clone())
        self.LayerNorm = layer_norm

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(input_tensor + self.bias)


class NeuronlessFFN(nn.Module):
    """DistilBERT FFN with 0 neurons: its output is the second linear's bias."""

    def __init__(self, bias: torch.Tensor):
        super().__init__()
        self.bias = nn.Parameter(bias.detach().clone())

    def forward(self, hidden_states):
        return self.bias.expand_as(hidden_states)


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


def keep_heads(model, keep: list[list[int]]) -> None:
    """Physically keep only the listed heads of each layer, in place. Heads are named by their original
    ids (the unpruned model's numbering, as in masks and scores), so plans compose on a pruned model.

    Slices q/k/v rows and the output projection's columns; a layer left with no heads gets an exact stub.
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
        rows = torch.cat([torch.arange(h * p.head_size, (h + 1) * p.head_size) for h in heads]).to(p.query.weight.device)
        for path in (arch.query, arch.key, arch.value):
            _set(p.layer, path, _slice_linear(_get(p.layer, path), rows, 0))
        _set(p.layer, arch.out, _slice_linear(p.out, rows, 1))
        setattr(p.attention, arch.heads_attr, len(heads))
        if arch.all_head_size_attr:
            setattr(p.attention, arch.all_head_size_attr, len(heads) * p.head_size)


def _bias(linear: nn.Linear) -> torch.Tensor:
    return linear.bias.detach() if linear.bias is not None else torch.zeros(linear.out_features)


def keep_neurons(model, keep: list[list[int]]) -> None:
    """Physically keep only the listed FFN neurons per layer (original ids: rows of ffn_in, columns of
    ffn_out), in place. A layer left with none gets an exact stub. Exact: equals the model with the other
    neurons masked to zero; each layer remembers the kept neurons' original ids (`LayerParts.neuron_ids`)."""
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
        _set(p.layer, arch.ffn_in, _slice_linear(p.ffn_in, index, 0))
        _set(p.layer, arch.ffn_out, _slice_linear(p.ffn_out, index, 1))


def keep_layers(model, keep: list[int]) -> None:
    """Keep only the listed encoder layers (in order), in place; updates the config's layer count."""
    layers = encoder_layers(model)
    keep = sorted(set(int(i) for i in keep))
    kept = nn.ModuleList([layers[i] for i in keep])
    set_encoder_layers(model, kept)
    model.config.num_hidden_layers = len(kept)
    for path in architecture(model).layer_counts:
        _set(model.base_model, path, len(kept))
    for new_index, layer in enumerate(kept):
        for module in layer.modules():
            if hasattr(module, "layer_idx"):
                module.layer_idx = new_index


def shape_record(model) -> dict:
    """What `apply_shape` needs to rebuild this model's (pruned) structure from its config, with the
    original ids of the heads and FFN neurons each layer kept (one numbering for masks and scores)."""
    parts = layer_parts(model)
    return {
        "heads_per_layer": [p.num_heads for p in parts],
        "intermediate_per_layer": [p.num_neurons for p in parts],
        "head_ids": [p.head_ids for p in parts],
        "neuron_ids": [p.neuron_ids for p in parts],
    }


def apply_shape(model, record: dict) -> None:
    """Give a freshly built model the structure in `record` (weights are loaded afterwards). Records
    written before ids were kept mean each layer's first heads/neurons."""
    heads = record.get("head_ids") or [list(range(n)) for n in record.get("heads_per_layer") or []]
    if heads:
        keep_heads(model, heads)
    neurons = record.get("neuron_ids") or [list(range(n)) for n in record.get("intermediate_per_layer") or []]
    if neurons:
        keep_neurons(model, neurons)


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


def unit_flops(model, seq_len: int) -> UnitFlops:
    """Per-head and per-neuron FLOPs of every layer (as if unpruned: the cost of one more unit), and the
    fixed part: the pooler and classifier, which read the first token only. Embeddings, LayerNorm and
    softmax are left out (under 1% here). 2 FLOPs per multiply-add."""
    n = int(seq_len)
    config = model.config
    d = config.hidden_size
    size = head_size(config)
    # q, k, v projections; scores q.k and the weighted sum of values; output projection
    per_head = 2 * n * d * size * 3 + 2 * n * n * size * 2 + 2 * n * size * d
    per_neuron = 2 * n * d * 2  # one row of the FFN's first linear, one column of its second
    encoder = {id(m) for m in encoder_layers(model).modules()}
    embeddings = {id(m) for m in model.base_model.embeddings.modules()}
    fixed = sum(2 * m.in_features * m.out_features for m in model.modules()
                if isinstance(m, torch.nn.Linear) and id(m) not in encoder and id(m) not in embeddings)
    layers = len(encoder_layers(model))
    return UnitFlops([per_head] * layers, [per_neuron] * layers, int(fixed))


def flops_per_pair(model, seq_len: int) -> int:
    """Matrix-multiply FLOPs (2 per multiply-add) of one forward pass of one pair of `seq_len` tokens,
    counted from the model's present heads and neurons (see `unit_flops`)."""
    parts = layer_parts(model)
    return unit_flops(model, seq_len).total([p.num_heads for p in parts], [p.num_neurons for p in parts])


# --- the architecture table ----------------------------------------------------------------------


def _bert_headless(layer: nn.Module, bias: torch.Tensor) -> None:
    layer.attention = HeadlessAttention(bias, layer.attention.output.LayerNorm)


def _bert_neuronless(layer: nn.Module, bias: torch.Tensor) -> None:
    layer.intermediate = NeuronlessIntermediate()
    layer.output = NeuronlessOutput(bias, layer.output.LayerNorm)


def _bert_ffn(layer: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    return layer.feed_forward_chunk(hidden)


def _distilbert_ffn(layer: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    return layer.output_layer_norm(layer.ffn(hidden) + hidden)


def _distilbert_headless(layer: nn.Module, bias: torch.Tensor) -> None:
    layer.attention = HeadlessSelfAttention(bias)


def _distilbert_neuronless(layer: nn.Module, bias: torch.Tensor) -> None:
    layer.ffn = NeuronlessFFN(bias)


@dataclass(frozen=True)
class Architecture:
    """Where one architecture keeps its parts, and its quirks: the one place that knows (as TextPruner's
    model map). Paths are dotted attribute names: `layers` from the model's base_model, the others from
    one encoder layer. Config fields are read through transformers' aliases (hidden_size,
    num_attention_heads, num_hidden_layers), so only the FFN width needs a name here."""

    layers: str  # the encoder's ModuleList
    layer_counts: tuple[str, ...]  # copies of the layer count outside the config, updated by keep_layers
    intermediate: str  # config field of the FFN width
    token_types: bool  # takes token_type_ids
    attention_block: str  # the attention sublayer, which a 0-head stub replaces
    attention: str  # the module that splits heads (holds q/k/v)
    query: str
    key: str
    value: str
    out: str  # attention output projection
    heads_attr: str  # head count on the `attention` module, updated by surgery
    all_head_size_attr: str | None  # heads x head size on the `attention` module, where it keeps one
    ffn_block: str  # the FFN module whose type marks a 0-neuron stub
    ffn_in: str
    ffn_out: str
    attention_norm: str  # LayerNorm after residual + attention output
    headless_norm: str  # the same LayerNorm inside a 0-head stub
    ffn_norm: str  # LayerNorm after residual + FFN output
    headless: Callable[[nn.Module, torch.Tensor], None]  # give a layer its exact 0-head stub (output bias)
    neuronless: Callable[[nn.Module, torch.Tensor], None]  # give a layer its exact 0-neuron FFN stub
    ffn: Callable[[nn.Module, torch.Tensor], torch.Tensor]  # a layer's FFN sublayer, residual and LayerNorm included
    positions_after_padding: bool = False  # position ids start after the padding index (fewer usable positions)
    out_inside_attention: bool = False  # the `attention` module applies `out` itself (DistilBERT)


_BERT = Architecture(
    layers="encoder.layer", layer_counts=(), intermediate="intermediate_size", token_types=True,
    attention_block="attention", attention="attention.self", query="attention.self.query",
    key="attention.self.key", value="attention.self.value", out="attention.output.dense",
    heads_attr="num_attention_heads", all_head_size_attr="all_head_size",
    ffn_block="output", ffn_in="intermediate.dense", ffn_out="output.dense",
    attention_norm="attention.output.LayerNorm", headless_norm="attention.LayerNorm", ffn_norm="output.LayerNorm",
    headless=_bert_headless, neuronless=_bert_neuronless, ffn=_bert_ffn,
)

ARCHITECTURES: dict[str, Architecture] = {
    "bert": _BERT,  # MiniLM included
    "roberta": replace(_BERT, positions_after_padding=True),
    "xlm-roberta": replace(_BERT, positions_after_padding=True),
    "electra": _BERT,
    "distilbert": Architecture(
        layers="transformer.layer", layer_counts=("transformer.n_layers",), intermediate="hidden_dim",
        token_types=False, attention_block="attention", attention="attention", query="attention.q_lin",
        key="attention.k_lin", value="attention.v_lin", out="attention.out_lin", heads_attr="n_heads",
        all_head_size_attr=None, ffn_block="ffn", ffn_in="ffn.lin1", ffn_out="ffn.lin2",
        attention_norm="sa_layer_norm", headless_norm="sa_layer_norm", ffn_norm="output_layer_norm",
        headless=_distilbert_headless, neuronless=_distilbert_neuronless, ffn=_distilbert_ffn,
        out_inside_attention=True,
    ),
}
SUPPORTED = tuple(ARCHITECTURES)


def widen(model, full) -> None:
    """Copy `model` (pruned, or not) into `full`, its unpruned twin built from the same config, in place: each
    kept head / neuron at its original id, every pruned one zero. Exact: a zero head or neuron adds nothing, as a
    masked one (GELU(0) = 0), and a 0-unit stub's bias is the zero sublayer's output bias. For readers that cannot
    rebuild per-layer shapes (sentence-transformers, plain `from_pretrained`)."""
    own, target = model.state_dict(), full.state_dict()
    full.load_state_dict({k: own[k] if k in own and own[k].shape == v.shape else v for k, v in target.items()})
    arch = architecture(full)
    with torch.no_grad():
        for p, f in zip(layer_parts(model), layer_parts(full)):
            rows = [torch.arange(h * p.head_size, (h + 1) * p.head_size) for h in p.head_ids]
            rows = torch.cat(rows) if rows else torch.zeros(0, dtype=torch.long)
            stub = None if p.attention is not None else _get(p.layer, arch.attention_block)
            _widen_pair(f.query, f.key, f.value, f.out, p.query, p.key, p.value, p.out, rows, stub)
            stub = None if p.ffn_in is not None else _get(p.layer, arch.ffn_block)
            _widen_pair(f.ffn_in, None, None, f.ffn_out, p.ffn_in, None, None, p.ffn_out,
                        torch.tensor(p.neuron_ids, dtype=torch.long), stub)
            f.attention_norm.load_state_dict(p.attention_norm.state_dict())
            f.ffn_norm.load_state_dict(p.ffn_norm.state_dict())


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
