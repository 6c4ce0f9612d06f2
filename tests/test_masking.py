"""Head masks are exact: masking a head equals slicing it out of the weights, for every architecture."""
import pytest
import torch

from headcut.arch import SUPPORTED, heads_per_layer, keep_heads, layer_parts, mask_shape
from headcut.errors import UserError
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


def test_masking_a_pruned_model_uses_its_first_columns():
    model = tiny_model("bert")
    keep_heads(model, [[0, 2, 3], [1]])
    inputs = tiny_inputs()
    mask = torch.ones(2, 4)
    mask[0, 1] = 0  # second remaining head of layer 0 = original head 2
    with torch.no_grad(), head_mask(model, mask):
        masked = model(**inputs).logits
    keep_heads(model, [[0, 2], [0]])
    with torch.no_grad():
        assert torch.allclose(model(**inputs).logits, masked, atol=1e-6)


def test_neuron_mask_equals_neuron_slicing():
    from headcut.arch import keep_neurons

    model = tiny_model("bert")
    inputs = tiny_inputs()
    masks = [torch.ones(37), torch.ones(37)]
    masks[0][::3] = 0
    with torch.no_grad(), neuron_mask(model, masks):
        masked = model(**inputs).logits
    keep_neurons(model, [[i for i in range(37) if masks[l][i]] for l in range(2)])
    assert [p.ffn_in.out_features for p in layer_parts(model)] == [24, 37]
    with torch.no_grad():
        assert torch.allclose(model(**inputs).logits, masked, atol=1e-6)


def test_unsupported_architecture_lists_supported():
    from transformers import GPT2Config, GPT2ForSequenceClassification

    model = GPT2ForSequenceClassification(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=10))
    with pytest.raises(UserError, match="supports bert, roberta"):
        layer_parts(model)
