"""`headcut prune`: physically remove the least important attention heads, optionally favouring lower layers."""
from __future__ import annotations

from pathlib import Path

import typer

from headcut.cli.common import (ALLOW_PICKLE, BATCH_SIZE, LABEL_COL, LABEL_MAP, OVERWRITE, PRESET, QUERY_COL, SEED,
                                TITLE_COL, Opt, number, progress_bar, quiet_transformers, read_data, user_errors)
from headcut.errors import UserError

DEFAULT_METHOD = "fisher"  # best agreement with the teacher in benchmarks/prune_curve.py, and one pass


@user_errors
def prune(
    model: str = typer.Option(..., "--model", "-m", help="Model folder (a fine-tuned grader) or built-in name."),
    keep_ratio: float = number(..., "--keep-ratio", help="Share of heads to keep: keeps round(ratio x all heads)",
                               low=0.0, high=1.0, low_open=True, kind=float),
    out: Path = typer.Option(..., "--out", "-o", help="Folder for the pruned grader, report.md and the figure."),
    scores: Opt[Path] = typer.Option(None, "--scores", help="importance.json from `headcut scan` of this model."),
    data: Opt[str] = typer.Option(None, "--data", "-d", help="Pairs to score heads on (default: the model's recorded dev data)."),
    method: Opt[str] = typer.Option(None, "--method", help=f"Scan method: ablation, fisher, gradient or kl (default {DEFAULT_METHOD}); "
                                     "with --scores, which method of the file to use."),
    layer_prior: float = number(
        0.0, "--layer-prior", low=0.0,
        help="Keep more heads in lower layers: a head's global rank percentile is multiplied by "
             "1 + prior x (L-1-l)/(L-1) for layer l of L (0 = bottom). 0 = pure global ranking (default: on the "
             "Home Depot MiniLM teacher any prior > 0 hurt below keep 0.7, see benchmarks/prune_curve.py); "
             "1 = a bottom-layer head counts double against a top-layer head of the same rank"),
    min_heads: int = number(0, "--min-heads", help="Keep at least this many heads in every layer", low=0),
    iterative: int = number(0, "--iterative", help="Prune in this many steps, re-scoring between them (0 = one shot)",
                            low=0, high=100),
    eval_data: Opt[str] = typer.Option(None, "--eval-data", help="Pairs to report quality on (default: the scoring data)."),
    score_rows: Opt[int] = number(512, "--score-rows", help="Score heads on a seeded sample of this many pairs", low=1),
    eval_rows: Opt[int] = number(None, "--eval-rows", help="Report quality on a seeded sample of this many pairs",
                                 low=1, kind=int),
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, label_map: Opt[str] = LABEL_MAP,
    batch_size: int = BATCH_SIZE,
    bootstrap: int = number(1000, "--bootstrap", help="Bootstrap resamples for the paired 95% CIs", low=10),
    latency: bool = typer.Option(True, "--latency/--no-latency", help="Measure CPU latency at batch 1, 8, 32."),
    latency_seconds: float = number(1.0, "--latency-seconds", help="Timed seconds per model and batch size",
                                    low=0.0, high=600.0, low_open=True),
    seed: int = SEED,
    allow_pickle: bool = ALLOW_PICKLE,
    overwrite: bool = OVERWRITE,
):
    """Remove the least important attention heads from MODEL for good and write a smaller grader to OUT.

    Heads are ranked by a scan (--scores file, or a scan of --data here, else of the dev data recorded by
    `headcut finetune`); --layer-prior can tilt the choice towards lower layers. OUT reloads with
    headcut.load_model and every headcut command. The report shows heads per layer, parameters and FLOPs,
    quality before/after with paired CIs, and measured latency next to the ideal speedup.

    Example: headcut prune --model runs/teacher --keep-ratio 0.8 --out runs/pruned80
    """
    quiet_transformers()
    from headcut.files import check_out_dir
    from headcut.models import load_model
    from headcut.prune import check_keep_ratio, default_data, prune as run, scores_from_file, write_artifact
    from headcut.prune.artifact import FIGURE
    from headcut.prune.report import format_report

    check_keep_ratio(keep_ratio)
    check_out_dir(out, overwrite=overwrite, inputs=[model, scores, data, eval_data])
    loaded = load_model(model, allow_pickle=allow_pickle)
    columns = dict(query_col=query_col, title_col=title_col, label_col=label_col, label_map=label_map)
    given_scores, how, note = None, None, None
    if scores is not None:
        if iterative:
            raise UserError("--iterative re-scans between steps; pass --data (or nothing) instead of --scores.")
        given_scores, meta = scores_from_file(scores, loaded, method=method)
        how = f"{scores} ({meta.get('method', method or 'scan')})"
    score_pairs = None
    method = method or DEFAULT_METHOD
    if given_scores is None:
        source, source_preset = (data, preset) if data else default_data(loaded)
        score_pairs = read_data(source, preset=source_preset, limit=score_rows, seed=seed, **columns)
        how = f"{method} scan of {len(score_pairs)} pairs from {source}"
    if eval_data:
        eval_pairs = read_data(eval_data, preset=preset, limit=eval_rows, seed=seed, **columns)
    elif score_pairs is not None and score_pairs.has_labels:
        eval_pairs = score_pairs
        note = "These pairs also chose the heads, so the change is optimistic; pass --eval-data for held-out pairs."
    else:
        eval_pairs = None

    bars = {}

    def progress(stage, n):
        if stage not in bars:
            for bar in bars.values():
                bar.close()  # one bar at a time: the previous stage is done
            total = len(score_pairs) if stage.startswith("scoring") else len(eval_pairs) * 2
            bars[stage] = progress_bar(total, stage)
        bars[stage].update(n)

    pruned, summary = run(loaded, keep_ratio=keep_ratio, layer_prior=layer_prior, min_heads=min_heads,
                          scores=given_scores, score_pairs=score_pairs, method=method, iterative=iterative,
                          eval_pairs=eval_pairs, batch_size=batch_size, latency=latency,
                          latency_seconds=latency_seconds, bootstrap=bootstrap, seed=seed, progress=progress)
    for bar in bars.values():
        bar.close()
    summary["scores"]["how"] = how
    if given_scores is not None:
        summary["scores"]["file"] = {"path": str(scores), "data": meta.get("data"), "model": meta.get("model")}
    if note and "quality" in summary:
        summary["quality"]["note"] = note
    write_artifact(pruned, out, source=loaded, summary=summary, overwrite=overwrite)
    typer.echo(format_report(summary).replace("# headcut prune\n\n", "", 1))
    typer.echo(f"wrote {out} (report.md, {FIGURE})")
