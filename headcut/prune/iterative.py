"""Iterative pruning (Michel et al. 2019): remove heads in steps and re-score the smaller model between
steps, so a head that only mattered as a backup for a removed one is judged again."""
from __future__ import annotations

import copy
from typing import Callable

import torch

from headcut.arch import keep_heads, mask_shape, present_heads
from headcut.model_arguments import check_model
from headcut.prune.plan import HeadPlan, check_keep_ratio, plan_heads
from headcut_grader.ranges import Range, check_callbacks, checked_number


def step_ratios(keep_ratio: float, steps: int) -> list[float]:
    """Keep ratios after each step, shrinking linearly from 1 to keep_ratio."""
    return [1 - (1 - keep_ratio) * (s + 1) / steps for s in range(steps)]


def budget_shares(share: float, steps: int) -> list[float]:
    """Shares of the full model after each step, shrinking geometrically from 1 to `share` (each step removes the
    same fraction of what is left): 0.25 in 5 steps is 0.76, 0.57, 0.44, 0.33, 0.25."""
    return [share ** ((s + 1) / steps) for s in range(steps - 1)] + [share]


def iterative_plan(
    model,
    score_fn: Callable[[torch.nn.Module], torch.Tensor],
    keep_ratio: float,
    *,
    steps: int,
    layer_prior: float = 0.0,
    min_heads: int = 0,
    progress: Callable[[int, HeadPlan], None] | None = None,
) -> tuple[HeadPlan, torch.nn.Module]:
    """Prune a deep copy of `model` in `steps` steps; return the final plan and the pruned copy.

    `score_fn(current_model)` returns (num_layers, num_heads) scores, higher = more important, in the
    original head numbering (as every scan numbers a pruned model's heads).
    `progress(step, plan)` is called after each step.
    """
    check_callbacks("iterative_plan", progress=progress)
    check_model(model, "iterative_plan model")
    check_keep_ratio(keep_ratio)
    steps = checked_number(steps, "iterative_plan steps", Range(1), whole=True)  # 0 was a ValueError, 2.5 a TypeError
    num_layers, num_heads = mask_shape(model)
    current = copy.deepcopy(model).eval()
    plan = HeadPlan(tuple(tuple(range(num_heads)) for _ in range(num_layers)), num_heads)
    for step, ratio in enumerate(step_ratios(keep_ratio, steps), start=1):
        available = present_heads(current)
        scores = torch.as_tensor(score_fn(current), dtype=torch.float64).detach().masked_fill(~available, 0.0)
        plan = plan_heads(scores, ratio, layer_prior=layer_prior, min_heads=min_heads, available=available)
        keep_heads(current, [list(k) for k in plan.keep])
        if progress:
            progress(step, plan)
    return plan, current
