"""Distillation losses as pure functions: exact values on hand-made tensors."""
from __future__ import annotations

import math

import pytest
import torch

from headcut.distill.losses import attention_kl, even_layer_map, hidden_mse, kd_loss, per_layer


def test_kd_loss_is_temperature_scaled_kl_and_zero_at_the_teacher():
    teacher = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    student = torch.tensor([[0.0, 1.0, 0.0], [1.0, -1.0, 2.0]])
    assert kd_loss(teacher, teacher, temperature=3.0).item() == pytest.approx(0.0, abs=1e-7)
    t, s = (teacher / 2).softmax(-1), (student / 2).softmax(-1)
    expected = (t * (t.log() - s.log())).sum(-1).mean() * 4  # batch mean, times T^2
    assert kd_loss(student, teacher, temperature=2.0).item() == pytest.approx(expected.item(), rel=1e-6)
    student.requires_grad_(True)
    kd_loss(student, teacher, temperature=2.0).backward()
    assert student.grad.abs().sum() > 0


def test_hidden_mse_ignores_padding_and_projects_widths():
    mask = torch.tensor([[1, 1, 0]])
    teacher = tuple(torch.zeros(1, 3, 4) for _ in range(3))  # embeddings + 2 layers
    student = [torch.zeros(1, 3, 4), torch.zeros(1, 3, 4)]
    student[1][0, 2] = 100.0  # a padded position: must not count
    assert hidden_mse(student, teacher, mask, layer_map=[1]).item() == 0.0
    student[1][0, 0] = 2.0  # one real token off by 2 in all 4 dims: mean over 2 tokens x 4 dims = 4*4/8
    assert hidden_mse(student, teacher, mask, layer_map=[1]).item() == pytest.approx(2.0)
    narrow = [torch.zeros(1, 3, 2), torch.ones(1, 3, 2)]
    proj = torch.nn.ModuleList([torch.nn.Linear(2, 4)])
    with torch.no_grad():
        proj[0].weight.zero_()
        proj[0].bias.fill_(1.0)  # maps everything to ones: squared error 1 per element
    assert hidden_mse(narrow, teacher, mask, layer_map=[0], projections=proj).item() == pytest.approx(1.0)


def test_attention_kl_averages_heads_and_skips_headless_layers():
    uniform = torch.full((1, 2, 2, 2), 0.5)
    peaked = torch.tensor([[[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]]])  # heads average to uniform
    mask = torch.ones(1, 2)
    assert attention_kl([peaked], [uniform], mask, layer_map=[0]).item() == pytest.approx(0.0, abs=1e-6)
    sharp = torch.tensor([[[[0.9, 0.1], [0.9, 0.1]]]])  # one head
    expected = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert attention_kl([sharp], [uniform], mask, layer_map=[0]).item() == pytest.approx(expected, rel=1e-5)
    assert (attention_kl([None, sharp], [uniform, uniform], mask, layer_map=[0, 1]).item()
            == pytest.approx(expected, rel=1e-5))
    assert per_layer(("a", "b"), [2, 0, 3]) == ["a", None, "b"]


def test_even_layer_map_ends_on_the_top_layer():
    assert even_layer_map(3, 6) == [1, 3, 5]
    assert even_layer_map(2, 12) == [5, 11]
    assert even_layer_map(4, 4) == [0, 1, 2, 3]


def test_online_teacher_holds_its_attention_maps_in_bounded_pieces_with_the_same_loss(monkeypatch):
    """The attention loss's teacher pass runs in pieces of at most MAX_HELD_SCORES map entries and keeps only the
    matched layers' head-averaged maps; loss, gradient, logits and hidden states equal the unsplit pass's."""
    import headcut.evaluate.attention as attention
    from headcut.distill.teacher import online_teacher
    from tests.conftest import tiny_inputs, tiny_model

    # wide initial weights give peaked attention, so the loss is far from 0 and a relative tolerance means something
    teacher = tiny_model(num_hidden_layers=4, initializer_range=0.5)
    student = tiny_model(num_hidden_layers=2, seed=1, initializer_range=0.5)
    batch = tiny_inputs(batch=7, length=9)
    layer_map, heads = [1, 3], teacher.config.num_attention_heads

    def attention_loss(target):
        s = student(**batch, output_attentions=True).attentions
        student.zero_grad()
        loss = attention_kl(s, target.attentions, batch["attention_mask"], layer_map=layer_map)
        loss.backward()
        return loss.item(), [p.grad.clone() for p in student.parameters() if p.grad is not None]

    with torch.no_grad():
        whole = teacher(**batch, output_hidden_states=True, output_attentions=True)
    rows_seen = []
    teacher.register_forward_pre_hook(lambda m, args, kwargs: rows_seen.append(len(kwargs["input_ids"])),
                                      with_kwargs=True)
    cap = 2 * 4 * heads * 9 ** 2  # two pairs' maps of all 4 layers
    monkeypatch.setattr(attention, "MAX_HELD_SCORES", cap)
    split = online_teacher(teacher, batch, hidden=True, attention_layers=set(layer_map))
    assert rows_seen == [2, 2, 2, 1]
    held = [a for a in split.attentions if a is not None]
    assert len(held) == 2 and all(a.shape == (7, 1, 9, 9) for a in held)  # matched layers, heads averaged
    assert torch.allclose(split.logits, whole.logits, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(split.hidden_states, whole.hidden_states))
    (loss_whole, grads_whole), (loss_split, grads_split) = attention_loss(whole), attention_loss(split)
    assert loss_split == pytest.approx(loss_whole, rel=1e-5) and loss_whole > 0.1
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(grads_whole, grads_split))
