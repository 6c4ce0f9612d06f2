"""Attention weights of every head, read from the attention modules (needs eager attention).

Shared by the entropy importance score and the head-function probes.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch

from headcut.arch import layer_parts
from headcut.batching import Encoded, length_batches

# Attention probabilities one pass may hold, every layer and head together: 256 MiB in float32, and the pass peaks
# near twice that with the forward's and the scores' temporaries. They grow with batch x length^2, so a --batch-size
# that plain grading runs whole could need tens of GB here (MiniLM, 1024 pairs of 512 tokens: 77 GB).
MAX_HELD_SCORES = 2 ** 26


@contextmanager
def eager_attention(model):
    """Switch to eager attention for the block (SDPA never materialises the weights); outputs are unchanged."""
    before = model.config._attn_implementation
    if before != "eager":
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if before != "eager":
            model.set_attn_implementation(before)


def attention_batches(model, encoded: Encoded, batch_size: int) -> list[np.ndarray]:
    """`length_batches(encoded, batch_size)`, each cut into consecutive pieces whose attention maps (all layers,
    heads, queries and keys, at the piece's longest pair) hold at most MAX_HELD_SCORES; a pair whose maps alone
    exceed it goes alone (its length is capped by the model's positions). Sums over the pieces equal the batch's."""
    heads = max(1, sum(len(p.head_ids) for p in layer_parts(model)))
    lengths = encoded.lengths()
    pieces = []
    for rows in length_batches(encoded, batch_size):
        size = max(1, MAX_HELD_SCORES // (heads * int(lengths[rows].max()) ** 2))
        pieces += [rows[i : i + size] for i in range(0, len(rows), size)]
    return pieces


@torch.inference_mode()
def attention_weights(model, batch: dict) -> tuple[list[torch.Tensor | None], torch.Tensor]:
    """Per layer `(batch, heads_l, queries, keys)` attention probabilities (None for a headless layer), and logits."""
    parts = [p for p in layer_parts(model)]
    got: dict[int, torch.Tensor] = {}
    handles = [
        p.attention.register_forward_hook(lambda mod, args, out, i=p.index: got.__setitem__(i, out[1]))
        for p in parts if p.attention is not None
    ]
    try:
        with eager_attention(model):
            # DeBERTa's attention returns its weights only when asked; the others return them anyway in eager
            logits = model(**batch, output_attentions=True).logits
    finally:
        for h in handles:
            h.remove()
    return [got.get(p.index) for p in parts], logits
