"""The pieces of a forward pass the exact ablation scan runs (headcut/evaluate/partial_forward.py) equal
what the model's own layers compute, and the scan built from them equals the naive scan on unevenly
pruned models of every architecture, with a middle layer (three layers) and padding."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import TINY, tiny_model
from headcut.arch import encoder_layers, keep_heads, keep_neurons, layer_parts
from headcut.batching import collate
from headcut.evaluate.ablation import ablation_logits, naive_ablation_logits
from headcut.evaluate.partial_forward import (capture_attention, classify_first_token, finish_layer,
                                              last_layer_first_token, run_layers, without_heads)
from headcut.masking import head_mask
from test_scan_importance import toy_encoded

KINDS = [("bert", "eager"), ("bert", "sdpa"), ("roberta", "sdpa"), ("xlm-roberta", "eager"), ("electra", "sdpa"),
         ("distilbert", "eager"), ("distilbert", "sdpa"), ("deberta-v2", "eager"), ("modernbert", "sdpa")]
# original ids kept per layer of a 3-layer model: uneven heads and FFN widths, a 0-neuron or 0-head last layer
SHAPES = {
    "uneven, last layer without FFN": ([[0, 1, 3], [2], [1, 2]], [list(range(0, 37, 2)), list(range(37)), []]),
    "uneven, last layer without heads": ([[0, 2], [1, 2, 3], []], [list(range(37)), [], list(range(20))]),
}


def three_layers(kind: str, attn: str, shape: str | None):
    model = tiny_model(kind, attn=attn, **{"n_layers" if kind == "distilbert" else "num_hidden_layers": 3})
    if shape:
        heads, neurons = SHAPES[shape]
        keep_heads(model, heads)
        keep_neurons(model, neurons)
    return model


def padded_batch(kind: str, n: int = 6) -> dict:
    batch = collate(toy_encoded(kind, n=n), list(range(n)))
    assert (batch["attention_mask"] == 0).any()  # rows of uneven length: padding is exercised
    return batch


@pytest.mark.parametrize("shape", [None, *SHAPES])
@pytest.mark.parametrize("kind,attn", KINDS)
def test_last_layer_at_the_first_position_equals_the_model_layer(kind, attn, shape):
    model = three_layers(kind, attn, shape)
    batch = padded_batch(kind)
    hidden = torch.randn(*batch["input_ids"].shape, TINY[kind].get("hidden_size", 32),
                         generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = run_layers(model, hidden, batch, 2, 3)[:, :1]
        first = last_layer_first_token(model, hidden, batch["attention_mask"])
    assert first.shape == full.shape
    assert (first - full).abs().max() <= 1e-5


def layer_output(model, batch: dict, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(output of encoder layer `index`, logits) of one forward of `model` as it is (masks included)."""
    seen = []
    handle = encoder_layers(model)[index].register_forward_hook(  # DeBERTa's layers return (hidden, attention)
        lambda module, args, output: seen.append(output[0] if isinstance(output, tuple) else output))
    try:
        logits = model(**batch).logits
    finally:
        handle.remove()
    return seen[0], logits


@pytest.mark.parametrize("kind,attn", KINDS)
def test_masking_a_head_subtracts_its_term_from_the_attention_sum(kind, attn):
    model = three_layers(kind, attn, "uneven, last layer without FFN")
    batch = padded_batch(kind)
    part = layer_parts(model)[0]  # heads 0, 1, 3 of 4
    n = len(batch["input_ids"])
    with torch.no_grad():
        with capture_attention(model) as (heads_out, pre_norm):
            unmasked, _ = layer_output(model, batch, 0)
        assert (finish_layer(model, part, pre_norm[0]) - unmasked).abs().max() <= 1e-6
        hidden = finish_layer(model, part, without_heads(part, heads_out[0], pre_norm[0], [3, 0]))
        for j, h in enumerate([3, 0]):
            mask = torch.ones(3, 4)
            mask[0, h] = 0
            with head_mask(model, mask):
                expected, _ = layer_output(model, batch, 0)
            assert (hidden[j * n:(j + 1) * n] - expected).abs().max() <= 1e-5
            assert (expected - unmasked).abs().max() > 1e-4


@pytest.mark.parametrize("kind,attn", KINDS)
def test_classifier_on_the_first_position_equals_the_model_logits(kind, attn):
    model = three_layers(kind, attn, None)
    batch = padded_batch(kind)
    with torch.no_grad():
        last, logits = layer_output(model, batch, 2)
        assert (classify_first_token(model, last[:, :1], batch) - logits).abs().max() <= 1e-6


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("kind,attn", KINDS)
def test_fast_ablation_equals_naive_on_uneven_pruned_three_layer_models(kind, attn, shape):
    model = three_layers(kind, attn, shape)
    enc = toy_encoded(kind)
    base_n, naive = naive_ablation_logits(model, enc, batch_size=8)
    base_f, fast = ablation_logits(model, enc, batch_size=8, max_rows=16)  # 2 copies per forward: 2 chunks in layer 0
    assert np.array_equal(np.isnan(naive), np.isnan(fast))
    assert np.array_equal(base_n, base_f)
    assert np.nanmax(np.abs(naive - fast)) <= 1e-6
    assert np.nanmax(np.abs(naive - base_n[None, None])) > 1e-5  # masking a head does change the logits
