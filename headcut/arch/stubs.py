"""Exact stand-ins for a sublayer that surgery left with 0 heads or 0 FFN neurons.

Zero-width linears break ONNX Runtime, so an empty sublayer is replaced by what it computes: its output
projection's bias (and, post-norm, the LayerNorm of residual + bias).
"""
from __future__ import annotations

import torch
from torch import nn


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
