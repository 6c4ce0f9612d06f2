"""`headcut evaluate`: grade a model on labelled pairs and report metrics with CIs."""
from __future__ import annotations

from pathlib import Path

import typer

from headcut.cli.common import (ALLOW_PICKLE, BATCH_SIZE, BOOTSTRAP, LABEL_COL, LABEL_MAP, LIMIT, MAX_LENGTH, OVERWRITE,
                                PRESET, QUERY_COL, TITLE_COL, Opt, file_option, file_to_read, progress_bar,
                                quiet_transformers, read_data, user_errors)


def format_metrics(metrics: dict) -> str:
    from headcut.evaluate.tasks import missing, shown

    ci = metrics.get("ci95", {})
    lines, no_ci = [f"{'metric':<13} {'value':>8}   95% CI"], False
    for name in ("accuracy", "macro_f1", "spearman", "pearson", "loss", "ndcg@10", "mrr", "pair_accuracy"):
        if name in metrics:
            lo_hi = ci.get(name)
            measured = bool(lo_hi) and not missing(metrics[name])
            no_ci = no_ci or (measured and all(map(missing, lo_hi)))
            band = ("" if not measured else "n/a" if all(map(missing, lo_hi)) else
                    f"[{shown(lo_hi[0])}, {shown(lo_hi[1])}]")
            lines.append(f"{name:<13} {shown(metrics[name]):>8}   {band}")
    lines.append(f"pairs: {metrics['n']}")
    if no_ci and metrics.get("queries") == 1:  # every CI by query is n/a there (metrics.by_query)
        # a score model's CIs are all by query, a grades model's NDCG@10's alone
        which = "95% CIs n/a" if "pair_accuracy" in metrics else "95% CI of NDCG@10 n/a"
        lines.append(f"{which}: the pairs hold one query, and the CI resamples queries, so it would show no variation "
                     "between queries; evaluate on pairs of two or more queries.")
    if missing(metrics.get("spearman")):  # undefined only where the gold holds one value
        lines.append(one_gold_sentence(metrics))
    elif metrics.get("judged_pairs") == 0 or missing(metrics.get("ndcg@10", 0.0)):  # a grades model: no judged_pairs
        gold = "grade" if "accuracy" in metrics else "score"
        lines.append(f"n/a: no query has two titles of different gold {gold}, so there is no order to judge")
    return "\n".join(lines)


def one_gold_sentence(metrics: dict) -> str:
    """Why the order metrics are n/a on pairs of one gold value (a one-pair file, a file of one grade)."""
    grades = "accuracy" in metrics
    what, measured = ("grade", "Spearman or NDCG@10") if grades else ("score", "Spearman, Pearson, NDCG@10, MRR or "
                                                                             "pair accuracy")
    pairs = "there is one pair" if metrics["n"] == 1 else f"all {metrics['n']} pairs have the same gold {what}"
    return (f"n/a: {pairs}, so there is no order for {measured} to measure; evaluate on pairs "
            f"of two or more {what}s.")


def format_against(metrics: dict, reference: dict, paired: dict, name: str) -> str:
    from headcut.evaluate.tasks import shown, shown_ci

    score = "pair_order" in paired
    names = ("spearman", "pearson", "ndcg@10", "mrr", "pair_accuracy", "loss") if score else (
        "accuracy", "macro_f1", "spearman", "loss")
    lines = [f"{'metric':<13} {'model':>8} {'against':>8}   model - against [95% paired CI]"]
    for m in names:
        lines.append(f"{m:<13} {shown(metrics[m]):>8} {shown(reference[m]):>8}   {shown_ci(paired[m])}")
    agreements = ((("pair_order", f"within-query pairs ordered as {name}"),
                   ("top1", f"queries whose first title {name} also ranks first")) if score
                  else (("agreement", f"same grade as {name}"),))
    for key, what in agreements:
        a = paired[key]
        lines.append(f"{key:<13} {shown(a['value']):>8}            [{shown(a['ci'][0])}, {shown(a['ci'][1])}] ({what})")
    return "\n".join(lines)


@user_errors
def evaluate(
    model: str = typer.Option(..., "--model", "-m", help="Model folder, built-in name (minilm-l6), or an exported "
                              "grader folder (headcut export), run in whichever of its runtimes "
                              "(ONNX Runtime, OpenVINO) grades fastest on this CPU."),
    data: str = typer.Option(..., "--data", "-d", parser=file_to_read("--data"),
                             help="Pairs file (TSV/CSV/JSONL/JSON), or synthetic[:SEED] for the built-in synthetic "
                             "set."),
    out: Opt[Path] = file_option(None, "--out", example="metrics.json",
                                 help="Write the metrics here as JSON (a .json file)."),
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, label_map: Opt[str] = LABEL_MAP, limit: Opt[int] = LIMIT,
    batch_size: int = BATCH_SIZE,
    max_length: Opt[int] = MAX_LENGTH,
    bootstrap: int = BOOTSTRAP,
    against: Opt[str] = typer.Option(None, "--against", help="A reference model or grader (e.g. the teacher) "
                                     "graded on the same pairs: prints model - reference with paired bootstrap CIs, "
                                     "and grade agreement."),
    allow_pickle: bool = ALLOW_PICKLE, overwrite: bool = OVERWRITE,
):
    """Grade MODEL on DATA: accuracy, macro-F1, Spearman of the expected grade, loss, NDCG@10, with 95% CIs.

    Example: headcut evaluate --model runs/teacher --data ../shared/data/homedepot/dev.tsv --out dev.json

    Example: headcut evaluate --model runs/bottom3 --against runs/teacher --data ../shared/data/homedepot/dev.tsv
    """
    quiet_transformers()
    from headcut.evaluate.report import (against_reference, check_comparable, check_scorer_length, metrics_with_ci,
                                         open_scorer)
    from headcut_grader.files import check_out_file, write_json

    if out:
        check_out_file(out, overwrite=overwrite, inputs=[data, model, against], example="metrics.json", flag="--out",
                       suffixes=(".json", ""), written="the metrics are written as one JSON document")
    for name, flag in ((model, "--model"), (against, "--against")):  # on each outline, before either loads
        if name:
            check_scorer_length(name, max_length, flag=flag)
    scorer = open_scorer(model, batch_size=batch_size, max_length=max_length, allow_pickle=allow_pickle,
                         flag="--model")
    pairs = read_data(data, preset=preset, query_col=query_col, title_col=title_col, label_col=label_col,
                      label_map=label_map, limit=limit, task=scorer.task, grades=scorer.grades)
    reference = open_scorer(against, batch_size=batch_size, max_length=max_length, allow_pickle=allow_pickle,
                            flag="--against") if against else None  # fail before the long pass
    if reference is not None:
        check_comparable(scorer, reference, flag="--against")
    with progress_bar(len(pairs), "grading") as bar:
        logits = scorer.logits(pairs, bar.update)
    metrics = metrics_with_ci(logits, pairs, iters=bootstrap, task=scorer.task, activation=scorer.activation)
    metrics["model"] = scorer.about
    if scorer.runtime:  # an exported grader: which of its runtimes graded, as `headcut-grader grade` says it
        typer.echo(f"graded with {scorer.runtime}")
    typer.echo(format_metrics(metrics))
    if reference is not None:
        with progress_bar(len(pairs), "grading --against") as bar:
            reference_logits = reference.logits(pairs, bar.update)
        metrics["against"] = against_reference(logits, reference_logits, pairs, reference=reference.about,
                                               iters=bootstrap, task=scorer.task, activation=scorer.activation,
                                               flag="--against")
        typer.echo("")
        if reference.runtime:
            typer.echo(f"--against graded with {reference.runtime}")
        typer.echo(format_against(metrics, metrics["against"]["metrics"], metrics["against"]["model_minus_against"],
                                  against))
    if out:
        write_json(out, metrics, overwrite=overwrite, flag="--out")
        typer.echo(f"wrote {out}")
