"""Which heads to keep: a global ranking of head scores, tilted towards lower layers by a layer prior.

Scores are `(num_layers, num_heads)` tensors, higher = more important. The prior works on ranks, not on
raw scores, so it means the same for every scoring method (ablation deltas can be negative, Fisher
scores span orders of magnitude):

    effective[l, h] = rank_percentile(scores)[l, h] * (1 + layer_prior * (L - 1 - l) / (L - 1))

The `round(keep_ratio * L * H)` heads with the largest effective score are kept. `layer_prior=0` is the
pure global ranking; `layer_prior=1` lets a bottom-layer head count double against a top-layer head of
the same rank. Within a layer the order is always that of the raw scores.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from headcut.prune_arguments import named
from headcut_grader.errors import UserError, check_names, setting


@dataclass(frozen=True)
class HeadPlan:
    """Kept heads per layer, numbered as in the unpruned model (`num_heads` per layer)."""

    keep: tuple[tuple[int, ...], ...]
    num_heads: int

    @property
    def heads_per_layer(self) -> list[int]:
        return [len(k) for k in self.keep]

    @property
    def num_kept(self) -> int:
        return sum(self.heads_per_layer)

    @property
    def keep_ratio(self) -> float:
        return self.num_kept / (len(self.keep) * self.num_heads)

    def mask(self) -> torch.Tensor:
        """The plan as a (num_layers, num_heads) head mask, 1 = keep."""
        mask = torch.zeros(len(self.keep), self.num_heads)
        for layer, heads in enumerate(self.keep):
            mask[layer, list(heads)] = 1.0
        return mask

    def to_dict(self) -> dict:
        return {"num_heads": self.num_heads, "keep": [list(k) for k in self.keep]}

    @classmethod
    def from_dict(cls, data: dict) -> "HeadPlan":
        return cls(tuple(tuple(int(h) for h in k) for k in data["keep"]), int(data["num_heads"]))

    @classmethod
    def from_mask(cls, mask: torch.Tensor) -> "HeadPlan":
        return cls(tuple(tuple(int(h) for h in torch.nonzero(row > 0).flatten()) for row in mask), mask.shape[1])


def check_keep_ratio(keep_ratio: float, *, names: str = "arguments") -> None:
    """`names`: how the message names the argument (prune_arguments.named)."""
    check_names(names, "check_keep_ratio names")
    if not 0 < keep_ratio <= 1:
        name = named("keep_ratio", names)
        raise UserError(f"{setting(name, keep_ratio)} is outside (0, 1]; pass e.g. {setting(name, 0.8)} to keep 80% "
                        "of heads.", about=("keep_ratio",))


def check_head_counts(keep_ratio: float, min_heads: int, num_layers: int, num_heads: int, *,
                      names: str = "arguments") -> int:
    """The heads a plan keeps, `round(keep_ratio * L * H)`: refused when none, or fewer than `min_heads` per layer
    needs, or `min_heads` is more than a layer has. `names`: how the messages name the arguments
    (prune_arguments.named)."""
    ratio, least = named("keep_ratio", names), named("min_heads", names)
    target = int(round(keep_ratio * num_layers * num_heads))
    if target == 0:
        raise UserError(f"{setting(ratio, keep_ratio)} keeps round({keep_ratio} x {num_layers * num_heads}) = 0 heads, "
                        "a grader that gives every pair the same output; pass at least "
                        f"{1 / (num_layers * num_heads):.3g} (one head).", about=("keep_ratio",))
    if min_heads > num_heads:
        raise UserError(f"{setting(least, min_heads)} is more than the {num_heads} heads of a layer; pass at most "
                        f"{num_heads}.", about=("min_heads",))
    if min_heads * num_layers > target:
        raise UserError(f"{setting(least, min_heads)} needs {min_heads * num_layers} heads but "
                        f"{setting(ratio, keep_ratio)} keeps {target}; raise {ratio} or lower {least}.",
                        about=("min_heads", "keep_ratio"))
    return target


def layer_weights(num_layers: int, layer_prior: float) -> torch.Tensor:
    """1 + layer_prior * (L - 1 - l) / (L - 1): 1 + prior for the bottom layer, 1 for the top one."""
    if num_layers == 1:
        return torch.ones(1)
    depth = torch.arange(num_layers, dtype=torch.float64)
    return 1 + layer_prior * (num_layers - 1 - depth) / (num_layers - 1)


def effective_scores(scores: torch.Tensor, *, layer_prior: float,
                     available: torch.Tensor | None = None) -> torch.Tensor:
    """Rank percentile in (0, 1] among available heads, times the layer weight; unavailable heads get -inf."""
    scores = scores.detach().to(torch.float64)
    if torch.isnan(scores).any():
        raise ValueError("head scores contain NaN")
    available = torch.ones_like(scores, dtype=torch.bool) if available is None else available.bool()
    flat = scores.flatten()
    idx = torch.nonzero(available.flatten()).flatten()
    # a stable sort gives tied heads distinct ranks in layer-major order, so plans are deterministic
    order = idx[torch.sort(flat[idx], stable=True).indices]
    percentile = torch.full_like(flat, float("-inf"))
    percentile[order] = torch.arange(1, len(order) + 1, dtype=torch.float64) / max(1, len(order))
    return percentile.view_as(scores) * layer_weights(scores.shape[0], layer_prior)[:, None]


def plan_heads(
    scores: torch.Tensor,
    keep_ratio: float,
    *,
    layer_prior: float = 0.0,
    min_heads: int = 0,
    available: torch.Tensor | None = None,
) -> HeadPlan:
    """Keep `round(keep_ratio * L * H)` heads: each layer's `min_heads` best first, then the rest by
    effective score (see the module docstring). `available` (bool, same shape) limits the choice to
    heads that still exist (iterative pruning)."""
    check_keep_ratio(keep_ratio)
    if layer_prior < 0:
        raise UserError(f"layer_prior={layer_prior} is negative; pass 0 (global ranking) or more.")
    num_layers, num_heads = scores.shape
    target = check_head_counts(keep_ratio, min_heads, num_layers, num_heads)
    effective = effective_scores(scores, layer_prior=layer_prior, available=available)
    present = torch.isfinite(effective)
    if target > int(present.sum()):
        raise ValueError(f"cannot keep {target} heads, only {int(present.sum())} are available")
    chosen = torch.zeros_like(present)
    for layer in range(num_layers):
        best = torch.argsort(effective[layer], descending=True, stable=True)[
            : min(min_heads, int(present[layer].sum()))]
        chosen[layer, best] = True
    rest = effective.masked_fill(chosen, float("-inf")).flatten()
    extra = target - int(chosen.sum())
    if extra > 0:
        chosen.view(-1)[torch.argsort(rest, descending=True, stable=True)[:extra]] = True
    return HeadPlan.from_mask(chosen.to(torch.float32))
