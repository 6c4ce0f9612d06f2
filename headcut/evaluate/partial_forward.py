"""Pieces of a forward pass that the exact ablation scan runs instead of whole forwards.

A masked head changes its own layer only by one known term, and the classifier reads one position of the
last layer, so a scan need not recompute either layer in full:

- `capture_attention`, around one unmasked forward, keeps, per layer, the input of the attention output
  projection (the heads' outputs side by side) and the input of the attention LayerNorm (residual +
  attention output). Masking head h of layer l subtracts h's outputs times h's columns of the output
  projection from the second (`without_heads`); the rest of the layer (`arch.after_attention`) then gives layer
  l's output, without q, k, v or attention.
- `run_layers` runs a slice of the model's own layers on given hidden states (the model's mask handling).
- `last_layer_first_token` computes the last layer for the first ([CLS]) position only: its query is
  one row, and with the key and value weights folded into that row (scores_j = (W_k^T q) . x_j, the
  weighted sum of values = W_v (sum_j p_j x_j) + b_v, as the softmax weights sum to 1) the other positions
  cost a dot product per head instead of two projections. The key bias adds the same q . b_k to every
  score of a head, which the softmax ignores.
- `classify_first_token` runs the model's own classifier head (pooler included) on that position.

Every piece is exact up to float rounding: tests/test_partial_forward.py checks each against the model's
own layers, and tests/test_scan_importance.py compares the scan they make
with the naive scan (one full masked forward per head) to 1e-6.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from headcut.arch import LayerParts, architecture, after_attention, encoder_layers, layer_parts, set_encoder_layers


@contextmanager
def capture_attention(model):
    """Within the block, forwards of `model` record per layer the input of the attention output
    projection (the heads' outputs side by side) and of the attention LayerNorm (residual + attention
    output). Yields `(heads_out, pre_norm)`, two lists indexed by layer (None: no heads, or not run)."""
    parts = layer_parts(model)
    heads_out: list[torch.Tensor | None] = [None] * len(parts)
    pre_norm: list[torch.Tensor | None] = [None] * len(parts)
    handles = []

    def keep(store, index):
        def hook(module, args):
            store[index] = args[0]
        return hook

    try:
        for p in parts:
            if p.out is not None:
                handles.append(p.out.register_forward_pre_hook(keep(heads_out, p.index)))
                handles.append(p.attention_norm.register_forward_pre_hook(keep(pre_norm, p.index)))
        yield heads_out, pre_norm
    finally:
        for h in handles:
            h.remove()


def without_heads(part: LayerParts, heads_out: torch.Tensor, pre_norm: torch.Tensor, heads: list[int]) -> torch.Tensor:
    """Layer `part`'s attention LayerNorm input with one head masked, for each head in `heads` (original ids):
    `(len(heads) x batch, seq, hidden)`, copy j (rows j*batch..) without heads[j]."""
    n, seq, hidden = pre_norm.shape
    size, count = part.head_size, part.num_heads
    where = torch.tensor([part.head_ids.index(h) for h in heads], device=pre_norm.device)
    outs = heads_out.reshape(n * seq, count, size).index_select(1, where).permute(1, 0, 2)  # (copies, n*seq, size)
    # (copies, size, hidden)
    columns = part.out.weight.view(hidden, count, size).index_select(1, where).permute(1, 2, 0)
    return (pre_norm.reshape(1, n * seq, hidden) - torch.bmm(outs, columns)).view(len(heads) * n, seq, hidden)


def finish_layer(model, part: LayerParts, pre_norm: torch.Tensor) -> torch.Tensor:
    """A layer's output from its attention norm's input."""
    return after_attention(model, part, pre_norm)


@contextmanager
def _encoder_from(model, hidden: torch.Tensor, layers: list):
    """Within the block, a forward of `model` runs only `layers`, on `hidden` instead of the embeddings'
    output (the embeddings still run on the inputs given, whose shape must match `hidden`'s first two)."""
    saved = encoder_layers(model)
    handle = model.base_model.embeddings.register_forward_hook(lambda module, args, output: hidden)
    set_encoder_layers(model, torch.nn.ModuleList(layers))
    try:
        yield
    finally:
        set_encoder_layers(model, saved)
        handle.remove()


def run_layers(model, hidden: torch.Tensor, batch: dict, first: int, stop: int) -> torch.Tensor:
    """Hidden states after the model's layers `first..stop-1`, given those entering layer `first`; `batch`:
    the inputs of the rows of `hidden` (for the attention mask)."""
    layers = list(encoder_layers(model))[first:stop]
    if not layers:
        return hidden
    seen = []
    # the last layer's own output: the base model's may have passed a final norm (ModernBERT)
    handle = layers[-1].register_forward_hook(lambda module, args, output: seen.append(
        output[0] if isinstance(output, tuple) else output))
    try:
        with _encoder_from(model, hidden, layers):
            model.base_model(**batch)
    finally:
        handle.remove()
    return seen[0]


def last_layer_first_token(model, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The last layer's output at the first position `(rows, 1, hidden)`, given its input `(rows, seq, hidden)`
    and the `(rows, seq)` attention mask (1 = a real token)."""
    part = layer_parts(model)[-1]
    first = hidden[:, :1]
    if part.attention is None:  # no heads: every position is computed on its own
        return run_layers(model, first, _inputs(attention_mask[:, :1]), part.index, part.index + 1)
    if not architecture(model).plain_attention:  # relative or rotary positions, windows: the whole layer runs
        return run_layers(model, hidden, _inputs(attention_mask), part.index, part.index + 1)[:, :1]
    rows, seq, width = hidden.shape
    count, size = part.num_heads, part.head_size
    query = part.query(first[:, 0]).view(rows, count, size)
    folded = torch.einsum("rhe,hed->rhd", query, part.key.weight.view(count, size, width))  # W_k^T q per head
    scores = torch.bmm(folded, hidden.transpose(1, 2)) * size ** -0.5  # (rows, heads, seq)
    scores = scores.masked_fill(attention_mask[:, None, :] == 0, float("-inf"))
    mixed = torch.bmm(torch.softmax(scores, dim=-1), hidden)  # (rows, heads, hidden): sum_j p_j x_j
    values = torch.einsum("rhd,hed->rhe", mixed, part.value.weight.view(count, size, width)).reshape(rows, -1)
    if part.value.bias is not None:
        values = values + part.value.bias
    return finish_layer(model, part, first + part.out(values)[:, None])


def _inputs(attention_mask: torch.Tensor) -> dict:
    """Model inputs for `run_layers` of these rows: the embeddings' output is replaced, so any ids do."""
    return {"input_ids": torch.zeros_like(attention_mask), "attention_mask": attention_mask}


def classify_first_token(model, first: torch.Tensor, batch: dict) -> torch.Tensor:
    """The model's logits from the last layer's output at the first position `(rows, 1, hidden)`;
    `batch`: the inputs of those rows."""
    one = {k: v[:, :1] for k, v in batch.items()}
    last = encoder_layers(model)[-1]
    # the last layer runs on one token and its output is replaced by `first` (an empty layer list is no
    # choice: DeBERTa's encoder has no output without a layer); the final norm and head then run as usual
    handle = last.register_forward_hook(lambda module, args, output: (first, *output[1:]) if isinstance(output, tuple)
                                        else first)
    try:
        with _encoder_from(model, first, [last]):
            return model(**one).logits
    finally:
        handle.remove()
