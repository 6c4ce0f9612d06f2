"""Per-architecture access to each layer's attention and FFN linears, and the head/neuron surgery
that every other module builds on.

Supported: BERT (incl. MiniLM), RoBERTa, XLM-R, ELECTRA, DistilBERT, DeBERTa-v2/v3 and ModernBERT, each one
entry of ARCHITECTURES (at the end of this file): adding an architecture means adding an entry and its tests.
A layer's heads are the `head_size`-wide row blocks of q/k/v (and of DeBERTa's own relative-position
projections; in ModernBERT's fused Wqkv, of each of its three thirds) and the matching column blocks of the
output projection. An FFN neuron is a row of the first linear (in a GLU, the row and its gate, `width` rows
apart) and a column of the second.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import nn

from headcut_grader.errors import UserError


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


def config_problem(config) -> str | None:
    """Why headcut cannot cut a model of this (supported) type with this config, or None: a field whose
    layers the table does not describe."""
    return "; ".join(ARCHITECTURES[_kind(config)].config_problems(config)) or None


def attention_implementation(config, wanted: str) -> str:
    """`wanted` where the architecture has it, else eager (DeBERTa has no SDPA path in transformers)."""
    return wanted if wanted in ARCHITECTURES[_kind(config)].attention_implementations else "eager"


def architecture(model) -> Architecture:
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


def _optional(module, path: str | None):
    return None if path is None else _get(module, path)


def layer_parts(model) -> list[LayerParts]:
    """The linears of every layer, in order."""
    arch = architecture(model)
    size = head_size(model.config)
    layers = encoder_layers(model)
    parts = []
    for i, layer in enumerate(layers):
        headless = isinstance(_get(layer, arch.attention_block), (HeadlessAttention, HeadlessSelfAttention))
        if headless:
            heads = (None,) * 5
        else:
            heads = (_get(layer, arch.attention), *(_optional(layer, p) for p in (arch.query, arch.key, arch.value)),
                     _get(layer, arch.out))
        neuronless = isinstance(_get(layer, arch.ffn_block), (NeuronlessOutput, NeuronlessFFN))
        ffn = (None, None) if neuronless else (_get(layer, arch.ffn_in), _get(layer, arch.ffn_out))
        norms = (_get(layer, arch.headless_norm if headless else arch.attention_norm), _ffn_norm(model, arch, layers, i))
        n_heads = 0 if heads[4] is None else heads[4].in_features // size
        n_neurons = 0 if ffn[1] is None else ffn[1].in_features
        parts.append(LayerParts(i, layer, *heads, *ffn, size, *norms, _ids(layer, HEAD_IDS, n_heads),
                                _ids(layer, NEURON_IDS, n_neurons)))
    return parts


def _ffn_norm(model, arch: Architecture, layers: nn.ModuleList, index: int) -> nn.Module:
    """The norm whose input is layer `index`'s residual + FFN output: in a post-norm layer its own; pre-norm,
    the next layer's input norm, or the final norm after the last layer."""
    if arch.pre_norm is None:
        return _get(layers[index], arch.ffn_norm)
    input_norm, final_norm = arch.pre_norm
    return _get(layers[index + 1], input_norm) if index + 1 < len(layers) else _get(model.base_model, final_norm)


def after_attention(model, part: LayerParts, pre_norm: torch.Tensor) -> torch.Tensor:
    """Layer `part`'s output from the input of its attention norm (residual + attention output), as the layer
    computes it (also with a 0-neuron stub). It acts row by row."""
    return architecture(model).finish(part, pre_norm)


def heads_per_layer(model) -> list[int]:
    return [p.num_heads for p in layer_parts(model)]


def neurons_per_layer(model) -> list[int]:
    return [p.num_neurons for p in layer_parts(model)]


def intermediate_size(config) -> int:
    """FFN neurons per layer of the unpruned config (a GLU's neuron is a value row and its gate row)."""
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
    """Post-norm attention sublayer with 0 heads (BERT family, DeBERTa): exactly LayerNorm(x + output bias).

    Zero-width q/k/v tensors break ONNX Runtime, so the empty sublayer is replaced by what it computes.
    """

    def __init__(self, bias: torch.Tensor, layer_norm: nn.LayerNorm):
        super().__init__()
        self.bias = nn.Parameter(bias.detach().clone())
        self.LayerNorm = layer_norm

    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        return self.LayerNorm(hidden_states + self.bias), None


class HeadlessSelfAttention(nn.Module):
    """Self-attention with 0 heads whose layer adds the residual and norms itself (DistilBERT; ModernBERT,
    pre-norm, whose layer then computes x + bias): its output is the output projection's bias."""

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
    """FFN with 0 neurons whose layer adds the residual itself (DistilBERT, ModernBERT's GLU): its output is
    the second linear's bias."""

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


def _blocks(index: torch.Tensor, blocks: int, width: int) -> torch.Tensor:
    """`index` repeated in each of `blocks` stacked blocks of `width` rows (fused q/k/v thirds, GLU halves)."""
    return torch.cat([index + b * width for b in range(blocks)])


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
                linear = _get(p.layer, path)
                blocks = linear.out_features // p.out.in_features  # 3: a fused q/k/v linear
                _set(p.layer, path, _slice_linear(linear, _blocks(rows, blocks, p.out.in_features), 0))
        _set(p.layer, arch.out, _slice_linear(p.out, rows, 1))
        if arch.heads_attr:
            setattr(p.attention, arch.heads_attr, len(heads))
        if arch.all_head_size_attr:
            setattr(p.attention, arch.all_head_size_attr, len(heads) * p.head_size)


def _has(module, path: str) -> bool:
    """Whether `path` names a module (DeBERTa builds its relative-position projections only for some configs)."""
    *parents, name = path.split(".")
    return hasattr(_get(module, ".".join(parents)) if parents else module, name)


def _bias(linear: nn.Linear) -> torch.Tensor:
    return linear.bias.detach() if linear.bias is not None else torch.zeros(linear.out_features)


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
        _set(p.layer, arch.ffn_in, _slice_linear(p.ffn_in, _blocks(index, arch.ffn_in_blocks, p.num_neurons), 0))
        _set(p.layer, arch.ffn_out, _slice_linear(p.ffn_out, index, 1))


def keep_layers(model, keep: list[int]) -> None:
    """Keep only the listed encoder layers (in order), in place; updates the config's layer count."""
    layers = encoder_layers(model)
    keep = sorted(set(int(i) for i in keep))
    kept = nn.ModuleList([layers[i] for i in keep])
    set_encoder_layers(model, kept)
    model.config.num_hidden_layers = len(kept)
    arch = architecture(model)
    for path in arch.layer_counts:
        _set(model.base_model, path, len(kept))
    for name in arch.layer_lists:
        setattr(model.config, name, [getattr(model.config, name)[i] for i in keep])
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
    softmax are left out (under 1% here). 2 FLOPs per multiply-add. A local-attention layer counts the
    query/key pairs inside its window; a GLU neuron, its value and gate rows."""
    n = int(seq_len)
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


def _bert_finish(part: LayerParts, pre_norm: torch.Tensor) -> torch.Tensor:
    hidden = part.attention_norm(pre_norm)
    return part.layer.output(part.layer.intermediate(hidden), hidden)  # BERT's feed_forward_chunk; DeBERTa's too


def _distilbert_finish(part: LayerParts, pre_norm: torch.Tensor) -> torch.Tensor:
    hidden = part.attention_norm(pre_norm)
    return part.layer.output_layer_norm(part.layer.ffn(hidden) + hidden)


def _distilbert_headless(layer: nn.Module, bias: torch.Tensor) -> None:
    layer.attention = HeadlessSelfAttention(bias)


def _distilbert_neuronless(layer: nn.Module, bias: torch.Tensor) -> None:
    layer.ffn = NeuronlessFFN(bias)


# ModernBERT is pre-norm: x + attn(norm(x)), then y + mlp(norm(y)). Without heads (or neurons) the sublayer
# adds its output projection's bias to the residual, and its norm's output is unused: the stub returns the
# bias, the layer adds x. (BERT's post-norm stub is LayerNorm(x + b) instead.)
def _modernbert_headless(layer: nn.Module, bias: torch.Tensor) -> None:
    layer.attn = HeadlessSelfAttention(bias)


def _modernbert_neuronless(layer: nn.Module, bias: torch.Tensor) -> None:
    layer.mlp = NeuronlessFFN(bias)


def _modernbert_finish(part: LayerParts, pre_norm: torch.Tensor) -> torch.Tensor:
    return pre_norm + part.layer.mlp(part.attention_norm(pre_norm))


def _dense_head_flops(config, layer: int, n: int, *, keys: int | None = None) -> int:
    """One head over n tokens: q, k, v projections; scores q.k and the weighted sum of values over `keys`
    query/key pairs (all n x n by default); the output projection."""
    d, size = config.hidden_size, head_size(config)
    keys = n * n if keys is None else keys
    return 2 * n * d * size * 3 + 2 * keys * size * 2 + 2 * n * size * d


def _deberta_head_flops(config, layer: int, n: int) -> int:
    """Plus each disentangled term (c2p, p2c): the 2 x span relative positions projected for this head, and
    every query (key) scored against all of them before the bucket gather."""
    dense = _dense_head_flops(config, layer, n)
    if not config.relative_attention:
        return dense
    span = config.position_buckets if config.position_buckets > 0 else (
        config.max_relative_positions if config.max_relative_positions > 0 else config.max_position_embeddings)
    size = head_size(config)
    terms = len(set(config.pos_att_type or []) & {"c2p", "p2c"})
    return dense + terms * (2 * 2 * span * config.hidden_size * size + 2 * n * 2 * span * size)


def _modernbert_head_flops(config, layer: int, n: int) -> int:
    """A local layer's query sees the keys within `sliding_window` positions either side (transformers'
    bidirectional window mask); a global layer's, all n."""
    if config.layer_types[layer] != "sliding_attention":
        return _dense_head_flops(config, layer, n)
    w = config.sliding_window
    keys = sum(min(i + w, n - 1) - max(i - w, 0) + 1 for i in range(n))
    return _dense_head_flops(config, layer, n, keys=keys)


def _no_problems(config) -> list[str]:
    return []


def _deberta_problems(config) -> list[str]:
    problems = []
    if getattr(config, "conv_kernel_size", 0) > 0:  # DeBERTa-v2-xlarge's convolution beside the first layer
        problems.append(f"conv_kernel_size {config.conv_kernel_size} (a convolution beside the first layer)")
    own = getattr(config, "attention_head_size", None)
    if own is not None and own * config.num_attention_heads != config.hidden_size:
        problems.append(f"attention_head_size {own} (heads narrower or wider than hidden_size / heads)")
    unknown = sorted(set(config.pos_att_type or []) - {"c2p", "p2c"})
    if unknown:
        problems.append(f"pos_att_type {unknown} (only c2p and p2c are known)")
    return problems


def _modernbert_problems(config) -> list[str]:
    if config.classifier_pooling != "cls":  # scans, tuning and the head refit read the first token only
        return [f"classifier_pooling '{config.classifier_pooling}' (headcut needs 'cls': the first token)"]
    return []


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
    query: str | None  # None: q, k and v are one fused linear, named in head_rows
    key: str | None
    value: str | None
    out: str  # attention output projection
    heads_attr: str | None  # head count on the `attention` module, updated by surgery (None: read from shapes)
    all_head_size_attr: str | None  # heads x head size on the `attention` module, where it keeps one
    ffn_block: str  # the FFN module whose type marks a 0-neuron stub
    ffn_in: str
    ffn_out: str
    attention_norm: str  # LayerNorm after residual + attention output
    headless_norm: str  # the same LayerNorm inside a 0-head stub
    ffn_norm: str | None  # LayerNorm after residual + FFN output (None: pre-norm, see `pre_norm`)
    headless: Callable[[nn.Module, torch.Tensor], None]  # give a layer its exact 0-head stub (output bias)
    neuronless: Callable[[nn.Module, torch.Tensor], None]  # give a layer its exact 0-neuron FFN stub
    finish: Callable[[LayerParts, torch.Tensor], torch.Tensor]  # layer output from the attention norm's input
    positions_after_padding: bool = False  # position ids start after the padding index (fewer usable positions)
    out_inside_attention: bool = False  # the `attention` module applies `out` itself (DistilBERT)
    # more linears whose output rows are per-head blocks, sliced with q/k/v where present; a fused q/k/v
    # linear (3 x the heads' width) is sliced in each third
    head_rows: tuple[str, ...] = ()
    ffn_in_blocks: int = 1  # 2: a GLU, whose first linear stacks every neuron's value row and gate row
    # pre-norm: (each layer's input norm, the base model's final norm), which read residual + FFN output
    pre_norm: tuple[str, str] | None = None
    # plain scaled dot-product attention of q, k, v with absolute positions: exported as one ORT
    # MultiHeadAttention op, folded at the scan's first token. False: relative or rotary positions, windows
    plain_attention: bool = True
    layer_lists: tuple[str, ...] = ()  # config fields with one entry per layer, cut by keep_layers
    attention_implementations: tuple[str, ...] = ("eager", "sdpa")
    head_flops: Callable[[object, int, int], int] = _dense_head_flops  # (config, layer, tokens) -> one head's FLOPs
    config_problems: Callable[[object], list[str]] = _no_problems  # config fields the entry cannot cut


_BERT = Architecture(
    layers="encoder.layer", layer_counts=(), intermediate="intermediate_size", token_types=True,
    attention_block="attention", attention="attention.self", query="attention.self.query",
    key="attention.self.key", value="attention.self.value", out="attention.output.dense",
    heads_attr="num_attention_heads", all_head_size_attr="all_head_size",
    ffn_block="output", ffn_in="intermediate.dense", ffn_out="output.dense",
    attention_norm="attention.output.LayerNorm", headless_norm="attention.LayerNorm", ffn_norm="output.LayerNorm",
    headless=_bert_headless, neuronless=_bert_neuronless, finish=_bert_finish,
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
        headless=_distilbert_headless, neuronless=_distilbert_neuronless, finish=_distilbert_finish,
        out_inside_attention=True,
    ),
    # DeBERTa-v2 and v3 (one model type): BERT's layout with disentangled attention. Relative positions are
    # projected per head by key_proj/query_proj (share_att_key) or by their own pos_key_proj (c2p) and
    # pos_query_proj (p2c), sliced with q/k/v; the position buckets and their embedding are shared by all heads.
    "deberta-v2": replace(
        _BERT, query="attention.self.query_proj", key="attention.self.key_proj", value="attention.self.value_proj",
        head_rows=("attention.self.pos_key_proj", "attention.self.pos_query_proj"), plain_attention=False,
        attention_implementations=("eager",), head_flops=_deberta_head_flops, config_problems=_deberta_problems,
    ),
    # ModernBERT: one fused Wqkv, rotary positions, local and global layers, a GLU FFN, pre-norm with a final norm.
    "modernbert": Architecture(
        layers="layers", layer_counts=(), intermediate="intermediate_size", token_types=False,
        attention_block="attn", attention="attn", query=None, key=None, value=None, out="attn.Wo", heads_attr=None,
        all_head_size_attr=None, ffn_block="mlp", ffn_in="mlp.Wi", ffn_out="mlp.Wo", attention_norm="mlp_norm",
        headless_norm="mlp_norm", ffn_norm=None, headless=_modernbert_headless, neuronless=_modernbert_neuronless,
        finish=_modernbert_finish, out_inside_attention=True, head_rows=("attn.Wqkv",), ffn_in_blocks=2,
        pre_norm=("attn_norm", "final_norm"), plain_attention=False, layer_lists=("layer_types",),
        head_flops=_modernbert_head_flops, config_problems=_modernbert_problems,
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
