"""Figures of a scan, as matplotlib Figures (no pyplot: no global state, no display needed).

Every effect figure has three panels, the study's relative accuracy beside the loss change and the
flip rate, because accuracy alone hides large changes (see experiments.py).
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

PANELS = (("relative_accuracy_pct", "accuracy change (% of baseline)"),
          ("loss_delta", "loss change (NLL)"),
          ("flip_rate", "flip rate (share of changed grades)"))


def literal(text) -> str:
    """`text` (a name from a path or recipe, a token of the data) as a figure must draw it: matplotlib reads the span
    between two $ as math, so a folder m$a_b$ was drawn as 'ma' with a subscript b, and a token '$$' or a folder
    m$\\q$ failed the figure (ValueError) after the whole benchmark or probe."""
    return str(text).replace("$", r"\$")


def _grid(values: np.ndarray, ax, title: str, *, cmap="viridis", fig=None):
    shown = np.ma.masked_invalid(np.where(np.isfinite(values), values, np.nan))
    limits = {}
    if cmap == "RdBu" and shown.count():  # diverging: white at zero, so gains and losses read at a glance
        edge = float(np.abs(shown).max()) or 1.0
        limits = {"vmin": -edge, "vmax": edge}
    im = ax.imshow(shown, cmap=cmap, aspect="auto", **limits)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(values.shape[1]))
    ax.set_yticks(range(values.shape[0]))
    ax.tick_params(labelsize=7)
    if fig is not None:
        fig.colorbar(im, ax=ax, shrink=0.8)


def importance_heatmaps(scores: dict) -> Figure:
    """One layers x heads heat map per method (absent heads blank)."""
    fig = Figure(figsize=(4.2 * len(scores), 3.4), layout="constrained")
    axes = fig.subplots(1, len(scores), squeeze=False)[0]
    for ax, (name, s) in zip(axes, scores.items()):
        _grid(np.asarray(s, dtype=float), ax, f"{name} (higher = more important)", fig=fig)
    return fig


def effect_curves(curves: dict[str, list[dict]], *, title: str, x: str = "ratio") -> Figure:
    """Effect vs share of heads masked, one line per curve, 95% CI bands."""
    fig = Figure(figsize=(12, 3.4), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (key, label) in zip(axes, PANELS):
        for name, rows in curves.items():
            xs = [100 * r[x] for r in rows]
            ax.plot(xs, [r[key] for r in rows], marker="o", label=name)
            if rows and f"{key}_ci" in rows[0]:
                ax.fill_between(xs, [r[f"{key}_ci"][0] for r in rows], [r[f"{key}_ci"][1] for r in rows], alpha=0.2)
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_xlabel("heads masked (% of all)")
        ax.set_title(label, fontsize=9)
        if len(curves) > 1:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def effect_bars(rows: list[dict], labels: list[str], *, title: str) -> Figure:
    """One bar per condition with 95% CI whiskers."""
    fig = Figure(figsize=(12, 3.6), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (key, label) in zip(axes, PANELS):
        values = np.array([r[key] for r in rows])
        err = None
        if rows and f"{key}_ci" in rows[0]:
            ci = np.array([r[f"{key}_ci"] for r in rows])
            err = np.abs(np.stack([values - ci[:, 0], ci[:, 1] - values]))
        ax.bar(range(len(rows)), values, yerr=err, capsize=3, color="tab:blue")
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels(labels, fontsize=7, rotation=20 if max(map(len, labels), default=0) > 6 else 0, ha="right")
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_title(label, fontsize=9)
    fig.suptitle(title, fontsize=10)
    return fig


def head_effect_heatmaps(table: list[dict], shape: tuple[int, int]) -> Figure:
    """The single-head ablation table as three layers x heads heat maps."""
    fig = Figure(figsize=(13, 3.4), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (key, label) in zip(axes, PANELS):
        grid = np.full(shape, np.nan)
        for r in table:
            grid[r["layer"], r["head"]] = r[key]
        cmap = "RdBu" if key == "relative_accuracy_pct" else "magma"
        _grid(grid, ax, f"mask one head: {label}", cmap=cmap, fig=fig)
    return fig


def probe_heatmaps(probes: dict, names: tuple[str, ...]) -> Figure:
    fig = Figure(figsize=(3.3 * len(names), 3.2), layout="constrained")
    axes = fig.subplots(1, len(names), squeeze=False)[0]
    for ax, name in zip(axes, names):
        _grid(np.asarray(probes[name], dtype=float), ax, name, cmap="magma", fig=fig)
    return fig


def attention_grid(maps: list, tokens: list[str], heads: list[tuple[int, int, str]], *,
                   length: int | None = None) -> Figure:
    """Small multiples: the attention map of each chosen (layer, head, why) on one pair (of `length` tokens, where
    the maps hold only its first ones)."""
    cols = min(4, max(1, len(heads)))
    rows = (len(heads) + cols - 1) // cols
    size = 2.0 + 0.16 * len(tokens)
    fig = Figure(figsize=(size * cols, size * rows), layout="constrained")
    if length and length > len(tokens):
        fig.suptitle(f"the first {len(tokens)} of the pair's {length} tokens", fontsize=9)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).flatten()
    for ax, (layer, head, why) in zip(axes, heads):
        ax.imshow(maps[layer][head].numpy(), cmap="Blues", vmin=0)  # own scale: weak patterns stay visible
        ax.set_title(f"L{layer}H{head}: {why}", fontsize=8)
        ax.set_xticks(range(len(tokens)))
        ax.set_yticks(range(len(tokens)))
        ax.set_xticklabels(list(map(literal, tokens)), rotation=90, fontsize=6)
        ax.set_yticklabels(list(map(literal, tokens)), fontsize=6)
    for ax in axes[len(heads):]:
        ax.axis("off")
    return fig
