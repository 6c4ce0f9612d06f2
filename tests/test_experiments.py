"""The study's experiments: effect sizes agree with the metrics module, masks drop what they say,
and every experiment's table comes out of a tiny model."""
from __future__ import annotations

import numpy as np
import torch

from conftest import tiny_model
from headcut.evaluate.ablation import ablation_logits
from headcut.evaluate.experiments import RANDOM_RATIOS, effects, random_masks, run_experiments
from headcut.evaluate.metrics import agreement, expected_grade, nll, spearman
from headcut.evaluate.predict import predict_logits
from headcut.masking import head_mask
from test_scan_importance import toy_encoded

GRADES = (1, 2, 3, 4, 5)


def test_effects_match_the_metrics_module():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(300, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 300)
    masked = (base + rng.normal(scale=0.7, size=(2, 300, 5))).astype(np.float32)
    e = effects(masked, base, labels, GRADES, iters=100)
    acc_base = np.mean(base.argmax(1) == labels)
    acc = np.mean([np.mean(m.argmax(1) == labels) for m in masked])
    assert np.isclose(e["accuracy"], acc)
    assert np.isclose(e["relative_accuracy_pct"], 100 * (acc - acc_base) / acc_base)
    assert np.isclose(e["loss_delta"], np.mean([nll(m, labels) for m in masked]) - nll(base, labels))
    rho = np.mean([spearman(expected_grade(m, GRADES), labels) for m in masked])
    assert np.isclose(e["spearman_delta"], rho - spearman(expected_grade(base, GRADES), labels))
    assert np.isclose(e["flip_rate"], 1 - np.mean([agreement(m, base) for m in masked]))
    for key in ("relative_accuracy_pct", "loss_delta", "spearman_delta", "flip_rate"):
        lo, hi = e[f"{key}_ci"]
        assert lo < hi and lo <= e[key] + 1e-9 and e[key] - 1e-9 <= hi
    same = effects(base[None], base, labels, GRADES, iters=50)
    assert same["flip_rate"] == 0 and same["loss_delta"] == 0 and same["flip_rate_ci"] == [0.0, 0.0]


def test_an_effect_that_means_nothing_is_nan_not_a_number():
    """Was: a baseline grading no pair right gave relative_accuracy_pct = 100 x the masked accuracy (as if the
    baseline were 1: 'accuracy +50.00%' of nothing), and pairs of one gold grade a spearman_delta of 0 with a CI of
    [0, 0]; each is now NaN with a NaN CI (n/a in scan's output, '–' in its report, null in importance.json)."""
    from headcut.cli.scan import summary_lines

    labels = np.array([0, 0, 0, 0])
    base = np.tile(np.array([0.0, 5.0, 0.0, 0.0, 0.0], dtype=np.float32), (4, 1))  # grade 2 for every pair: none right
    masked = base.copy()[None]
    masked[0, :2] = np.array([5.0, 0.0, 0.0, 0.0, 0.0])  # two right once masked
    e = effects(masked, base, labels, GRADES, iters=50)
    assert e["accuracy"] == 0.5 and np.isnan(e["relative_accuracy_pct"]) and np.isnan(e["spearman_delta"])
    assert np.isnan(e["relative_accuracy_pct_ci"]).all() and np.isnan(e["spearman_delta_ci"]).all()
    assert e["loss_delta"] < 0 and e["flip_rate"] == 0.5 and np.isfinite(e["flip_rate_ci"]).all()
    row = {"ratio": 0.1, **e}
    assert summary_lines({"ranking": {}, "experiments": {"random": [row]}}) == [
        f"random 10%: accuracy n/a  loss {e['loss_delta']:+.4f}  flip rate 0.500"]
    graded = effects(masked, base, np.array([1, 0, 1, 2]), GRADES, iters=50)  # base gets one right, grades differ
    assert np.isclose(graded["relative_accuracy_pct"], 0.0) and np.isfinite(graded["spearman_delta"])


def test_a_masked_model_that_grades_every_pair_alike_scores_the_metrics_module_s_zero():
    """A mask that collapses the model (one expected grade for every pair) ranks nothing: its Spearman is 0, as
    metrics.spearman scores a constant prediction against varied gold, so spearman_delta is minus the baseline's
    (the largest effect, not n/a); only pairs of one gold grade make it NaN."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=(40, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 40)
    collapsed = np.tile(np.array([9.0, 0, 0, 0, 0], dtype=np.float32), (1, 40, 1))
    e = effects(collapsed, base, labels, GRADES, iters=50)
    assert spearman(expected_grade(collapsed[0], GRADES), labels) == 0.0
    assert np.isclose(e["spearman_delta"], -spearman(expected_grade(base, GRADES), labels))
    assert np.isfinite(e["spearman_delta_ci"]).all()


def test_random_masks_drop_count_heads_among_the_allowed():
    allowed = torch.zeros(3, 4, dtype=torch.bool)
    allowed[1:] = True
    masks = random_masks(allowed, 5, draws=7, generator=torch.Generator().manual_seed(0))
    assert masks.shape == (7, 3, 4)
    assert ((1 - masks).sum((1, 2)) == 5).all() and (masks[:, 0] == 1).all()
    assert len({tuple(m.flatten().tolist()) for m in masks}) > 1  # draws differ


def test_every_experiment_runs_on_a_tiny_model():
    model = tiny_model("bert", num_hidden_layers=4)
    enc = toy_encoded("bert", n=24)
    labels = np.random.default_rng(1).integers(0, 5, 24)
    base, single = ablation_logits(model, enc, batch_size=8)
    term = torch.zeros(4, 4)
    term[0, 1], term[1, 3], term[2, 2] = 3.0, 2.0, 1.0
    out = run_experiments(model, enc, labels, GRADES, base=base, single=single, term_scores=term, draws=3, k=2,
                          iters=20, batch_size=8)
    assert [r["heads_masked"] for r in out["random"]] == [round(r * 16) for r in RANDOM_RATIOS]
    assert all(r["draws"] == 3 for r in out["random"])
    assert [r["heads_masked"] for r in out["halves"]["lower"]] == [2, 3, 5, 6, 8]  # 8 heads in the lower half
    assert len(out["layers"]) == 4 and len(out["heads"]) == 16
    term_rows = {r["condition"]: r for r in out["term"]}
    assert term_rows["2 strongest term-matching heads"]["heads"] == [[0, 1], [1, 3]]
    assert term_rows["lower half except the 2 term-matching heads"]["heads_masked"] == 6
    # masking layer 2 whole: the same flip rate as a direct masked forward
    mask = torch.ones(4, 4)
    mask[2] = 0
    with head_mask(model, mask):
        direct = predict_logits(model, None, None, batch_size=8, encoded=enc)
    assert np.isclose(out["layers"][2]["flip_rate"], 1 - agreement(direct, base))
    assert np.isclose(out["layers"][2]["loss_delta"], nll(direct, labels) - nll(base, labels), atol=1e-6)
