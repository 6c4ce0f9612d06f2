"""The mask-gradient pass: each pair's gradient w.r.t. a mask on every head (and FFN neuron), and the Fisher
information of those masks; the `fisher` and `gradient` criteria (`evaluate.criteria`) read it.

Kwon et al. (2022): with a mask variable m = 1 per unit, pruning a set of units costs about
0.5 * sum over the set of F_uu, the diagonal Fisher information of the masks. Scores are float64,
higher = more important, indexed by original ids: heads `(num_layers, num_heads)`, neurons
`(num_layers, intermediate_size)`; units a pruned model no longer has are -inf.

Targets: `grades` uses the pairs' gold (the empirical Fisher); `teacher` needs no labels and
takes the expectation over the model's own grade distribution (the true Fisher),
F = sum_b sum_y p(y|x_b) (d log p(y|x_b) / dm)^2, computed exactly from the C class-logit gradients.
The true Fisher measures how much a unit moves the model's own judgement, which is what a pruned grader
must keep; it also never rewards a unit for fitting noisy labels.
A one-score model's output is a unit-variance Gaussian around its score: its true Fisher is sum_b J_b^2
(J = d score / d mask), its empirical Fisher uses the squared error against gold scores (`importance.pair_loss`).
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from headcut.arch import intermediate_size, layer_parts, mask_shape, present_heads
from headcut.batching import Encoded, collate
from headcut.evaluate.attention import scoring_batches
from headcut.evaluate.importance import check_scores, pair_loss
from headcut.masking import head_mask, neuron_mask

TARGETS = ("teacher", "grades")


@dataclass(frozen=True)
class UnitScores:
    """Importance of heads `(layers, heads)` and neurons `(layers, neurons)` (None: the criterion scores heads
    only), original ids, -inf = absent; `method`: the criterion; `targets`: Fisher's, None for other criteria."""

    heads: torch.Tensor
    neurons: torch.Tensor | None
    targets: str | None
    pairs: int
    method: str = "fisher"

    def to_dict(self) -> dict:
        def rows(t):
            return None if t is None else [[float(v) if np.isfinite(v) else None for v in row] for row in t.tolist()]

        return {"method": self.method, "targets": self.targets, "pairs": self.pairs,
                "heads": rows(self.heads), "neurons": rows(self.neurons)}


def check_unit_scores(scores: UnitScores, what: str = "Fisher scores") -> None:
    """Refuse a NaN (or +inf) score of a unit the model has; absent units are -inf (see `UnitScores`)."""
    check_scores(scores.heads, torch.isneginf(scores.heads), what)
    if scores.neurons is not None:
        check_scores(scores.neurons, torch.isneginf(scores.neurons), what, unit="neuron")


def present_neurons(model) -> torch.Tensor:
    """(num_layers, intermediate_size) bool, original ids: True where the model still has the neuron."""
    present = torch.zeros(mask_shape(model)[0], intermediate_size(model.config), dtype=torch.bool)
    for p in layer_parts(model):
        present[p.index, p.neuron_ids] = True
    return present


@dataclass(frozen=True)
class MaskGradients:
    """One pass over the pairs. `per_pair`: `(pairs, layers, heads)` float64, each pair's loss gradient w.r.t.
    the head mask at 1 (the loss of `importance.pair_loss` on the given labels); `fisher_heads` /
    `fisher_neurons` (None unless asked): the Fisher information of the masks for `targets`."""

    per_pair: np.ndarray
    fisher_heads: torch.Tensor
    fisher_neurons: torch.Tensor | None
    targets: str


def mask_gradient_pass(model, encoded: Encoded, labels: np.ndarray | None, *, targets: str, neurons: bool,
                       batch_size: int, progress: Callable[[int], None] | None = None) -> MaskGradients:
    """Per-pair head-mask gradients of the loss on `labels` (0-based grades or scores; None for a grades model:
    its own predicted grades, for a one-score model: the score itself), and the Fisher of `targets`:
    `grades`, the empirical Fisher, sum of the squared loss gradients; `teacher`, a grades model's expected
    Fisher under its own distribution (a one-score model's is the empirical one of the score itself).

    One backward per batch (one per grade for the expected Fisher): with a per-example mask the gradient of
    the summed loss w.r.t. mask[:, b] is pair b's own. Parameters get no gradients (autograd on the masks)."""
    model.eval()
    device = next(model.parameters()).device
    layers, width = mask_shape(model)
    inter = intermediate_size(model.config)
    per_pair = np.zeros((len(encoded), layers, width), dtype=np.float64)
    heads = torch.zeros(layers, width, dtype=torch.float64)
    units = torch.zeros(layers, inter, dtype=torch.float64) if neurons else None
    expected = targets == "teacher" and model.config.num_labels > 1
    for rows in scoring_batches(model, encoded, batch_size, layers_held=True):  # the backward keeps every layer's
        batch = {k: v.to(device) for k, v in collate(encoded, rows).items()}
        hm = torch.ones(layers, len(rows), width, device=device, requires_grad=True)
        nm = torch.ones(layers, len(rows), inter, device=device, requires_grad=True) if neurons else None
        masks = (hm,) if nm is None else (hm, nm)
        with torch.enable_grad(), head_mask(model, hm), _neuron_mask(model, nm):
            logits = model(**batch).logits.float()
            target = None if labels is None else torch.as_tensor(labels[rows], device=device)
            if target is None and logits.shape[1] > 1 and not expected:
                target = logits.detach().argmax(1)  # a grades model's own predicted grades
            if expected:
                grads = _expected_fisher(logits, masks, target, heads, units)
            else:
                grads = torch.autograd.grad(pair_loss(logits, target), masks)
                if units is not None:
                    units += (grads[1].double() ** 2).sum(1).cpu()
        per_pair[rows] = grads[0].permute(1, 0, 2).double().cpu().numpy()
        if progress:
            progress(len(rows))
    if not expected:
        heads = torch.from_numpy((per_pair ** 2).sum(0))
    return MaskGradients(per_pair, heads, units, targets)


def _neuron_mask(model, mask):
    return nullcontext() if mask is None else neuron_mask(model, mask)


def _expected_fisher(logits, masks, target, heads, neurons) -> tuple[torch.Tensor, ...]:
    """Add sum_b sum_y p_by (J_y - sum_c p_bc J_c)^2 to the totals, J_c = d logit_c / d mask (per example);
    return the head mask's loss gradients of the labels `target` (None: the predicted grades),
    -(J_y - sum_c p_c J_c), as a 1-tuple (the per-pair gradients are of heads only)."""
    p = torch.softmax(logits.detach().double(), dim=-1)  # (batch, classes)
    classes = logits.shape[1]
    per_class = [[] for _ in masks]
    for c in range(classes):
        for out, grad in zip(per_class, torch.autograd.grad(logits[:, c].sum(), masks, retain_graph=c < classes - 1)):
            out.append(grad.double())
    weights = p.t()[:, None, :, None]  # (classes, 1, batch, 1)
    labels = p.argmax(1) if target is None else target
    loss_grads = None
    for jac, total in zip((torch.stack(j) for j in per_class), (heads, neurons)):  # (classes, layers, batch, units)
        mean = (weights * jac).sum(0, keepdim=True)
        total += (weights * (jac - mean) ** 2).sum((0, 2)).cpu()
        if loss_grads is None:  # the heads
            picked = jac[labels, :, torch.arange(len(labels))].permute(1, 0, 2)  # (layers, batch, units)
            loss_grads = mean[0] - picked
    return (loss_grads,)


def mask_gradients(model, encoded: Encoded, labels: np.ndarray | None, *, batch_size: int = 64,
                   progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Per-pair gradients of the pair's loss on `labels` w.r.t. the head mask at 1: `(pairs, layers, heads)`."""
    return mask_gradient_pass(model, encoded, labels, targets="grades", neurons=False, batch_size=batch_size,
                              progress=progress).per_pair


def unit_fisher(model, encoded: Encoded, *, labels: np.ndarray | None = None, batch_size: int = 32,
                progress: Callable[[int], None] | None = None) -> UnitScores:
    """Fisher scores of every head and neuron on `encoded` pairs: with `labels` (gold) the empirical Fisher,
    without them the model's own expected Fisher (see the module docstring)."""
    targets = "grades" if labels is not None else "teacher"
    grads = mask_gradient_pass(model, encoded, labels, targets=targets, neurons=True, batch_size=batch_size,
                               progress=progress)
    return fisher_scores(model, grads, pairs=len(encoded))


def fisher_scores(model, grads: MaskGradients, *, pairs: int) -> UnitScores:
    """The pass's Fisher as `UnitScores`, -inf where the model no longer has the unit."""
    neurons = grads.fisher_neurons
    if neurons is not None:
        neurons = neurons.masked_fill(~present_neurons(model), float("-inf"))
    return UnitScores(grads.fisher_heads.masked_fill(~present_heads(model), float("-inf")), neurons,
                      grads.targets, pairs)
