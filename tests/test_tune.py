"""The guards of mask tuning and of the head refit: a fit is kept only when it lowers the error on held-out
calibration pairs, so neither ever makes the pruned model worse than no tuning on pairs it did not fit."""
import copy

import pytest
import torch

import headcut.prune.refit as refit
import headcut.prune.tune as tune
from headcut.arch import keep_heads, keep_neurons
from headcut.batching import collate
from headcut.prune.refit import head_linears, refit_head
from headcut.prune.tune import DAMPING, _Normal, choose_damping, tune_scales
from tests.test_budget import deep
from tests.test_scan_importance import toy_encoded

HELD = [i for i in range(40) if i % 5 == 4]  # the pairs tune_scales and refit_head hold out


def normal(scale_wanted: float) -> _Normal:
    """One scale whose tokens say the best scale is `scale_wanted`: ||m - scale_wanted||^2."""
    one = torch.ones(1, 1, dtype=torch.float64)
    return _Normal(1, 0, one, scale_wanted * one[0], scale_wanted ** 2, 1.0)


def test_damping_choice_refuses_every_fit_that_is_worse_on_held_out_pairs():
    fit = normal(2.0)  # the fitting pairs want scale 2, the held-out ones no change
    check = normal(1.0)
    assert choose_damping(fit.solve, check.error, check.error(check.no_change()), lambda x: True) is None
    agree = normal(2.0)  # held-out pairs that agree: the least damped fit wins
    error, damping = choose_damping(fit.solve, agree.error, agree.error(agree.no_change()), lambda x: True)
    assert damping == DAMPING[0] and error < 1e-6


def pruned(kind="bert", seed=0):
    teacher = deep(kind, seed=seed)
    student = copy.deepcopy(teacher)
    keep_heads(student, [[0, 1], [2], [0, 1, 3]])
    keep_neurons(student, [list(range(0, 37, 2)), list(range(30)), list(range(0, 37, 3))])
    return teacher, student


def weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("kind", ["bert", "distilbert"])
def test_a_layer_fit_worse_on_held_out_pairs_is_not_folded(kind, monkeypatch):
    """End to end through tune_scales: every solution tripled (far worse than no change) is refused, and
    the weights stay exactly as they were."""
    teacher, student = pruned(kind)
    before = weights(student)
    solve = _Normal.solve
    monkeypatch.setattr(tune._Normal, "solve", lambda self, damping: 3 * solve(self, damping))
    fits = tune_scales(teacher, student, toy_encoded(kind, n=40), batch_size=8)
    assert len(fits) == 6 and not any(f.accepted for f in fits)
    assert all(torch.equal(before[k], v) for k, v in student.state_dict().items())


def logit_error(teacher, student, enc, rows) -> float:
    batch = collate(enc, rows)
    with torch.no_grad():
        t, s = teacher(**batch).logits, student(**batch).logits
    return float(((s - t) ** 2).sum() / (t ** 2).sum())


@pytest.mark.parametrize("kind", ["bert", "roberta", "distilbert"])
def test_head_refit_lowers_the_held_out_logit_error_of_a_tuned_model(kind):
    teacher, student = pruned(kind)
    enc = toy_encoded(kind, n=40)
    tune_scales(teacher, student, enc, batch_size=8)
    untouched = [m.weight.clone() for _, m in head_linears(student)]
    before = logit_error(teacher, student, enc, HELD)
    fits = refit_head(teacher, student, enc, batch_size=8)
    after = logit_error(teacher, student, enc, HELD)
    assert [f.name for f in fits] == [name for name, _ in head_linears(teacher)] and len(fits) == 2
    assert all(f.error_after <= f.error_before for f in fits) and any(f.accepted for f in fits)
    assert after < before
    for f, (_, m), w in zip(fits, head_linears(student), untouched):
        assert torch.equal(m.weight, w) != f.accepted  # a refused fit leaves its linear alone


def test_a_head_refit_worse_on_held_out_pairs_is_not_kept(monkeypatch):
    teacher, student = pruned()
    enc = toy_encoded("bert", n=40)
    before = weights(student)
    monkeypatch.setattr(refit.Ridge, "solve", lambda self, current, damping: 3 * current)
    fits = refit_head(teacher, student, enc, batch_size=8)
    assert not any(f.accepted for f in fits)
    assert all(torch.equal(before[k], v) for k, v in student.state_dict().items())


def test_last_layer_is_fitted_on_the_first_token_only():
    """What the last layer does to other tokens never reaches the logits, so it is not fitted for them."""
    teacher, student = pruned()
    enc = toy_encoded("bert", n=40)
    everywhere = copy.deepcopy(student)
    fits = tune_scales(teacher, student, enc, batch_size=8)
    all_tokens = tune_scales(teacher, everywhere, enc, batch_size=8, last_layer_cls=False)
    assert [f.error_before for f in fits[:4]] == pytest.approx([f.error_before for f in all_tokens[:4]])
    assert fits[4].error_before != pytest.approx(all_tokens[4].error_before, rel=1e-3)


def test_teacher_targets_from_one_forward_equal_the_per_sublayer_ones(monkeypatch):
    teacher, student = pruned("distilbert")
    enc = toy_encoded("distilbert", n=40)
    recomputed = copy.deepcopy(student)
    cached = tune_scales(teacher, student, enc, batch_size=8)
    monkeypatch.setattr(tune, "TARGET_CACHE_BYTES", 0)
    assert tune._teacher_targets(teacher, [(collate(enc, [0]), None)]) is None
    fits = tune_scales(teacher, recomputed, enc, batch_size=8)
    assert [f.to_dict() for f in fits] == [f.to_dict() for f in cached]
    assert all(torch.equal(a, b) for a, b in zip(student.state_dict().values(), recomputed.state_dict().values()))
