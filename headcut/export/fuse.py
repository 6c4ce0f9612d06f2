"""Attention exported as one ONNX Runtime `MultiHeadAttention` op per layer, each with its own head count.

Traced as it is, a BERT layer's attention becomes some twenty small ops (reshapes, transposes, a scaled
matmul, the mask's Where/IsNaN, softmax, a second matmul) that ORT runs one by one: on an INT8 grader they
take a third of the time. ORT's own BERT fusion would merge them, but with one global head count, which
corrupts a pruned model (see optimize.py). Here the exporter emits the fused op directly, layer by layer,
with the head count that layer really has; a 0-head stub has no attention to fuse. The parity gate checks
the result like any other graph.
"""
from __future__ import annotations

import types
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F

from headcut.arch import architecture, layer_parts

OP = "com.microsoft::MultiHeadAttention"
MASK_FILTER = -10000.0  # ORT's default for masked keys: exp(-10000) is 0 in fp32, as HF's dtype minimum


class _MultiHeadAttention(torch.autograd.Function):
    """Scaled dot-product attention over (batch, seq, heads * head_size) projections without their biases;
    exports as ORT's contrib op, which adds `bias` (q, k and v biases concatenated) itself."""

    @staticmethod
    def forward(ctx, q, k, v, bias, key_mask, num_heads: int, scale: float):
        batch, seq, width = q.shape
        q, k, v = (t + b for t, b in zip((q, k, v), bias.split(width)))
        q, k, v = (t.view(batch, seq, num_heads, -1).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) * scale + (1 - key_mask[:, None, None, :].to(q.dtype)) * MASK_FILTER
        return (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, seq, width)

    @staticmethod
    def symbolic(g, q, k, v, bias, key_mask, num_heads: int, scale: float):
        out = g.op(OP, q, k, v, bias, key_mask, num_heads_i=num_heads, scale_f=scale, mask_filter_value_f=MASK_FILTER)
        out.setType(q.type())  # the context has the query's shape and type; without it the tracer warns per layer
        return out


def _fused_forward(part, out_inside: bool, mask: dict):
    def forward(self, hidden_states, attention_mask=None, *args, **kwargs):
        q, k, v = (F.linear(hidden_states, lin.weight) for lin in (part.query, part.key, part.value))
        bias = torch.cat([part.query.bias, part.key.bias, part.value.bias])
        context = _MultiHeadAttention.apply(q, k, v, bias, mask["keys"], part.num_heads, part.head_size ** -0.5)
        return (part.out(context) if out_inside else context), None

    return forward


@contextmanager
def fused_attention(model: nn.Module):
    """Within the block, every layer with heads computes attention through `_MultiHeadAttention`; yields
    `set_mask(attention_mask)`, which the exported wrapper calls with the (batch, seq) padding mask."""
    out_inside = architecture(model).out_inside_attention
    mask: dict = {}
    patched = []
    for part in layer_parts(model):
        if part.attention is None:  # a 0-head stub: nothing to fuse
            continue
        part.attention.forward = types.MethodType(_fused_forward(part, out_inside, mask), part.attention)
        patched.append(part.attention)

    def set_mask(attention_mask: torch.Tensor) -> None:
        mask["keys"] = attention_mask.to(torch.int32)

    try:
        yield set_mask
    finally:
        for module in patched:
            del module.forward  # back to the class's own forward
