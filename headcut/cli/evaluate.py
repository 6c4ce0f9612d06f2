"""`headcut evaluate`: grade a model on labelled pairs and report metrics with CIs."""
from __future__ import annotations

from pathlib import Path

import typer

from headcut.cli.common import (ALLOW_PICKLE, LABEL_COL, LABEL_MAP, LIMIT, PRESET, QUERY_COL, TITLE_COL, Opt,
                                progress_bar, quiet_transformers, read_data, user_errors)


def format_metrics(metrics: dict) -> str:
    ci = metrics.get("ci95", {})
    lines = [f"{'metric':<10} {'value':>8}   95% CI"]
    for name in ("accuracy", "macro_f1", "spearman", "loss", "ndcg@10"):
        if name in metrics:
            lo_hi = ci.get(name)
            band = f"[{lo_hi[0]:.4f}, {lo_hi[1]:.4f}]" if lo_hi else ""
            lines.append(f"{name:<10} {metrics[name]:>8.4f}   {band}")
    lines.append(f"pairs: {metrics['n']}")
    return "\n".join(lines)


@user_errors
def evaluate(
    model: str = typer.Option(..., "--model", "-m", help="Model folder or built-in name (minilm-l6)."),
    data: str = typer.Option(..., "--data", "-d", help="Pairs file (TSV/CSV/JSONL/JSON), or synthetic[:SEED] for the built-in synthetic set."),
    out: Opt[Path] = typer.Option(None, "--out", help="Write metrics JSON here."),
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, label_map: Opt[str] = LABEL_MAP, limit: Opt[int] = LIMIT,
    batch_size: int = typer.Option(64, help="Pairs per forward pass."),
    max_length: Opt[int] = typer.Option(None, help="Token limit per pair (default: the model's, else 128)."),
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the 95% CIs."),
    allow_pickle: bool = ALLOW_PICKLE,
):
    """Grade MODEL on DATA: accuracy, macro-F1, Spearman of the expected grade, loss, NDCG@10, with 95% CIs.

    Example: headcut evaluate --model runs/teacher --data ../shared/data/homedepot/dev.tsv --out dev.json
    """
    quiet_transformers()
    from headcut.evaluate import evaluate_model
    from headcut.files import write_json
    from headcut.models import load_model

    pairs = read_data(data, preset=preset, query_col=query_col, title_col=title_col, label_col=label_col,
                      label_map=label_map, limit=limit)
    loaded = load_model(model, allow_pickle=allow_pickle)
    with progress_bar(len(pairs), "grading") as bar:
        result = evaluate_model(loaded, pairs, batch_size=batch_size, max_length=max_length, iters=bootstrap,
                                progress=bar.update)
    metrics = result["metrics"]
    metrics["model"] = {"path": loaded.path, "weights_hash": loaded.weights_hash}
    typer.echo(format_metrics(metrics))
    if out:
        write_json(out, metrics)
        typer.echo(f"wrote {out}")
