"""Mask tuning (Kwon et al. 2022): re-fit one scale per kept head and per kept FFN neuron, layer by layer,
so that each pruned sublayer reproduces the unpruned model's, then fold the scales into the weights.

A sublayer's LayerNorm input is residual + sum over units u of m_u C_u (+ bias), linear in the scales m:
C_u is head u's slice of the output projection applied to its context vectors, or neuron u's activation
times its column of the FFN's second linear. With the pruned model's own inputs (so earlier errors get
corrected) and the unpruned model's LayerNorm input as the target t, the scales solve the damped least
squares min ||sum_u m_u C_u - t||^2 + lambda * mean(diag G) * ||m - 1||^2 on real (non-padding) tokens of
unlabeled calibration pairs, accumulated as the Gram matrix G = C^T C and C^T t, so memory does not grow
with the number of pairs. Hundreds of neuron scales can overfit a few thousand tokens, so every fifth
calibration pair is held out: lambda is the value of a small grid with the lowest held-out error, and a
fit is kept only if it is finite, no scale exceeds `max_scale` in size, and it lowers the held-out error
below that of no tuning. Tuning never makes a sublayer worse than no tuning, on pairs it did not fit.

Beyond Kwon's scales, measured on the MiniLM Home Depot teacher at half its FLOPs (agreement with the
teacher on 1,500 dev pairs apart from the reported ones; `benchmarks/tune_variants.py`): a shift of the
projection's bias, fitted jointly with the scales, moves it
from 85.5% (scales alone) to 84.7% but accuracy from -3.1 to -0.7 points; fitting the last layer on the
[CLS] token only (all the classifier reads) and then `prune.refit` of the head take it to 94.3%
(the head refit without tuning: 90.9%; with scales but no shifts: 92.2%; [CLS]-only without the refit: 79.7%).

`mode="weights"` refits instead each sublayer's whole output projection and bias (inputs: the kept heads'
context vectors or neurons' activations) by ridge regression towards the current weights, on the same tokens,
targets, damping grid and held-out guard; `mode="best"` fits both and keeps, per sublayer, the one with the
lower held-out error. On the quick MiniLM teacher (6,000 training rows, max_length 40; tune_variants.py with
--score-rows 500 --calibrate 512, cls+refit) the projection refit took agreement from 95.7 / 93.6 / 90.7% (scales
and shifts) to 97.0 / 95.6 / 93.4% at 0.5 / 0.35 / 0.25 of the FLOPs and halved the Spearman and loss deltas,
in about the same time; best kept it in every sublayer with units removed, so scored the same.
`best` is the default of `headcut prune`: per sublayer it is never worse than scales on the held-out
calibration pairs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from headcut.arch import LayerParts, layer_parts
from headcut.batching import Encoded, collate
from headcut.evaluate.attention import scoring_batches


@dataclass(frozen=True)
class LayerFit:
    """One sublayer's fit on the held-out calibration pairs: the squared error of its LayerNorm input
    relative to the unpruned model's, ||pruned - unpruned||^2 / ||unpruned||^2, with no tuning and with the
    fit (`mode`) made on the other pairs (the one folded, refitted on all pairs, does about as well)."""

    layer: int
    sublayer: str  # "attention" or "ffn"
    units: int
    error_before: float
    error_after: float
    accepted: bool
    scale_range: tuple[float, float]  # weights: each unit's new over old column norm in the projection
    damping: float | None
    mode: str = "scales"  # what was fitted: "scales" (per-unit scales, bias shifts) or "weights" (the projection)

    def to_dict(self) -> dict:
        return dict(self.__dict__, scale_range=list(self.scale_range))


class _Stop(Exception):
    """Raised by a hook once the activations it needs are captured: the rest of the forward is skipped."""


def _capture(model, parts: LayerParts, sublayer: str, batch: dict, *, units: bool) -> dict:
    """Run `model` up to the LayerNorm of one sublayer; return its input and (if `units`) the projection's input."""
    norm = parts.attention_norm if sublayer == "attention" else parts.ffn_norm
    proj = parts.out if sublayer == "attention" else parts.ffn_out
    got = {}

    def take_units(module, args):
        got["units"] = args[0].detach()

    def take_norm(module, args):
        got["norm"] = args[0].detach()
        raise _Stop

    handles = [norm.register_forward_pre_hook(take_norm)]
    if units:
        handles.append(proj.register_forward_pre_hook(take_units))
    try:
        model(**batch)
    except _Stop:
        pass
    finally:
        for h in handles:
            h.remove()
    return got


TARGET_CACHE_BYTES = 2 << 30  # above this the teacher's targets are recomputed per sublayer instead of kept


def _teacher_targets(teacher, batches: list) -> list[dict] | None:
    """Every sublayer's LayerNorm input of `teacher` for every batch, from one forward per batch (rather than
    one partial forward per sublayer and batch: most of tuning's time); None when they would take more than
    TARGET_CACHE_BYTES."""
    parts = layer_parts(teacher)
    hidden = teacher.config.hidden_size
    size = sum(batch["input_ids"].numel() for batch, _ in batches) * hidden * 2 * len(parts) * 4
    if size > TARGET_CACHE_BYTES:
        return None
    cached = []
    for batch, _ in batches:
        got = {}
        handles = [getattr(p, f"{sub}_norm").register_forward_pre_hook(
            lambda module, args, key=(p.layer_id, sub): got.__setitem__(key, args[0].detach()))
            for p in parts for sub in ("attention", "ffn")]
        try:
            teacher(**batch)
        finally:
            for h in handles:
                h.remove()
        cached.append(got)
    return cached


def _head_contributions(parts: LayerParts, acts: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(tokens, heads, d): what each head adds to the LayerNorm input through its slice of the projection
    `w` (d, heads x head_size)."""
    k, size = parts.num_heads, parts.head_size
    return torch.einsum("nkc,dkc->nkd", acts.view(len(acts), k, size), w.view(w.shape[0], k, size))


DAMPING = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # relative to mean(diag G); the held-out error picks one per sublayer


@dataclass
class _Normal:
    """The normal equations of one sublayer's fit on a set of tokens, over x = (scales m, bias shift b):
    ||C m + b - t||^2 = x'Gx - 2 r'x + tt. With `units` scales and `width` bias entries (0: no bias shift)."""

    units: int
    width: int
    gram: torch.Tensor = None
    rhs: torch.Tensor = None
    tt: float = 0.0
    reference: float = 0.0  # squared norm of the unpruned model's LayerNorm input: errors are relative to it

    def __post_init__(self):
        size = self.units + self.width
        if self.gram is None:
            self.gram = torch.zeros(size, size, dtype=torch.float64)
            self.rhs = torch.zeros(size, dtype=torch.float64)

    def __add__(self, other: "_Normal") -> "_Normal":
        return _Normal(self.units, self.width, self.gram + other.gram, self.rhs + other.rhs, self.tt + other.tt,
                       self.reference + other.reference)

    def no_change(self) -> torch.Tensor:
        return torch.cat([torch.ones(self.units, dtype=torch.float64), torch.zeros(self.width, dtype=torch.float64)])

    def error(self, x: torch.Tensor) -> float:
        return float(x @ self.gram @ x - 2 * self.rhs @ x + self.tt) / max(self.reference, 1e-30)

    def solve(self, damping: float) -> torch.Tensor:
        k = self.units
        ridge = torch.zeros(len(self.rhs), dtype=torch.float64)
        ridge[:k] = damping * float(torch.diagonal(self.gram)[:k].mean().clamp_min(1e-30))
        # the bias shift is one mean per hidden unit over thousands of tokens: well determined, barely damped
        ridge[k:] = 1e-6 * float(torch.diagonal(self.gram)[k:].mean().clamp_min(1e-30)) if self.width else 0
        # damped towards no change (scale 1, shift 0), not towards 0: an unidentifiable scale stays as it was
        return torch.linalg.solve(self.gram + torch.diag(ridge), self.rhs + ridge * self.no_change())


@dataclass
class Ridge:
    """The sums x'x, x'y and y'y of a linear fit y ~ x w over some rows (x with a column of ones when a bias is
    fitted), from which a ridge solve and its squared error need no rows; errors are relative to `reference`
    (by default y'y). Shared by the projection refit here and the head refit (`prune.refit`)."""

    gram: torch.Tensor
    cross: torch.Tensor
    yy: float = 0.0
    reference: float = 0.0

    @classmethod
    def zeros(cls, inputs: int, outputs: int) -> "Ridge":
        return cls(torch.zeros(inputs, inputs, dtype=torch.float64), torch.zeros(inputs, outputs, dtype=torch.float64))

    def add(self, x: torch.Tensor, y: torch.Tensor, *, reference: float | None = None) -> None:
        """Add rows x (n, inputs) with targets y (n, outputs); `reference`: their part of the error's denominator."""
        self.gram += (x.t() @ x).to(self.gram.device)
        self.cross += (x.t() @ y).to(self.cross.device)
        yy = float((y ** 2).sum())
        self.yy += yy
        self.reference += yy if reference is None else reference

    def __add__(self, other: "Ridge") -> "Ridge":
        return Ridge(self.gram + other.gram, self.cross + other.cross, self.yy + other.yy,
                     self.reference + other.reference)

    def error(self, w: torch.Tensor) -> float:
        """||x w - y||^2 / reference."""
        return float((w * (self.gram @ w)).sum() - 2 * (w * self.cross).sum() + self.yy) / max(self.reference, 1e-30)

    def solve(self, current: torch.Tensor, damping: float) -> torch.Tensor:
        """Ridge towards the current weights: an output the data does not pin down stays as it was."""
        ridge = damping * float(torch.diagonal(self.gram).mean().clamp_min(1e-30))
        eye = torch.eye(len(self.gram), dtype=torch.float64)
        return torch.linalg.solve(self.gram + ridge * eye, self.cross + ridge * current)


MODES = ("scales", "weights", "best")  # what a sublayer's fit changes; best: whichever does better on held-out pairs
DEFAULT_MODE = "best"  # `headcut prune --tune-fit`: measured on a dev selection slice (benchmarks/tune_variants.py)


@torch.no_grad()
def tune_scales(teacher, student, encoded: Encoded, *, batch_size: int = 64, max_scale: float = 10.0,
                bias: bool = True, last_layer_cls: bool = True, mode: str = "scales",
                progress: Callable[[str], None] | None = None) -> list[LayerFit]:
    """Fit and fold per-unit scales into `student` (a pruned copy of `teacher`), in place, sublayer by
    sublayer from the bottom; with `bias`, also one shift per output of each sublayer's projection, fitted
    jointly. With `mode="weights"` the whole projection (and with `bias` its bias) is refitted instead, by
    ridge regression towards its current weights; with "best" both are fitted on the same tokens and the one
    with the lower held-out error is kept. With `last_layer_cls` the last layer is fitted on the first token
    only, the one the classifier reads. `max_scale` bounds the scales (a weights fit is kept if finite).
    Returns one `LayerFit` per sublayer that still has units; its errors are measured on the held-out
    calibration pairs."""
    if mode not in MODES:
        raise ValueError(f"mask tuning mode {mode!r} is not one of {', '.join(MODES)}")
    if len(encoded) < 5:
        raise ValueError("mask tuning needs at least 5 calibration pairs (every fifth is held out)")
    teacher.eval()
    student.eval()
    device = next(student.parameters()).device
    batches = []
    for rows in scoring_batches(teacher, encoded, batch_size, layers_held=False):  # the teacher has every head
        batch = {k: v.to(device) for k, v in collate(encoded, rows).items()}
        held = torch.as_tensor(rows % 5 == 4, device=device)  # by pair index: the same pairs for every sublayer
        batches.append((batch, held))
    targets = _teacher_targets(teacher, batches)
    teacher_parts = {p.layer_id: p for p in layer_parts(teacher)}
    fits = []
    for s_parts in layer_parts(student):  # a student without some layers fits each kept one to its own original
        t_parts = teacher_parts[s_parts.layer_id]
        for sublayer in ("attention", "ffn"):
            if (s_parts.num_heads if sublayer == "attention" else s_parts.num_neurons) == 0:
                continue
            if progress:
                progress(f"layer {s_parts.index} {sublayer}")
            last = last_layer_cls and s_parts.index == len(layer_parts(student)) - 1
            fits.append(_fit_sublayer(teacher, student, (t_parts, s_parts), sublayer, batches, targets, mode=mode,
                                      bias=bias, last=last, max_scale=max_scale))
    return fits


def _fit_sublayer(teacher, student, parts: tuple[LayerParts, LayerParts], sublayer: str, batches: list, targets, *,
                  mode: str, bias: bool, last: bool, max_scale: float) -> LayerFit:
    """Accumulate one sublayer's sums on the fitting and the held-out tokens, then fit, choose and fold."""
    t_parts, s_parts = parts
    proj = s_parts.out if sublayer == "attention" else s_parts.ffn_out
    count = s_parts.num_heads if sublayer == "attention" else s_parts.num_neurons
    width = proj.weight.shape[0] if bias and proj.bias is not None else 0
    scales = (_Normal(count, width), _Normal(count, width)) if mode != "weights" else None
    weights = tuple(Ridge.zeros(proj.in_features + (width > 0), proj.out_features) for _ in range(2)) \
        if mode != "scales" else None
    w = proj.weight.detach().double()
    wtw = w.t() @ w if sublayer == "ffn" else None  # (neurons, neurons), the same for every batch
    shift = proj.bias.detach().double() if width else None
    for b, (batch, held) in enumerate(batches):
        real = batch["attention_mask"].bool()
        if last:  # only the first token reaches the classifier
            real[:, 1:] = False
        target = (targets[b][s_parts.layer_id, sublayer] if targets is not None
                  else _capture(teacher, t_parts, sublayer, batch, units=False)["norm"])
        got = _capture(student, s_parts, sublayer, batch, units=True)
        for i, pick in enumerate((real & ~held[:, None], real & held[:, None])):
            acts, now, goal = got["units"][pick].double(), got["norm"][pick].double(), target[pick].double()
            if scales:
                _accumulate(scales[i], s_parts, sublayer, w, wtw, acts, now, goal)
            if weights:
                _accumulate_weights(weights[i], w, shift, acts, now, goal)
    choices = ([_choose_scales(s_parts, sublayer, *scales, max_scale)] if scales else []) + \
        ([_choose_weights(s_parts, sublayer, *weights)] if weights else [])
    return _keep_best(choices)


def _accumulate(normal: _Normal, parts: LayerParts, sublayer: str, w, wtw, acts, now, target) -> None:
    """Add these tokens' G, C't and t't; t = target minus what the sublayer's input holds besides the units.
    `w` is the projection's weight (d, units x group); for neurons `wtw` = w'w."""
    k = normal.units
    if sublayer == "attention":
        contrib = _head_contributions(parts, acts, w)  # (tokens, heads, d)
        t = target - (now - contrib.sum(1))
        normal.gram[:k, :k] += torch.einsum("nkd,njd->kj", contrib, contrib)
        normal.rhs[:k] += torch.einsum("nkd,nd->k", contrib, t)
        summed = contrib.sum(0)  # (heads, d): sum over tokens of C_n, the scales' cross term with the shift
    else:  # neuron u adds acts[:, u] * w[:, u]
        t = target - (now - acts @ w.t())
        normal.gram[:k, :k] += (acts.t() @ acts) * wtw
        normal.rhs[:k] += (acts * (t @ w)).sum(0)
        summed = acts.sum(0)[:, None] * w.t()
    if normal.width:
        normal.gram[:k, k:] += summed
        normal.gram[k:, :k] += summed.t()
        normal.gram[k:, k:] += len(t) * torch.eye(normal.width, dtype=torch.float64)
        normal.rhs[k:] += t.sum(0)
    normal.tt += float((t * t).sum())
    normal.reference += float((target * target).sum())


def choose_damping(solve: Callable[[float], torch.Tensor], error: Callable[[torch.Tensor], float], before: float,
                   valid: Callable[[torch.Tensor], bool]) -> tuple[float, float] | None:
    """(held-out error, damping) of the DAMPING value whose `solve` (on the fitting pairs) has the lowest
    held-out `error` among the `valid` fits; None unless it is below `before`, the held-out error of no
    change. This guard is what makes a fit never worse than no fit, on pairs it did not see."""
    candidates = []
    for damping in DAMPING:
        x = solve(damping)
        if valid(x):
            candidates.append((error(x), damping))
    if candidates and min(candidates)[0] < before:
        return min(candidates)
    return None


def _choose_scales(parts: LayerParts, sublayer: str, fit: _Normal, check: _Normal, max_scale: float):
    """The scales' `LayerFit` and a function that folds them in, or None when the fit is refused."""
    k = fit.units

    def valid(x):
        return bool(torch.isfinite(x).all()) and float(x[:k].abs().max()) <= max_scale

    before = check.error(fit.no_change())
    chosen = choose_damping(fit.solve, check.error, before, valid)
    if chosen is not None:
        error, damping = chosen
        x = (fit + check).solve(damping)  # refit on every calibration pair with the chosen damping
        if valid(x):
            return (LayerFit(parts.index, sublayer, k, before, error, True,
                             (float(x[:k].min()), float(x[:k].max())), damping),
                    lambda: _fold(parts, sublayer, x[:k], x[k:]))
    return LayerFit(parts.index, sublayer, k, before, before, False, (1.0, 1.0), None), None


def _accumulate_weights(ridge: Ridge, w, bias, acts, now, target) -> None:
    """Add these tokens to the projection's ridge sums: inputs `acts` (with ones when its `bias` is fitted),
    outputs what it should add to the rest of the LayerNorm input, now - (its current output), to hit `target`.
    `w` is the projection's weight (d, inputs)."""
    y = target - now + acts @ w.t()
    if bias is not None:
        y = y + bias
        acts = torch.cat([acts, torch.ones(len(acts), 1, dtype=acts.dtype, device=acts.device)], 1)
    ridge.add(acts, y, reference=float((target * target).sum()))


def _choose_weights(parts: LayerParts, sublayer: str, fit: Ridge, check: Ridge):
    """The projection refit's `LayerFit` and a function that writes it in, or None when it is refused."""
    proj = parts.out if sublayer == "attention" else parts.ffn_out
    with_bias = len(fit.gram) > proj.in_features
    current = proj.weight.detach().double().t().cpu()  # (inputs, outputs), the layout of the solution
    if with_bias:
        current = torch.cat([current, proj.bias.detach().double().cpu()[None]])

    def valid(x):
        return bool(torch.isfinite(x).all())

    units = parts.num_heads if sublayer == "attention" else parts.num_neurons
    before = check.error(current)
    chosen = choose_damping(lambda damping: fit.solve(current, damping), check.error, before, valid)
    if chosen is not None:
        error, damping = chosen
        x = (fit + check).solve(current, damping)  # refit on every calibration pair with the chosen damping
        if valid(x):
            return (LayerFit(parts.index, sublayer, units, before, error, True,
                             _norm_ratio(units, current[:proj.in_features], x[:proj.in_features]), damping, "weights"),
                    lambda: _write(proj, x))
    return LayerFit(parts.index, sublayer, units, before, before, False, (1.0, 1.0), None, "weights"), None


def _norm_ratio(units: int, old: torch.Tensor, new: torch.Tensor) -> tuple[float, float]:
    """Range over units of the new over the old norm of a unit's input columns: a weights fit's scales."""
    ratio = new.reshape(units, -1).norm(dim=1) / old.reshape(units, -1).norm(dim=1).clamp_min(1e-30)
    return float(ratio.min()), float(ratio.max())


def _write(proj, x: torch.Tensor) -> None:
    proj.weight.copy_(x[:proj.in_features].t().to(proj.weight))
    if len(x) > proj.in_features:
        proj.bias.copy_(x[proj.in_features].to(proj.bias))


def _keep_best(choices: list) -> LayerFit:
    """Fold the kept fit with the lowest held-out error (on a tie the first, scales); if none is kept, the
    sublayer stays as it was and the first choice's record says so."""
    kept = [c for c in choices if c[1] is not None]
    fit, fold = min(kept, key=lambda c: c[0].error_after) if kept else choices[0]
    if fold is not None:
        fold()
    return fit


def _fold(parts: LayerParts, sublayer: str, scales: torch.Tensor, shift: torch.Tensor) -> None:
    """Multiply each unit's input columns of the projection by its scale (what a fractional mask computes)
    and add the shift to its bias."""
    proj = parts.out if sublayer == "attention" else parts.ffn_out
    group = parts.head_size if sublayer == "attention" else 1
    column_scale = scales.repeat_interleave(group).to(proj.weight.dtype).to(proj.weight.device)
    proj.weight.mul_(column_scale[None, :])
    if len(shift):
        proj.bias.add_(shift.to(proj.bias.dtype).to(proj.bias.device))
