"""The prune report: heads per layer (text and a small figure), size and FLOPs, quality before/after
with paired CIs, and measured latency next to the ideal speedup."""
from __future__ import annotations

from pathlib import Path

from headcut.evaluate.tasks import missing, shown, shown_ci
from headcut.prune_arguments import named
from headcut_grader.errors import check_names

METRIC_NAMES = ("accuracy", "macro_f1", "spearman", "loss")
OPTIMISTIC = "These pairs also chose the pruned units, so the change is optimistic."  # a recorded note
SCORE_METRIC_NAMES = ("spearman", "pearson", "ndcg@10", "mrr", "pair_accuracy", "loss")  # loss: MSE


def shape_figure(plan: dict, path: str | Path) -> Path:
    """Bar charts of what each layer kept, before (outline) and after (filled): heads, and FFN neurons
    when the plan pruned them too."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("heads", plan["num_heads"], plan["heads_per_layer"])]
    if "neurons_per_layer" in plan:
        panels.append(("FFN neurons", plan["num_neurons"], plan["neurons_per_layer"]))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 2.4), dpi=110, squeeze=False)
    for ax, (name, full, kept) in zip(axes[0], panels):
        layers = list(range(len(kept)))
        ax.bar(layers, [full] * len(kept), color="none", edgecolor="0.55", label="before")
        ax.bar(layers, kept, color="#2b7bba", label="kept")
        for x, n in zip(layers, kept):
            ax.text(x, n + full * 0.02, str(n), ha="center", va="bottom", fontsize=7)
        ax.set_xlabel("layer (0 = bottom)")
        ax.set_ylabel(name)
        ax.set_xticks(layers)
        ax.set_ylim(0, full * 1.22)
        ax.legend(fontsize=7, loc="upper right", frameon=False, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


def _count(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,}"


def _flops(n: int) -> str:
    return f"{n / 1e9:.3f} GFLOP" if n >= 1e7 else f"{n / 1e6:.3f} MFLOP"


def format_report(summary: dict, *, figure: str | None = None, names: str = "arguments") -> str:
    """Markdown for a `PruneResult.record()` (plan, speed, optional quality, notes); `names`: how it names a setting,
    as the prune's caller set it (`PruneResult.names`)."""
    check_names(names, "format_report names")
    lines = ["# headcut prune", "",
             f"Source: `{summary['source']['path']}` (weights {summary['source']['weights_hash']})  ",
             f"Scores: {summary['scores'].get('how') or summary['scores']['method']}  "]
    lines += _plan_lines(summary)
    lines += ["", "## Kept per layer", ""] + _kept_table(summary)
    if figure:
        lines += ["", f"![kept per layer]({figure})"]
    lines += (_speed_lines(summary["speed"]) + _quality_lines(summary, names)
              + _tuning_lines(summary.get("tuning"), names))
    return "\n".join(lines) + "\n"


def _plan_lines(summary: dict) -> list[str]:
    """What was asked (a budget, or a keep ratio) and what the plan kept."""
    plan, budget = summary["plan"], summary.get("budget")
    if not budget:
        return [f"Kept {plan['kept']} of {plan['total']} heads (keep ratio {summary['keep_ratio']}, "
                f"layer prior {summary['layer_prior']}, min heads {summary['min_heads']}"
                + (f", {summary['iterative']} iterative steps" if summary.get("iterative") else "") + ")."]
    lines = [_budget_sentence(budget)]
    if budget.get("steps"):
        shares = ", ".join(f"{s['share']:.2f}" for s in budget["steps"])
        lines.append(f"Reached in {len(budget['steps'])} steps (shares {shares}), re-scored and re-tuned after each.  ")
    lines.append(f"Kept {plan['kept']} of {plan['total']} heads and {sum(plan['neurons_per_layer']):,} of "
                 f"{plan['num_neurons'] * len(plan['neurons_per_layer']):,} FFN neurons "
                 f"(layer prior {summary['layer_prior']}).")
    if budget.get("layer_search"):
        lines.append(_layer_sentence(budget["layer_search"]))
    return lines


def _budget_sentence(budget: dict) -> str:
    if budget.get("latency") is None:
        return (f"Budget: {budget['flops']} of the FLOPs at {budget['seq_len']} tokens "
                f"({_flops(budget['budget_flops'])}); the plan uses {_flops(budget['plan_flops'])}.  ")
    c = budget["costs"]
    return (f"Budget: {budget['latency']} of the latency measured on {c['runtime']} per batch of {c['batch']} x "
            f"{c['seq_len']} ({budget['budget_ms']:.1f} of {budget['full_ms']:.1f} ms estimated from the "
            f"layer cost tables timed on {c['machine']}); the plan's estimate is {budget['plan_ms']:.1f} ms "
            f"and its FLOPs {budget['plan_flops'] / budget['full_flops']:.3f} of the model's.  ")


def _kept_table(summary: dict) -> list[str]:
    """Heads (and with a budget, FFN neurons) per layer; removed layers are marked."""
    plan = summary["plan"]
    count = len(plan["heads_per_layer"])
    kept = set(plan.get("layers") or range(count))
    layers = " | ".join(str(i) if i in kept else f"{i} (dropped)" for i in range(count))
    rows = ["| layer | " + layers + " |", "|---|" + "---|" * count,
            "| heads | " + " | ".join(str(n) for n in plan["heads_per_layer"]) + " |"]
    if summary.get("budget"):
        rows.append("| FFN neurons | " + " | ".join(str(n) for n in plan["neurons_per_layer"]) + " |")
    return rows


def _speed_lines(speed: dict) -> list[str]:
    lines = ["", f"## Size and compute (sequence length {speed['seq_len']})", "",
             "| | before | after | ratio |", "|---|---|---|---|",
             f"| parameters | {_count(speed['params']['before'])} | {_count(speed['params']['after'])} | "
             f"{speed['params']['after'] / speed['params']['before']:.3f} |",
             f"| FLOPs per pair | {_flops(speed['flops']['before'])} | {_flops(speed['flops']['after'])} | "
             f"{speed['flops']['after'] / speed['flops']['before']:.3f} |",
             "", f"Ideal speedup from FLOPs: {speed['ideal_speedup']:.2f}x."]
    if not speed.get("latency"):
        return lines
    lines += ["", "## Measured CPU latency", "",
              "| batch | ms before | ms after | pairs/s before | pairs/s after | speedup | of ideal |",
              "|---|---|---|---|---|---|---|"]
    for row in speed["latency"]:
        lines.append(f"| {row['batch_size']} | {row['ms_before']:.1f} | {row['ms_after']:.1f} | "
                     f"{row['pairs_per_second_before']:.0f} | {row['pairs_per_second_after']:.0f} | "
                     f"{row['speedup']:.2f}x | {row['ratio_to_ideal']:.0%} |")
    return lines + ["", "Pruned heads save matrix multiplies; embeddings, LayerNorm and per-call overhead do not "
                        "shrink, so small batches gain less than the FLOPs promise."]


def optimistic(names: str = "arguments") -> str:
    """The OPTIMISTIC note with the way to held-out pairs as the prune's caller passes them: eval_data, --eval-data
    (a run passes none: its report grades every model on data.test)."""
    fix = ("the run's report grades on data.test" if names == "keys"
           else f"pass {named('eval_data', names)} for held-out pairs")
    return f"{OPTIMISTIC.rstrip('.')}; {fix}."


def _quality_lines(summary: dict, names: str) -> list[str]:
    """Quality before/after (and without tuning) with paired CIs, and agreement; else the notes alone."""
    quality = summary.get("quality")
    notes = [optimistic(names) if note == OPTIMISTIC else note for note in summary.get("notes") or []]
    if not quality:
        return ["", " ".join(notes)] if notes else []
    lines = ["", f"## Quality on {quality['data']['source']} ({quality['data']['rows']} pairs)", ""]
    if notes:
        lines += [" ".join(notes), ""]
    untuned = summary.get("quality_untuned")
    if "before" in quality:
        lines += _metric_table(quality, untuned)
    lines += ["", _agreement_sentence(quality)]
    if untuned:
        lines.append(f"Without mask tuning: {_agreement(untuned)}.")
    return lines


def _metric_table(quality: dict, untuned: dict | None) -> list[str]:
    head, rule = "| metric | before | after | change (paired 95% CI) |", "|---|---|---|---|"
    if untuned:
        head += " without mask tuning | change without tuning |"
        rule += "---|---|"
    lines = [head, rule]
    for name in SCORE_METRIC_NAMES if quality.get("task") == "score" else METRIC_NAMES:
        row = (f"| {name} | {shown(quality['before'][name])} | {shown(quality['after'][name])} | "
               f"{shown_ci(quality['paired'][name])} |")
        if untuned:
            row += f" {shown(untuned['after'][name])} | {shown_ci(untuned['paired'][name])} |"
        lines.append(row)
    return lines


def _tuning_lines(tuning: dict | None, names: str) -> list[str]:
    """The least-squares fits of each sublayer and of the classification head, with their errors."""
    if not (tuning and tuning.get("enabled")):
        return []
    data = tuning["data"]
    asked = (f" ({named('calibrate', names)} asked for {data['asked']}; the data holds no more)"
             if data.get("asked", 0) > data["rows"] else "")
    lines = ["", "## Mask tuning", "",
             f"Least-squares {_FITS.get(tuning.get('fit'), 'scales')} on {data['rows']} calibration pairs from "
             f"{data['source']}{asked}; kept in {tuning['accepted']} of {tuning['sublayers']} sublayers. "
             "Reconstruction error (squared error of each sublayer's LayerNorm input relative to the unpruned "
             "model's, on held-out calibration pairs):", "",
             "| layer | sublayer | units | fitted | error untuned | error tuned | damping |",
             "|---|---|---|---|---|---|---|"]
    for f in tuning["fits"]:
        lines.append(f"| {f['layer']} | {f['sublayer']} | {f['units']} | {f.get('mode', 'scales')} | "
                     f"{_error(f['error_before'])} | {_error(f['error_after'])} | "
                     f"{f['damping'] if f['accepted'] else 'not kept'} |")
    for f in tuning.get("head", []):  # output error of the head's linears, re-fitted after the layers
        lines.append(f"| head | {f['name']} | | weights | {_error(f['error_before'])} | {_error(f['error_after'])} | "
                     f"{f['damping'] if f['accepted'] else 'not kept'} |")
    return lines


def _layer_sentence(search: dict) -> str:
    """What the layer search (`prune.layers`) chose, with the divergences it compared."""
    head = (f"Layer search on {search['pairs']} calibration pairs ({len(search['trials'])} candidates, masked, "
            "untuned): ")
    divergences = (f"mean divergence from the unpruned model {search['divergence_all_layers']:.4f} with all layers, "
                   f"{search['divergence']:.4f} as planned")
    if search.get("tuned"):
        return f"{head}{divergences} (dropping {_layers(search['proposed'])} whole); {_drops_after_tuning(search)}."
    if search["dropped"]:
        chosen = f"dropped {_layers(search['dropped'])} whole"
    else:
        chosen = "dropped no layer (no drop brought the plan closer to the unpruned model)"
    return f"{head}{chosen}; {divergences}."


def _layers(ids: list[int]) -> str:
    return f"layer{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


def _drops_after_tuning(search: dict) -> str:
    """The tuned check of the search's drops (`prune.layers.settle_drops`)."""
    tuned = search["tuned"]
    verdict = "so they were dropped" if search["dropped"] else "so every layer was kept"
    return (f"tuned, that plan diverged {tuned['with_drops']:.4f} on the held-out calibration pairs against "
            f"{tuned['all_layers']:.4f} over all layers, {verdict}")


def _agreement_sentence(quality: dict) -> str:
    if quality.get("task") != "score":
        return "Same grade as the unpruned model on " + _agreement(quality) + "."
    if missing(quality["paired"]["agreement"]["value"]):
        return "Ordered as the unpruned model orders them: n/a (no query here has two titles to order)."
    return (f"Ordered as the unpruned model orders them: {_agreement(quality)} within each query; "
            f"the same first title for {_share(quality['paired']['top1'])} of queries.")


def _agreement(quality: dict) -> str:
    agree = quality["paired"]["agreement"]
    return "n/a" if missing(agree["value"]) else f"{_share(agree)} of pairs"


def _share(d: dict) -> str:
    """A share with its CI, or n/a (no query with two titles to order)."""
    if missing(d["value"]):
        return "n/a"
    ci = f" (95% CI {shown(d['ci'][0], '.2%')} to {shown(d['ci'][1], '.2%')})" if "ci" in d else ""
    return f"{d['value']:.2%}{ci}"


_FITS = {"scales": "scales", "weights": "refits of each sublayer's output projection",
         "best": "fits (per sublayer, scales or the whole output projection, whichever did better on held-out pairs)"}


def _error(value: float) -> str:
    """A relative squared error; a fit of an unchanged sublayer can round a hair below 0, shown as 0."""
    return f"{max(value, 0.0):.4f}"
