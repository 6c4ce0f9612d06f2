"""Attention weights of every head, read from the attention modules (needs eager attention).

Shared by the entropy importance score and the head-function probes; its batch bound (`scoring_batches`) is what
every scoring pass of an eager-attention model (DeBERTa) runs, so --batch-size never multiplies its L x L scores.
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


def rows_within(model, length: int, *, layers_held: bool) -> int:
    """Most rows of `length` tokens whose attention maps stay within MAX_HELD_SCORES (at least 1): every layer's
    together when a pass holds them all (a probe collects them, a backward keeps them), else the widest layer's (an
    inference forward builds one layer's at a time)."""
    heads = [len(p.head_ids) for p in layer_parts(model)]
    held = sum(heads) if layers_held else max(heads, default=0)
    return max(1, MAX_HELD_SCORES // (max(1, held) * length ** 2))


def row_pieces(model, rows: int, length: int, *, layers_held: bool) -> list[slice]:
    """Consecutive slices of `rows` rows of `length` tokens, each of at most `rows_within` rows: how a pass whose
    attention maps would pass MAX_HELD_SCORES is cut (a scoring pass's batch, the distilling teacher's)."""
    size = rows_within(model, length, layers_held=layers_held)
    return [slice(start, start + size) for start in range(0, rows, size)]


def attention_batches(model, encoded: Encoded, batch_size: int, *, layers_held: bool = True) -> list[np.ndarray]:
    """`length_batches(encoded, batch_size)`, each cut by `within_held_scores`."""
    return within_held_scores(model, encoded, length_batches(encoded, batch_size), layers_held=layers_held)


def within_held_scores(model, encoded: Encoded, batches, *, layers_held: bool) -> list[np.ndarray]:
    """`batches` (row ids of `encoded`), each cut into consecutive pieces of at most `rows_within` rows at the
    batch's longest pair; a pair whose maps alone exceed it goes alone (its length is capped by the model's
    positions). Sums over the pieces equal the batch's."""
    lengths = encoded.lengths()
    return [rows[piece] for rows in batches
            for piece in row_pieces(model, len(rows), int(lengths[rows].max()), layers_held=layers_held)]


def eager(model) -> bool:
    """Whether the model's forward builds each layer's (batch, heads, L, L) scores whole: eager attention, the only
    kind DeBERTa has. SDPA models are left to their kernels, whose batches this module does not cut."""
    return model.config._attn_implementation == "eager"


def scoring_batches(model, encoded: Encoded, batch_size: int, *, layers_held: bool) -> list[np.ndarray]:
    """The batches a scoring pass runs: `length_batches(encoded, batch_size)`, cut by `bounded`."""
    return bounded(model, encoded, length_batches(encoded, batch_size), layers_held=layers_held)


def bounded(model, encoded: Encoded, batches, *, layers_held: bool) -> list[np.ndarray]:
    """`batches` (row ids of `encoded`) as a scoring pass runs them: for an eager model cut by `within_held_scores`,
    so --batch-size never makes a pass hold more than MAX_HELD_SCORES attention scores; as they are otherwise."""
    if eager(model):
        return within_held_scores(model, encoded, batches, layers_held=layers_held)
    return list(batches)


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
