"""The architecture table: one entry per supported architecture (where it keeps its parts, and its quirks),
and the config readers that look a model up in it.

Supported: BERT (incl. MiniLM), RoBERTa, XLM-R, ELECTRA, DistilBERT, DeBERTa-v2/v3 and ModernBERT, each one
entry of ARCHITECTURES (at the end of this file): adding an architecture means adding an entry and its tests.
This is the one module that names model types and module paths; the rest of headcut reads the entries.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch
from torch import nn

from headcut_grader.errors import UserError, quoted

from headcut.arch.parts import LayerParts
from headcut.arch.stubs import (HeadlessAttention, HeadlessSelfAttention, NeuronlessFFN, NeuronlessIntermediate,
                                NeuronlessOutput)
from headcut.model_arguments import takes_model


@takes_model
def model_type(model) -> str:
    return _kind(model.config)


def _kind(config) -> str:
    kind = getattr(config, "model_type", None)
    if kind not in ARCHITECTURES:
        raise UserError(
            f"model type {quoted(kind)} is not supported; headcut supports {', '.join(SUPPORTED)} "
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


@takes_model
def architecture(model) -> Architecture:
    """The table entry of `model`'s architecture (a UserError names the supported ones)."""
    return ARCHITECTURES[model_type(model)]


@takes_model
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

def intermediate_size(config) -> int:
    """FFN neurons per layer of the unpruned config (a GLU's neuron is a value row and its gate row)."""
    return getattr(config, ARCHITECTURES[_kind(config)].intermediate)


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


def _modernbert_moved(layer: nn.Module, config, original: int) -> None:
    """transformers builds layer 0 without an input norm (the embeddings end in one); a later layer rebuilt at
    position 0, because surgery removed the layers below it, needs its own back."""
    if original != 0 and isinstance(layer.attn_norm, nn.Identity):
        layer.attn_norm = nn.LayerNorm(config.hidden_size, eps=config.norm_eps, bias=config.norm_bias)


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
        return [f"classifier_pooling {quoted(config.classifier_pooling)} (headcut needs 'cls': the first token)"]
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
    # the layer output from the attention norm's input
    finish: Callable[[LayerParts, torch.Tensor], torch.Tensor]
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
    # an encoder layer's forward takes the hidden state first and returns it: alone (False), or first of a
    # tuple with its attention weights (True: DeBERTa); a skipped layer (`masking.layer_mask`) returns the same
    layer_returns_tuple: bool = False
    # (layer, config, original id): give a layer freshly built at a new position (a reload of a model whose
    # lower layers surgery removed) what its original position built; None: layers do not differ by position
    moved_layer: Callable[[nn.Module, object, int], None] | None = None
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
        attention_implementations=("eager",), layer_returns_tuple=True, head_flops=_deberta_head_flops,
        config_problems=_deberta_problems,
    ),
    # ModernBERT: one fused Wqkv, rotary positions, local and global layers, a GLU FFN, pre-norm with a final norm.
    "modernbert": Architecture(
        layers="layers", layer_counts=(), intermediate="intermediate_size", token_types=False,
        attention_block="attn", attention="attn", query=None, key=None, value=None, out="attn.Wo", heads_attr=None,
        all_head_size_attr=None, ffn_block="mlp", ffn_in="mlp.Wi", ffn_out="mlp.Wo", attention_norm="mlp_norm",
        headless_norm="mlp_norm", ffn_norm=None, headless=_modernbert_headless, neuronless=_modernbert_neuronless,
        finish=_modernbert_finish, out_inside_attention=True, head_rows=("attn.Wqkv",), ffn_in_blocks=2,
        pre_norm=("attn_norm", "final_norm"), plain_attention=False, layer_lists=("layer_types",),
        head_flops=_modernbert_head_flops, config_problems=_modernbert_problems, moved_layer=_modernbert_moved,
    ),
}
SUPPORTED = tuple(ARCHITECTURES)
