"""The prune report: heads per layer (text and a small figure), size and FLOPs, quality before/after
with paired CIs, and measured latency next to the ideal speedup."""
from __future__ import annotations

from pathlib import Path

METRIC_NAMES = ("accuracy", "macro_f1", "spearman", "loss")


def heads_figure(heads_before: list[int], heads_after: list[int], path: str | Path) -> Path:
    """A small bar chart of heads per layer, before (outline) and after (filled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.2, 2.4), dpi=110)
    layers = list(range(len(heads_before)))
    ax.bar(layers, heads_before, color="none", edgecolor="0.55", label="before")
    ax.bar(layers, heads_after, color="#2b7bba", label="kept")
    for x, n in zip(layers, heads_after):
        ax.text(x, n + 0.2, str(n), ha="center", va="bottom", fontsize=7)
    ax.set_xlabel("layer (0 = bottom)")
    ax.set_ylabel("heads")
    ax.set_xticks(layers)
    ax.set_ylim(0, max(heads_before) * 1.22)
    ax.legend(fontsize=7, loc="upper right", frameon=False, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def _count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,}"


def _flops(n: int) -> str:
    return f"{n / 1e9:.3f} GFLOP" if n >= 1e7 else f"{n / 1e6:.3f} MFLOP"


def format_report(summary: dict, *, figure: str | None = None) -> str:
    """Markdown for `summary` as built by the prune command (plan, speed, optional quality)."""
    plan = summary["plan"]
    lines = ["# headcut prune", ""]
    lines.append(f"Source: `{summary['source']['path']}` (weights {summary['source']['weights_hash']})  ")
    lines.append(f"Scores: {summary['scores'].get('how') or summary['scores']['method']}  ")
    lines.append(f"Kept {plan['kept']} of {plan['total']} heads (keep ratio {summary['keep_ratio']}, "
                 f"layer prior {summary['layer_prior']}, min heads {summary['min_heads']}"
                 + (f", {summary['iterative']} iterative steps" if summary.get("iterative") else "") + ").")
    lines += ["", "## Heads per layer", "", "| layer | " + " | ".join(str(i) for i in range(len(plan['heads_per_layer']))) + " |",
              "|---|" + "---|" * len(plan["heads_per_layer"]),
              "| kept | " + " | ".join(str(n) for n in plan["heads_per_layer"]) + " |"]
    if figure:
        lines += ["", f"![heads per layer]({figure})"]
    speed = summary["speed"]
    lines += ["", f"## Size and compute (sequence length {speed['seq_len']})", "",
              "| | before | after | ratio |", "|---|---|---|---|",
              f"| parameters | {_count(speed['params']['before'])} | {_count(speed['params']['after'])} | "
              f"{speed['params']['after'] / speed['params']['before']:.3f} |",
              f"| FLOPs per pair | {_flops(speed['flops']['before'])} | {_flops(speed['flops']['after'])} | "
              f"{speed['flops']['after'] / speed['flops']['before']:.3f} |",
              "", f"Ideal speedup from FLOPs: {speed['ideal_speedup']:.2f}x."]
    if speed.get("latency"):
        lines += ["", "## Measured CPU latency", "",
                  "| batch | ms before | ms after | pairs/s before | pairs/s after | speedup | of ideal |",
                  "|---|---|---|---|---|---|---|"]
        for row in speed["latency"]:
            lines.append(f"| {row['batch_size']} | {row['ms_before']:.1f} | {row['ms_after']:.1f} | "
                         f"{row['pairs_per_second_before']:.0f} | {row['pairs_per_second_after']:.0f} | "
                         f"{row['speedup']:.2f}x | {row['ratio_to_ideal']:.0%} |")
        lines += ["", "Pruned heads save matrix multiplies; embeddings, LayerNorm and per-call overhead do not "
                      "shrink, so small batches gain less than the FLOPs promise."]
    quality = summary.get("quality")
    if quality:
        lines += ["", f"## Quality on {quality['data']['source']} ({quality['data']['rows']} pairs)", ""]
        if quality.get("note"):
            lines += [quality["note"], ""]
        paired = quality["paired"]
        if "before" in quality:
            lines += ["| metric | before | after | change (paired 95% CI) |", "|---|---|---|---|"]
            for name in METRIC_NAMES:
                d = paired[name]
                lines.append(f"| {name} | {quality['before'][name]:.4f} | {quality['after'][name]:.4f} | "
                             f"{d['delta']:+.4f} [{d['ci'][0]:+.4f}, {d['ci'][1]:+.4f}] |")
        agree = paired["agreement"]
        ci = f" (95% CI {agree['ci'][0]:.2%} to {agree['ci'][1]:.2%})" if "ci" in agree else ""
        lines += ["", f"Same grade as the unpruned model on {agree['value']:.2%} of pairs{ci}."]
    return "\n".join(lines) + "\n"
