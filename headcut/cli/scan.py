"""`headcut scan` and `headcut probe`: score every attention head, run the study's experiments, probe
what heads do; write importance.json/csv, figures and a report."""
from __future__ import annotations

import sys

import typer

from headcut_grader.errors import UserError, quoted
from headcut.cli.common import (ALLOW_PICKLE, BATCH_SIZE, LABEL_COL, LABEL_MAP, MAX_LENGTH, OVERWRITE, PRESET,
                                QUERY_COL, SEED, TITLE_COL, Opt, argument_option, file_to_read, flags_set,
                                folder_option, metrics_line, number, path, quiet_transformers, read_data, user_errors)
from headcut.evaluate_arguments import PROBE_BATCH_SIZE


def stage_bars(total: int):
    """A progress(stage, n) callback drawing one bar per stage, and a function closing them."""
    from tqdm import tqdm

    bars: dict = {}

    def progress(stage: str, n: int):
        if stage not in bars:
            for bar in bars.values():
                bar.close()
            bars[stage] = tqdm(total=total, desc=stage, unit="pair", file=sys.stderr, dynamic_ncols=True,
                               leave=False, disable=None)
        bars[stage].update(n)

    def close():
        for bar in bars.values():
            bar.close()

    return progress, close


def relative(row: dict) -> str:
    """An experiment's accuracy change as a share of the baseline's, n/a where the baseline grades no pair right."""
    from headcut.evaluate.tasks import missing

    value = row["relative_accuracy_pct"]
    return "n/a" if missing(value) else f"{value:+.2f}%"


def summary_lines(result: dict) -> list[str]:
    lines = []
    if "baseline" in result:
        b = result["baseline"]
        lines.append(f"baseline: {metrics_line(b)}  (n={b['n']})")
    for method, r in result["ranking"].items():
        lines.append(f"{method:<9} top {' '.join(r['top'])}   bottom {' '.join(r['bottom'])}")
    exps = result.get("experiments", {})
    for r in exps.get("random", []):
        if r["ratio"] in (0.1, 0.2, 0.5):
            lines.append(f"random {100 * r['ratio']:.0f}%: accuracy {relative(r)}  "
                         f"loss {r['loss_delta']:+.4f}  flip rate {r['flip_rate']:.3f}")
    for name, curve in exps.get("halves", {}).items():
        r = curve[-1]
        lines.append(f"{name} half {100 * r['ratio']:.0f}%: accuracy {relative(r)}  "
                     f"loss {r['loss_delta']:+.4f}  flip rate {r['flip_rate']:.3f}")
    for r in exps.get("term", []):
        lines.append(f"{r['condition']}: accuracy {relative(r)}  loss {r['loss_delta']:+.4f}  "
                     f"flip rate {r['flip_rate']:.3f}")
    return lines


SEG_COL = typer.Option(None, "--seg-col", help="Column with each title's words separated by spaces (Chinese: "
                       "'如何 在 网上 立案'): the word-boundary probe's reference instead of the tokenizer's pieces.")


# probe reads no grades: its grade flags are refused with a sentence, and not offered in its help
NO_GRADES = typer.Option(None, "--label-col", hidden=True)


def _title_words(data, pairs, seg_col, **read) -> list[str] | None:
    """The --seg-col column of the same rows: the file read again with that column as the title."""
    if not seg_col:
        return None
    if str(data).startswith("synthetic"):
        raise UserError(f"--seg-col {quoted(seg_col)}: synthetic data has no segmentation; pass a file or drop "
                        "--seg-col.")
    seg = read_data(data, title_col=seg_col, flags={"title_col": "--seg-col"}, **read)
    if seg.queries != pairs.queries:
        raise UserError(f"--seg-col {quoted(seg_col)}: {data} lacks it on some rows; give every row its title's words "
                        "separated by spaces, or drop --seg-col.")
    return seg.titles


def _run(model, data, out, settings, *, preset, query_col, title_col, label_col, label_map, limit, seed,
         overwrite, allow_pickle, seg_col=None, texts_only=False):
    """Under `accelerate launch` every process scans (the ablation forwards are split between them) and
    the main process alone draws bars and writes; result is None on the other processes. `texts_only`: read no
    gold (probe), so a file's grades need not fit the model and no baseline is measured."""
    from headcut.evaluate.ablation import process_state
    from headcut.evaluate.scan import scan_gold, scan_model
    from headcut.evaluate.scan_report import write_scan
    from headcut.batching import check_max_length
    from headcut_grader.files import atomic_dir, check_out_dir
    from headcut.models import load_model, outline

    state = process_state()
    check_out_dir(out, overwrite=overwrite, inputs=[model, data], flag="--out",
                  holds="importance.json/csv, figures and report.md/html")
    read = dict(preset=preset, query_col=query_col, label_col=label_col, label_map=label_map, limit=limit,
                require_labels=label_col is not None, seed=seed, texts_only=texts_only)
    if settings.max_length is not None:  # on the model's outline, before its weights and the pairs are read
        check_max_length(outline(model, flag="--model").model, settings.max_length, flag="--max-length")
    loaded = load_model(model, allow_pickle=allow_pickle, flag="--model")
    if not texts_only:  # the model's task and grades say how its gold reads; a column named by its flag must be there
        read.update(task=loaded.task, grades=loaded.grades, **scan_gold(settings, required=label_col is not None))
    pairs = read_data(data, title_col=title_col, **read)
    title_words = _title_words(data, pairs, seg_col, **read)
    if state.num_processes > 1:
        loaded.model.to(state.device)
    progress, close = stage_bars(len(pairs)) if state.is_main_process else (None, lambda: None)
    try:
        result = scan_model(loaded, pairs, settings, seed=seed, limit=limit, title_words=title_words,
                            progress=progress, names="flags")
    finally:
        close()
    if not state.is_main_process:
        return None
    with atomic_dir(out, overwrite=overwrite, inputs=[model, data], flag="--out") as tmp:
        write_scan(tmp, result.findings, model_info=result.model, data_info=result.data)
    return result.findings


def check_experiment_flags(ctx: typer.Context, chosen: tuple[str, ...]) -> None:
    """Refuse a flag that sets up only experiments --experiments does not run (scan.EXPERIMENT_SETTINGS), and
    --seg-col when no probe runs (the probes, or experiment 5's term-matching heads, read it)."""
    from headcut.evaluate.scan import EXPERIMENT_SETTINGS, check_experiment_settings

    check_experiment_settings({key: flags_set(ctx, [key])[0] for key in EXPERIMENT_SETTINGS if flags_set(ctx, [key])},
                              chosen, experiments="--experiments")
    if flags_set(ctx, ["seg_col"]) and ctx.params.get("probes") is False and "term" not in chosen:
        raise UserError(f"--seg-col is the word-boundary probe's reference, and --no-probes with --experiments "
                        f"{','.join(chosen) or 'none'} runs no probe, so it would be ignored; drop --seg-col or "
                        "--no-probes.")


@user_errors
def scan(
    ctx: typer.Context,
    model: str = typer.Option(..., "--model", "-m", help="Model folder or built-in name (minilm-l6)."),
    data: str = typer.Option(..., "--data", "-d", parser=file_to_read("--data"),
                             help="Pairs file (TSV/CSV/JSONL/JSON) or 'synthetic'."),
    out: path = folder_option(..., "--out", "-o", help="Folder for importance.json/csv, figures, report.md/html."),
    method: str = typer.Option("ablation,kl,gradient,fisher,entropy", "--method",
                               help="Comma list of ablation, kl, gradient, fisher, entropy. `headcut prune "
                                    "--scores` ranks heads by fisher when the file has it, else by the first "
                                    "(prune's --method picks another)."),
    experiments: str = typer.Option("all", "--experiments",
                                    help="all, none, or numbers 1-5: 1 random, 2 halves, 3 layers, 4 heads, 5 term."),
    probes: bool = typer.Option(True, "--probes/--no-probes", help="Probe what each head attends to."),
    limit: Opt[int] = number(1000, "--limit", help="Seeded random sample of this many pairs (0: all)", low=0),
    draws: int = argument_option("draws", "--draws", help="Random masks per ratio in experiments 1, 2 and 5"),
    k: int = argument_option("k", "--k", help="Term-matching heads masked in experiment 5"),
    bootstrap: int = argument_option("iters", "--bootstrap", help="Bootstrap resamples for the 95% CIs"),
    batch_size: int = BATCH_SIZE,
    max_length: Opt[int] = MAX_LENGTH,
    seed: int = SEED,
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, label_map: Opt[str] = LABEL_MAP, seg_col: Opt[str] = SEG_COL,
    overwrite: bool = OVERWRITE, allow_pickle: bool = ALLOW_PICKLE,
):
    """Score every attention head of MODEL on DATA (exact single-head ablation, KL, gradient, Fisher,
    attention entropy), run the study's masking experiments and the head probes. The exact ablation
    gives the naive per-head loop's scores to within 1e-6 (the bound the tests check) in a fraction of its
    time (benchmarks/scan_speed.py times both on your CPU).

    Example: headcut scan --model runs/teacher --data ../shared/data/homedepot/dev.tsv --out runs/scan
    """
    quiet_transformers()
    from headcut.evaluate.scan import ScanSettings, parse_experiments, parse_methods

    chosen = parse_experiments(experiments, name="--experiments")
    check_experiment_flags(ctx, chosen)
    settings = ScanSettings(methods=parse_methods(method, name="--method"), experiments=chosen, probes=probes,
                            batch_size=batch_size, max_length=max_length, draws=draws, k=k, iters=bootstrap, seed=seed)
    result = _run(model, data, out, settings, preset=preset, query_col=query_col, title_col=title_col,
                  label_col=label_col, label_map=label_map, limit=limit or None, seed=seed, overwrite=overwrite,
                  allow_pickle=allow_pickle, seg_col=seg_col)
    if result is None:  # not the main process of `accelerate launch`
        return
    for line in summary_lines(result):
        typer.echo(line)
    typer.echo(f"wrote {out}/importance.json, importance.csv, report.md, report.html")


@user_errors
def probe(
    model: str = typer.Option(..., "--model", "-m", help="Model folder or built-in name (minilm-l6)."),
    data: str = typer.Option(..., "--data", "-d", parser=file_to_read("--data"),
                             help="Pairs file (TSV/CSV/JSONL/JSON) or 'synthetic'; grades not needed."),
    out: path = folder_option(..., "--out", "-o", help="Folder for the probe report (importance.json holds entropy)."),
    limit: Opt[int] = number(500, "--limit", help="Seeded random sample of this many pairs (0: all)", low=0),
    batch_size: int = argument_option("batch_size", "--batch-size", help="Pairs per forward pass",
                                      default=PROBE_BATCH_SIZE),
    max_length: Opt[int] = MAX_LENGTH,
    seed: int = SEED,
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = NO_GRADES, label_map: Opt[str] = typer.Option(None, "--label-map", hidden=True),
    seg_col: Opt[str] = SEG_COL, overwrite: bool = OVERWRITE, allow_pickle: bool = ALLOW_PICKLE,
):
    """Probe what each head of MODEL does on DATA: previous/next-token, word-boundary F1, query<->title
    term matching, no-op mass on [CLS]/[SEP]; with a grid of attention maps. No grades needed.

    Example: headcut probe --model runs/teacher --data ../shared/data/homedepot/dev.tsv --out runs/probe
    """
    quiet_transformers()
    from headcut.evaluate.probes import PROBES, best_head, best_union, unmeasured
    from headcut.evaluate.scan import ScanSettings

    grade_flag = "--label-col" if label_col is not None else "--label-map" if label_map is not None else None
    if grade_flag:
        raise UserError(f"{grade_flag} says how to read grades, and probe reads no grades (it probes what heads "
                        f"attend to); drop {grade_flag}.")
    settings = ScanSettings(methods=("entropy",), experiments=(), probes=True, batch_size=batch_size,
                            max_length=max_length, seed=seed)
    result = _run(model, data, out, settings, preset=preset, query_col=query_col, title_col=title_col,
                  label_col=None, label_map=None, limit=limit or None, seed=seed, overwrite=overwrite,
                  allow_pickle=allow_pickle, seg_col=seg_col, texts_only=True)
    if result is None:  # not the main process of `accelerate launch`
        return
    probes = result["probes"]
    for name in PROBES:
        if name in probes:
            best = best_head(probes, name)
            typer.echo(f"{name:<12} n/a: {unmeasured(name, probes)}" if best is None else
                       f"{name:<12} best L{best[0]}H{best[1]}  {best[2]:.3f}")
    union = best_union(probes)
    if union:
        typer.echo(f"boundary union {' '.join(f'L{l}H{h}' for l, h in union['heads'])}  F1 {union['f1']:.3f}")
    elif "boundary_union" in probes:
        typer.echo(f"boundary union n/a: {unmeasured('boundary_union')}")
    typer.echo(f"wrote {out}/report.md, report.html")
