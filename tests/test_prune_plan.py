"""Plans: how many heads, which ones, and what the layer prior does (pure tensor logic, no model)."""
import pytest
import torch

from headcut_grader.errors import UserError
from headcut.prune import HeadPlan, effective_scores, layer_weights, plan_heads


def random_scores(layers=6, heads=12, seed=0):
    return torch.randn(layers, heads, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("ratio", [1.0, 0.8, 0.5, 0.3, 0.01])
def test_keeps_round_ratio_times_all_heads(ratio):
    plan = plan_heads(random_scores(), ratio)
    assert plan.num_kept == round(ratio * 72)
    assert plan.mask().sum() == plan.num_kept and plan.mask().shape == (6, 12)


def test_prior_zero_is_the_global_top_k():
    scores = random_scores(seed=1)
    plan = plan_heads(scores, 0.5, layer_prior=0.0)
    top = set(torch.topk(scores.flatten(), 36).indices.tolist())
    assert {l * 12 + h for l, heads in enumerate(plan.keep) for h in heads} == top


def test_within_a_layer_the_best_raw_scores_are_kept():
    scores = random_scores(seed=2)
    for prior in (0.0, 1.0, 3.0):
        plan = plan_heads(scores, 0.6, layer_prior=prior)
        for layer, heads in enumerate(plan.keep):
            best = torch.argsort(scores[layer], descending=True)[: len(heads)]
            assert set(heads) == set(best.tolist())


def test_layer_prior_formula_and_effect():
    assert torch.allclose(layer_weights(4, 1.0), torch.tensor([2.0, 5 / 3, 4 / 3, 1.0], dtype=torch.float64))
    scores = torch.arange(8.0).view(2, 4)  # the top layer holds the best heads
    eff = effective_scores(scores, layer_prior=1.0)
    # percentiles 1/8..8/8; the bottom layer's are doubled
    assert torch.allclose(eff[0], torch.tensor([2, 4, 6, 8], dtype=torch.float64) / 8)
    assert torch.allclose(eff[1], torch.tensor([5, 6, 7, 8], dtype=torch.float64) / 8)
    assert plan_heads(scores, 0.5, layer_prior=0.0).heads_per_layer == [0, 4]
    assert plan_heads(scores, 0.5, layer_prior=1.0).heads_per_layer == [2, 2]
    # on scores without a layer trend a stronger prior moves heads downwards
    counts = [plan_heads(random_scores(seed=3), 0.5, layer_prior=p).heads_per_layer for p in (0.0, 1.0, 4.0)]
    assert counts[0][0] < counts[1][0] < counts[2][0] and counts[0][-1] > counts[1][-1] > counts[2][-1]


def test_prior_is_scale_free_and_handles_negative_scores():
    scores = random_scores(seed=4)
    a = plan_heads(scores, 0.7, layer_prior=1.5)
    b = plan_heads(scores * 1000 - 5, 0.7, layer_prior=1.5)
    assert a == b


def test_min_heads_and_its_limit():
    scores = torch.zeros(3, 4)
    scores[2] = 10  # all the value in the top layer
    plan = plan_heads(scores, 0.5, layer_prior=0.0, min_heads=1)
    assert plan.heads_per_layer == [1, 1, 4]
    with pytest.raises(UserError, match="min_heads=3 needs 9 heads but keep_ratio=0.5 keeps 6; raise keep_ratio or "
                                        "lower min_heads"):
        plan_heads(scores, 0.5, min_heads=3)


@pytest.mark.parametrize("ratio", [0.0, -0.1, 1.01])
def test_keep_ratio_outside_range_is_a_user_error(ratio):
    with pytest.raises(UserError, match=r"^keep_ratio=.* is outside \(0, 1\]; pass e.g. keep_ratio=0.8"):
        plan_heads(random_scores(), ratio)


def test_unavailable_heads_are_never_kept_and_plans_round_trip():
    scores = random_scores(seed=5)
    available = torch.ones(6, 12, dtype=torch.bool)
    available[:, :6] = False
    plan = plan_heads(scores, 0.4, available=available)
    assert all(h >= 6 for heads in plan.keep for h in heads) and plan.num_kept == round(0.4 * 72)
    assert HeadPlan.from_dict(plan.to_dict()) == plan == HeadPlan.from_mask(plan.mask())
    with pytest.raises(ValueError, match="only 36 are available"):
        plan_heads(scores, 0.6, available=available)
