"""The ridge refit of each sublayer's whole output projection (tune_scales' mode "weights") and the per-sublayer
choice between it and the per-unit scales (mode "best"): never worse than no tuning on held-out calibration
pairs, "best" never worse than either fit on the same inputs, and what is written is what was measured."""
import copy

import pytest
import torch

import headcut.prune.tune as tune
from headcut.batching import collate
from headcut.prune.tune import tune_scales
from tests.test_budget import sublayer_errors
from tests.test_scan_importance import toy_encoded
from tests.test_tune import pruned, weights

HELD = [i for i in range(40) if i % 5 == 4]  # the pairs tune_scales holds out


def test_an_unknown_mode_is_refused_with_the_allowed_values():
    teacher, student = pruned()
    with pytest.raises(ValueError, match="'ridge' is not one of scales, weights, best"):
        tune_scales(teacher, student, toy_encoded("bert", n=40), mode="ridge")


@pytest.mark.parametrize("kind", ["bert", "modernbert"])  # modernbert: projections without a bias, pre-norm
@pytest.mark.parametrize("mode", ["weights", "best"])
def test_no_sublayer_gets_worse_on_held_out_pairs_and_the_written_weights_do_what_was_measured(kind, mode):
    teacher, student = pruned(kind)
    enc = toy_encoded(kind, n=40)
    fits = tune_scales(teacher, student, enc, batch_size=8, mode=mode, last_layer_cls=False)
    assert len(fits) == 6 and all(f.error_after <= f.error_before for f in fits)
    assert all(f.error_after < f.error_before for f in fits if f.accepted)
    assert any(f.accepted and f.mode == "weights" for f in fits)
    assert {f.to_dict()["mode"] for f in fits} <= {"scales", "weights"}
    # measured on the tuned model: each sublayer's inputs are those it was fitted on (tuning goes bottom up), and
    # the fit written, refitted on all pairs, does about as well on the held-out pairs as the one recorded (not
    # provably better: the damping is relative to the larger Gram; a modernbert scales fit here is 2e-4 above)
    after = sublayer_errors(teacher, student, enc, HELD)
    assert all(a <= f.error_after * (1 + 1e-3) for a, f in zip(after, fits))


def test_a_weights_fit_worse_on_held_out_pairs_is_not_written(monkeypatch):
    teacher, student = pruned()
    before = weights(student)
    monkeypatch.setattr(tune.Ridge, "solve", lambda self, current, damping: 3 * current)
    fits = tune_scales(teacher, student, toy_encoded("bert", n=40), batch_size=8, mode="weights")
    assert len(fits) == 6 and not any(f.accepted for f in fits)
    assert all(f.error_after == f.error_before and f.mode == "weights" for f in fits)
    assert all(torch.equal(before[k], v) for k, v in student.state_dict().items())


def test_best_keeps_the_lower_of_the_two_fits_of_each_sublayer(monkeypatch):
    teacher, student = pruned()
    enc = toy_encoded("bert", n=40)
    alone = {mode: tune_scales(teacher, copy.deepcopy(student), enc, batch_size=8, mode=mode)
             for mode in ("scales", "weights")}
    candidates = []
    keep_best = tune._keep_best
    monkeypatch.setattr(tune, "_keep_best", lambda choices: candidates.append([c[0] for c in choices])
                        or keep_best(choices))
    best = tune_scales(teacher, student, enc, batch_size=8, mode="best")
    # the first sublayer sees the same inputs in all three runs: both candidates are the fits run alone
    assert candidates[0] == [alone["scales"][0], alone["weights"][0]]
    assert best[0].error_after <= min(alone["scales"][0].error_after, alone["weights"][0].error_after) + 1e-9
    # later ones see what best kept below them: best keeps the lower of its two candidates on those inputs
    assert len(candidates) == len(best) == 6
    for fit, (scales, ridge) in zip(best, candidates):
        assert (scales.layer, scales.sublayer, ridge.mode) == (fit.layer, fit.sublayer, "weights")
        assert fit.error_after <= min(scales.error_after, ridge.error_after) + 1e-9
        assert fit.error_after <= fit.error_before
    assert {f.mode for f in best} == {"scales", "weights"}  # on this model each wins somewhere


def divergence(teacher, student, enc) -> tuple[float, float]:
    """Mean KL(teacher || student) of the grade distributions and mean squared logit difference."""
    batch = collate(enc, list(range(len(enc))))
    with torch.no_grad():
        t, s = teacher(**batch).logits, student(**batch).logits
    kl = (t.softmax(-1) * (t.log_softmax(-1) - s.log_softmax(-1))).sum(-1).mean()
    return float(kl), float(((s - t) ** 2).mean())


def test_best_is_not_worse_than_scales_end_to_end_on_pairs_it_did_not_fit():
    """On 100 pairs outside the 200 calibration ones. Each sublayer's choice is made on its LayerNorm input, a
    proxy for the logits: across 3 seeds x 4 architectures best's KL ranged from 22% below scales' to 4.8%
    above (3% above for bert seed 0), so each seed may be up to 5% worse; summed over seeds it must be better."""
    unseen, totals = toy_encoded("bert", n=100, seed=1), torch.zeros(2, 2)
    for seed in range(3):
        teacher, student = pruned(seed=seed)
        got = []
        for mode in ("scales", "best"):
            tuned = copy.deepcopy(student)
            tune_scales(teacher, tuned, toy_encoded("bert", n=200), batch_size=32, mode=mode)
            got.append(divergence(teacher, tuned, unseen))
        (kl_scales, mse_scales), (kl_best, mse_best) = got
        assert kl_best <= 1.05 * kl_scales and mse_best <= 1.05 * mse_scales
        totals += torch.tensor(got)
    assert totals[1, 0] < totals[0, 0] and totals[1, 1] < totals[0, 1]
