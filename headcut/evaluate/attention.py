"""Attention weights of every head, read from the attention modules (needs eager attention).

Shared by the entropy importance score and the head-function probes.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch

from headcut.arch import layer_parts


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
