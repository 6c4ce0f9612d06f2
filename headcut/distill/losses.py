"""Distillation losses as short pure functions. Shapes: B = batch, T = tokens, C = classes (grades, or 1 for a
one-score model), H = heads, D = hidden width. Cross-entropy on gold grades is `headcut.finetune.grade_loss`;
which losses a run sums, by the teacher's task, is `headcut.distill.objective.LOSSES`."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def kd_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, temperature: float) -> torch.Tensor:
    """KL(teacher || student) of temperature-softened grade distributions, both (B, C), times T^2.

    The T^2 factor keeps gradient size roughly independent of the temperature (Hinton et al., 2015),
    so kd_weight means the same thing at any temperature.
    """
    log_student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    return F.kl_div(log_student, log_teacher, log_target=True, reduction="batchmean") * temperature**2


def hidden_mse(student_hidden, teacher_hidden, attention_mask: torch.Tensor, *, layer_map,
               projections=None) -> torch.Tensor:
    """Mean squared error between mapped layer outputs, over real (unpadded) tokens.

    student_hidden / teacher_hidden: `output_hidden_states` tuples, entry 0 the embeddings, entry l+1 the
    output of layer l, each (B, T, D). layer_map[i] is the teacher layer matched to student layer i.
    projections[i] (a Linear D_student -> D_teacher) is applied when the widths differ.
    """
    mask = attention_mask.unsqueeze(-1).float()  # (B, T, 1)
    total = student_hidden[0].new_zeros((), dtype=torch.float32)
    for i, t in enumerate(layer_map):
        s = student_hidden[i + 1].float()
        if projections is not None:
            s = projections[i](s)
        diff = (s - teacher_hidden[t + 1].float()) ** 2 * mask
        total = total + diff.sum() / (mask.sum() * s.shape[-1])
    return total / len(layer_map)


def attention_kl(student_attentions, teacher_attentions, attention_mask: torch.Tensor, *, layer_map) -> torch.Tensor:
    """KL(teacher || student) of head-averaged attention maps, per real query token, over mapped layers.

    Each attention entry is (B, H, T, T) from eager attention (None for a layer without heads, skipped).
    Averaging over heads first lets students with fewer heads (pruned, smaller config) match a teacher.
    """
    mask = attention_mask.float()  # (B, T)
    losses = []
    for i, t in enumerate(layer_map):
        s, te = student_attentions[i], teacher_attentions[t]
        if s is None or te is None:
            continue
        s, te = s.float().mean(1), te.float().mean(1)  # (B, T, T)
        kl = (te * (te.clamp_min(1e-9).log() - s.clamp_min(1e-9).log())).sum(-1)  # (B, T)
        losses.append((kl * mask).sum() / mask.sum())
    if not losses:
        return attention_mask.new_zeros((), dtype=torch.float32)
    return torch.stack(losses).mean()


def even_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """Teacher layer for each student layer, spread evenly and ending on the top layer: 3 of 6 -> [1, 3, 5]."""
    return [(i + 1) * teacher_layers // student_layers - 1 for i in range(student_layers)]


def per_layer(attentions, heads_per_layer: list[int]) -> list:
    """`output_attentions` leaves out layers without heads; put None in their place so index = layer."""
    found = iter(attentions)
    return [next(found) if heads else None for heads in heads_per_layer]


def score_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Mean squared error of a one-score student's output against its teacher's, both (B, 1)."""
    return F.mse_loss(student_logits.float()[:, 0], teacher_logits.float()[:, 0])


def gold_mse(student_logits: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Mean squared error of a one-score student's output (B, 1) against the gold scores (B,) of the pairs that
    have one; NaN marks a pair without (an unlabeled pair), which adds nothing. 0 when no pair of the batch has one."""
    s, known = student_logits.float()[:, 0], ~torch.isnan(gold)
    if not bool(known.any()):
        return s.new_zeros(()) * s.sum()  # keeps the graph: a zero gradient, not a missing one
    return F.mse_loss(s[known], gold[known].float())


def margin_mse(student_logits: torch.Tensor, teacher_logits: torch.Tensor, query_ids: torch.Tensor) -> torch.Tensor:
    """Margin-MSE (Hofstätter et al., 2020): over every pair (i, j) of titles of one query in the batch, the
    squared error of the student's margin s_i - s_j against the teacher's t_i - t_j. Logits (B, 1), query_ids (B,).

    Only differences within a query are matched, so a student that scores every title of a query a constant
    above its teacher loses nothing: what a reranker's user sees is the order, not the level. 0 when no two
    rows of the batch share a query (train batches them by query when this loss is on).
    """
    s, t = student_logits.float()[:, 0], teacher_logits.float()[:, 0]
    i, j = torch.triu_indices(len(s), len(s), offset=1, device=s.device)
    same = query_ids[i] == query_ids[j]
    if not bool(same.any()):
        return s.new_zeros(()) * s.sum()  # keeps the graph: a zero gradient, not a missing one
    i, j = i[same], j[same]
    return (((s[i] - s[j]) - (t[i] - t[j])) ** 2).mean()
