"""Closed-form refit of the classification head after mask tuning: each linear that reads the first token
(BERT's pooler and classifier, RoBERTa's and ELECTRA's classifier dense and out_proj, DistilBERT's
pre_classifier and classifier) is re-fitted, bottom up, by ridge regression so that its output on the
pruned model's inputs matches the unpruned model's (pre-activations, then logits).

A pruned encoder's last hidden state is slightly off; the head reads one vector per pair, so a linear
map of a few hundred inputs is cheap to re-fit and corrects what the per-layer fits left. As in
`prune.tune`, every fifth calibration pair is held out: the damping (towards the current weights) is the
grid value with the lowest held-out error, and the refit is kept only if it lowers the held-out error
below that of the current weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from headcut.arch import encoder_layers
from headcut.batching import Encoded, collate
from headcut.evaluate.attention import scoring_batches
from headcut.prune.tune import Ridge, choose_damping


@dataclass(frozen=True)
class HeadFit:
    """One head linear's fit: squared output error relative to the unpruned model's output, on the held-out
    calibration pairs, before and after."""

    name: str
    error_before: float
    error_after: float
    accepted: bool
    damping: float | None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def head_linears(model) -> list[tuple[str, nn.Linear]]:
    """The linears (with a bias) outside the embeddings and encoder layers, in forward order: the
    classification head."""
    inside = {id(m) for m in encoder_layers(model).modules()}
    embeddings = getattr(model.base_model, "embeddings", None)
    if embeddings is not None:
        inside |= {id(m) for m in embeddings.modules()}
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, nn.Linear) and m.bias is not None and id(m) not in inside]


def _forward(model, linears: list[nn.Linear], batch: dict, *, output: bool) -> list[torch.Tensor]:
    """Each linear's input (with a column of ones for the bias) or output, one row per pair it reads,
    from one forward of `model`."""
    got = [None] * len(linears)

    def take(i):
        def hook(module, args, out=None):
            x = (out if output else args[0]).detach()
            got[i] = x.reshape(-1, x.shape[-1]).double().cpu()
        return hook

    handles = [m.register_forward_hook(take(i)) if output else m.register_forward_pre_hook(take(i))
               for i, m in enumerate(linears)]
    try:
        model(**batch)
    finally:
        for h in handles:
            h.remove()
    return got if output else [torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1) for x in got]


@torch.no_grad()
def refit_head(teacher, student, encoded: Encoded, *, batch_size: int = 64) -> list[HeadFit]:
    """Re-fit each head linear of `student` (a pruned, tuned copy of `teacher`) in place, bottom up, on the
    calibration pairs `encoded`; one `HeadFit` each."""
    teacher.eval()
    student.eval()
    device = next(student.parameters()).device
    batches = [({k: v.to(device) for k, v in collate(encoded, rows).items()}, torch.as_tensor(rows % 5 == 4))
               for rows in scoring_batches(teacher, encoded, batch_size, layers_held=False)]  # the teacher: every head
    teacher_linears = [m for _, m in head_linears(teacher)]
    targets = [_forward(teacher, teacher_linears, batch, output=True) for batch, _ in batches]
    fits = []
    for i, (name, s_linear) in enumerate(head_linears(student)):
        size, width = s_linear.in_features + 1, s_linear.out_features
        fit, check = Ridge.zeros(size, width), Ridge.zeros(size, width)
        for (batch, held), outputs in zip(batches, targets):
            x = _forward(student, [s_linear], batch, output=False)[0]  # after the refit of the linears below
            y = outputs[i]
            if len(x) != len(held):
                raise ValueError(f"{name} reads {len(x)} rows for {len(held)} pairs; the head refit needs one per pair")
            for sums, pick in ((fit, ~held), (check, held)):  # the head reads one row per pair
                sums.add(x[pick], y[pick])
        current = torch.cat([s_linear.weight.detach().double().t(), s_linear.bias.detach().double()[None]]).cpu()
        fits.append(_choose(name, s_linear, fit, check, current))
    return fits


def _choose(name: str, linear: nn.Linear, fit: Ridge, check: Ridge, current) -> HeadFit:
    def valid(w):
        return bool(torch.isfinite(w).all())

    before = check.error(current)
    chosen = choose_damping(lambda damping: fit.solve(current, damping), check.error, before, valid)
    if chosen is not None:
        error, damping = chosen
        w = (fit + check).solve(current, damping)  # refit on every calibration pair
        if valid(w):
            linear.weight.copy_(w[:-1].t().to(linear.weight))
            linear.bias.copy_(w[-1].to(linear.bias))
            return HeadFit(name, before, error, True, damping)
    return HeadFit(name, before, before, False, None)
