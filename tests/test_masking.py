"""Head masks are exact: masking a head equals slicing it out of the weights, for every architecture."""
import pytest
import torch

from headcut.arch import SUPPORTED, heads_per_layer, keep_heads, layer_parts, mask_shape
from headcut_grader.errors import UserError
from headcut.masking import head_mask, neuron_mask, ones_mask
from tests.conftest import tiny_inputs, tiny_model

MASK = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # uneven, and layer 1 loses every head


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("kind", SUPPORTED)
def test_mask_equals_slicing(kind, attn):
    model = tiny_model(kind, attn=attn)
    inputs = tiny_inputs(kind=kind)
    with torch.no_grad():
        full = model(**inputs).logits
        with head_mask(model, MASK):
            masked = model(**inputs).logits
        keep_heads(model, [[h for h in range(4) if MASK[l, h]] for l in range(2)])
        pruned = model(**inputs).logits
    assert heads_per_layer(model) == [2, 0]
    assert (masked - pruned).abs().max().item() <= 1e-6
    assert (masked - full).abs().max().item() > 1e-4  # the mask did something


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_mask_is_differentiable(kind):
    model = tiny_model(kind)
    mask = ones_mask(model, requires_grad=True)
    with head_mask(model, mask):
        model(**tiny_inputs(kind=kind)).logits.sum().backward()
    assert mask.grad.shape == mask_shape(model)
    assert mask.grad.abs().sum() > 0


def test_per_example_masks_equal_separate_runs():
    model = tiny_model("bert")
    inputs = tiny_inputs(batch=1)
    masks = torch.stack([torch.ones(2, 4), MASK, torch.eye(2, 4)])  # three masks
    stacked = masks.permute(1, 0, 2)  # (layers, batch, heads)
    batch = {k: v.repeat(3, 1) for k, v in inputs.items()}
    with torch.no_grad():
        with head_mask(model, stacked):
            together = model(**batch).logits
        for i, m in enumerate(masks):
            with head_mask(model, m):
                assert torch.allclose(model(**inputs).logits[0], together[i], atol=1e-6)


def test_masks_of_a_pruned_model_use_original_head_ids():
    model = tiny_model("bert")
    keep_heads(model, [[0, 2, 3], [1]])
    assert [p.head_ids for p in layer_parts(model)] == [[0, 2, 3], [1]]
    inputs = tiny_inputs()
    mask = torch.ones(2, 4)
    mask[0, 2] = 0  # original head 2 (the layer's second remaining head)
    mask[1, 0] = 0  # a head layer 1 no longer has: ignored
    with torch.no_grad(), head_mask(model, mask):
        masked = model(**inputs).logits
    keep_heads(model, [[0, 3], [1]])  # original ids again: plans compose on a pruned model
    assert [p.head_ids for p in layer_parts(model)] == [[0, 3], [1]]
    with torch.no_grad():
        assert torch.allclose(model(**inputs).logits, masked, atol=1e-6)
    with pytest.raises(ValueError, match="has no heads \\[2\\]"):
        keep_heads(model, [[2], [1]])


@pytest.mark.parametrize("kind", SUPPORTED)
def test_neuron_mask_equals_neuron_slicing_uneven_and_empty(kind):
    from headcut.arch import keep_neurons, neurons_per_layer

    model = tiny_model(kind, num_hidden_layers=3) if kind != "distilbert" else tiny_model(kind, n_layers=3)
    inputs = tiny_inputs(kind=kind)
    mask = torch.ones(3, 37)
    mask[0, ::3] = 0  # uneven widths: 24, 37 and a layer with no neurons left
    mask[2] = 0
    with torch.no_grad(), neuron_mask(model, mask):
        masked = model(**inputs).logits
    keep_neurons(model, [[i for i in range(37) if mask[l, i]] for l in range(3)])
    assert neurons_per_layer(model) == [24, 37, 0]
    with torch.no_grad():
        assert (model(**inputs).logits - masked).abs().max() <= 1e-5
    # masks keep the original numbering on the narrowed model: dropping neuron 1 again changes nothing new
    again = mask.clone()
    again[0, 1] = 0
    keep = model(**inputs).logits
    with torch.no_grad(), neuron_mask(model, again):
        twice = model(**inputs).logits
    keep_neurons(model, [[i for i in range(37) if again[l, i]] for l in range(3)])
    with torch.no_grad():
        assert (model(**inputs).logits - twice).abs().max() <= 1e-5
        assert not torch.allclose(twice, keep)


def test_unsupported_architecture_lists_supported():
    from transformers import GPT2Config, GPT2ForSequenceClassification

    model = GPT2ForSequenceClassification(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=10))
    with pytest.raises(UserError, match="supports bert, roberta"):
        layer_parts(model)
