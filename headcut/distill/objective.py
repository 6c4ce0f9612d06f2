"""The distillation objective as a map of named losses (TextBrewer's shape), one map per teacher task.

A grades teacher teaches with cross-entropy on gold grades and KL on its softened grades; a one-score teacher
(a reranker) with MSE on its score, margin-MSE on its score differences between titles of one query, and MSE on
the gold score where a pair has one. Hidden
-state and attention losses describe the encoder, not the head, so both maps carry them. Each entry names the
recipe field that weighs it; an entry weighed 0 is never computed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from headcut.distill.losses import attention_kl, gold_mse, hidden_mse, kd_loss, margin_mse, per_layer, score_mse
from headcut.finetune import grade_loss


@dataclass
class StepInputs:
    """What one training step's losses read. Shapes: B pairs, C outputs (grades, or 1 for a score)."""

    student: object  # the student's model output: logits (B, C), hidden_states, attentions
    teacher: object | None  # the teacher's output when run online (hidden-state / attention losses), else None
    teacher_logits: torch.Tensor | None  # (B, C), cached or online; None when no loss needs them
    gold: torch.Tensor | None  # grades: label ids (B,), the teacher's grade where a pair has none; score: gold
    # scores (B,), NaN where a pair has none
    query_ids: torch.Tensor | None  # (B,) which query each pair belongs to (margin-MSE)
    attention_mask: torch.Tensor  # (B, T)


@dataclass(frozen=True)
class Fixed:
    """What a run's losses share across steps."""

    recipe: object  # the DistillRecipe
    layer_map: list[int]
    projections: object | None  # student-width -> teacher-width Linears (hidden_mse), or None
    student_heads: list[int]
    teacher_heads: list[int]


@dataclass(frozen=True)
class Loss:
    weight: str  # the recipe field that weighs this loss
    compute: Callable[[StepInputs, Fixed], torch.Tensor]
    targets: bool = False  # reads the teacher's logits (cached once when the recipe allows)
    online: bool = False  # reads the teacher's hidden states or attention maps: runs the teacher every step


def _hidden(x: StepInputs, f: Fixed) -> torch.Tensor:
    return hidden_mse(x.student.hidden_states, x.teacher.hidden_states, x.attention_mask, layer_map=f.layer_map,
                      projections=f.projections)


def _attention(x: StepInputs, f: Fixed) -> torch.Tensor:
    return attention_kl(per_layer(x.student.attentions, f.student_heads),
                        per_layer(x.teacher.attentions, f.teacher_heads), x.attention_mask, layer_map=f.layer_map)


# Summed in this order (the grades order is the one distill always had, so its losses are bit-identical).
LOSSES: dict[str, dict[str, Loss]] = {
    "grades": {
        "ce": Loss("ce_weight", lambda x, f: grade_loss(x.student.logits.float(), x.gold,
                                                        ordinal_weight=f.recipe.ordinal_weight)),
        "kd": Loss("kd_weight", lambda x, f: kd_loss(x.student.logits, x.teacher_logits,
                                                     temperature=f.recipe.temperature), targets=True),
        "hidden": Loss("hidden_weight", _hidden, online=True),
        "attention": Loss("attention_weight", _attention, online=True),
    },
    "score": {
        "mse": Loss("mse_weight", lambda x, f: score_mse(x.student.logits, x.teacher_logits), targets=True),
        "margin_mse": Loss("margin_weight", lambda x, f: margin_mse(x.student.logits, x.teacher_logits, x.query_ids),
                           targets=True),
        "gold_mse": Loss("gold_weight", lambda x, f: gold_mse(x.student.logits, x.gold)),
        "hidden": Loss("hidden_weight", _hidden, online=True),
        "attention": Loss("attention_weight", _attention, online=True),
    },
}


def active_losses(recipe, task: str) -> dict[str, float]:
    """{loss name: weight} of the task's losses the recipe weighs above 0, in summing order."""
    return {name: getattr(recipe, loss.weight) for name, loss in LOSSES[task].items() if getattr(recipe, loss.weight)}


def total_loss(inputs: StepInputs, fixed: Fixed, task: str) -> torch.Tensor:
    """The weighted sum of the task's active losses (float32)."""
    loss = inputs.student.logits.new_zeros((), dtype=torch.float32)
    for name, weight in active_losses(fixed.recipe, task).items():
        loss = loss + weight * LOSSES[task][name].compute(inputs, fixed)
    return loss
