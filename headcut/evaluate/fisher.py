"""Fisher importance of every attention head and every FFN neuron, from per-example mask gradients.

Kwon et al. (2022): with a mask variable m = 1 per unit, pruning a set of units costs about
0.5 * sum over the set of F_uu, the diagonal Fisher information of the masks. Scores are float64,
higher = more important, indexed by original ids: heads `(num_layers, num_heads)`, neurons
`(num_layers, intermediate_size)`; units a pruned model no longer has are -inf.

Targets: `grades` uses the pairs' gold grades (the empirical Fisher); `teacher` needs no labels and
takes the expectation over the model's own grade distribution (the true Fisher),
F = sum_b sum_y p(y|x_b) (d log p(y|x_b) / dm)^2, computed exactly from the C class-logit gradients.
The true Fisher measures how much a unit moves the model's own judgement, which is what a pruned grader
must keep; it also never rewards a unit for fitting noisy labels.
A one-score model's output is a unit-variance Gaussian around its score: its true Fisher is sum_b J_b^2
(J = d score / d mask), its empirical Fisher uses the squared error against gold scores (`importance.pair_loss`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from headcut.arch import intermediate_size, layer_parts, mask_shape, present_heads
from headcut.batching import Encoded, collate, length_batches
from headcut.evaluate.importance import pair_loss
from headcut.masking import head_mask, neuron_mask

TARGETS = ("teacher", "grades")


@dataclass(frozen=True)
class UnitScores:
    """Importance of heads `(layers, heads)` and neurons `(layers, neurons)`, original ids, -inf = absent."""

    heads: torch.Tensor
    neurons: torch.Tensor
    targets: str
    pairs: int

    def to_dict(self) -> dict:
        def rows(t):
            return [[float(v) if np.isfinite(v) else None for v in row] for row in t.tolist()]

        return {"method": "fisher", "targets": self.targets, "pairs": self.pairs,
                "heads": rows(self.heads), "neurons": rows(self.neurons)}


def check_unit_scores(scores: UnitScores, what: str = "Fisher scores") -> None:
    """Refuse a NaN (or +inf) score of a unit the model has; absent units are -inf (see `UnitScores`)."""
    from headcut.evaluate.importance import check_scores

    check_scores(scores.heads, torch.isneginf(scores.heads), what)
    check_scores(scores.neurons, torch.isneginf(scores.neurons), what, unit="neuron")


def present_neurons(model) -> torch.Tensor:
    """(num_layers, intermediate_size) bool, original ids: True where the model still has the neuron."""
    present = torch.zeros(mask_shape(model)[0], intermediate_size(model.config), dtype=torch.bool)
    for p in layer_parts(model):
        present[p.index, p.neuron_ids] = True
    return present


def unit_fisher(model, encoded: Encoded, *, labels: np.ndarray | None = None, batch_size: int = 32,
                progress: Callable[[int], None] | None = None) -> UnitScores:
    """Fisher scores of every head and neuron on `encoded` pairs: with `labels` (0-based grades) the
    empirical Fisher, without them the model's own expected Fisher (see the module docstring)."""
    model.eval()
    device = next(model.parameters()).device
    layers, width = mask_shape(model)
    inter = intermediate_size(model.config)
    heads = torch.zeros(layers, width, dtype=torch.float64)
    neurons = torch.zeros(layers, inter, dtype=torch.float64)
    for rows in length_batches(encoded, batch_size):
        batch = {k: v.to(device) for k, v in collate(encoded, rows).items()}
        n = len(rows)
        hm = torch.ones(layers, n, width, device=device, requires_grad=True)
        nm = torch.ones(layers, n, inter, device=device, requires_grad=True)
        with torch.enable_grad(), head_mask(model, hm), neuron_mask(model, nm):
            logits = model(**batch).logits.float()
            if labels is not None or logits.shape[1] == 1:
                target = None if labels is None else torch.as_tensor(labels[rows], device=device)
                gh, gn = torch.autograd.grad(pair_loss(logits, target), (hm, nm))
                heads += (gh.double() ** 2).sum(1).cpu()
                neurons += (gn.double() ** 2).sum(1).cpu()
            else:
                _expected_fisher(logits, hm, nm, heads, neurons)
        if progress:
            progress(n)
    absent = ~present_heads(model)
    return UnitScores(heads.masked_fill(absent, float("-inf")),
                      neurons.masked_fill(~present_neurons(model), float("-inf")),
                      "grades" if labels is not None else "teacher", len(encoded))



def _expected_fisher(logits, hm, nm, heads, neurons) -> None:
    """Add sum_b sum_y p_by (J_y - sum_c p_bc J_c)^2 to the totals, J_c = d logit_c / d mask (per example)."""
    p = torch.softmax(logits.detach().double(), dim=-1)  # (batch, classes)
    classes = logits.shape[1]
    jh, jn = [], []
    for c in range(classes):
        gh, gn = torch.autograd.grad(logits[:, c].sum(), (hm, nm), retain_graph=c < classes - 1)
        jh.append(gh.double())
        jn.append(gn.double())
    for jac, total in ((torch.stack(jh), heads), (torch.stack(jn), neurons)):  # (classes, layers, batch, units)
        weights = p.t()[:, None, :, None]  # (classes, 1, batch, 1)
        mean = (weights * jac).sum(0, keepdim=True)
        total += (weights * (jac - mean) ** 2).sum((0, 2)).cpu()
