"""`headcut distill`: train a student against its teacher from a recipe; `--tune N` searches the recipe."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from headcut.cli.common import (OVERWRITE, Opt, file_to_read, folder_option, main_process, number_in,
                                on_interrupt, path, quiet_transformers, training_left, training_progress, user_errors)
from headcut.distill_arguments import TRIALS
from headcut_grader.files import RECIPE_FILE


def format_result(metrics: dict) -> str:
    """The dev table: grades metrics, or ranking metrics for a one-score student (its paired CIs are by query)."""
    from headcut.evaluate.tasks import shown, shown_ci

    diff = metrics["after_minus_teacher"]
    score = "pair_order" in diff  # a one-score student: agreement by within-query order
    lines = [f"{'dev (n=' + str(metrics['after']['n']) + ')':<16} {'teacher':>8} {'before':>8} {'after':>8}   "
             "after - teacher [95% paired CI]"]
    names = ("spearman", "pearson", "ndcg@10", "mrr", "pair_accuracy", "loss") if score else \
        ("accuracy", "macro_f1", "spearman", "loss")
    for name in names:
        lines.append(f"{name:<16} {shown(metrics['teacher'][name]):>8} {shown(metrics['before'][name]):>8} "
                     f"{shown(metrics['after'][name]):>8}   {shown_ci(diff[name])}")
    if score:
        for name, what in (("pair_order", "within-query title pairs ordered as the teacher orders them"),
                           ("top1", "queries whose top title stays the teacher's")):
            lines.append(f"{name:<16} {'':>8} {'':>8} {shown(diff[name]['value']):>8}   ({what})")
        return "\n".join(lines)
    a = diff["agreement"]
    lines.append(f"{'agreement':<16} {'':>8} {'':>8} {a['value']:>8.4f}   (same grade as the teacher)")
    return "\n".join(lines)


def format_speed(speed: dict) -> str:
    parts = [f"batch {r['batch_size']}: {r['ms_before']:.1f} -> {r['ms_after']:.1f} ms ({r['speedup']:.2f}x)"
             for r in speed.get("latency", [])]
    return (f"speed at {speed['seq_len']} tokens: ideal {speed['ideal_speedup']:.2f}x (FLOPs); measured "
            + ", ".join(parts))


@user_errors
def distill(
    recipe: str = typer.Argument(..., parser=file_to_read("RECIPE", what=RECIPE_FILE),
                                 help="Recipe YAML path or built-in name (see recipes/distill/)."),
    out: Opt[path] = folder_option(None, "--out", "-o", help="Student artifact folder (default: runs/<recipe name>); "
                                  "checkpoints go to OUT.partial/. With --tune: the study folder."),
    set_: list[str] = typer.Option([], "--set", help="Override a recipe key: --set temperature=3 (repeatable; each "
                                   "key once)."),
    tune: int = number_in(dataclasses.replace(TRIALS, low=0), 0, "--tune", help="Search the recipe's tune_fields "
                          "with optuna for N trials (resumable: rerun to continue; 0 = train once)"),
    overwrite: bool = OVERWRITE,
):
    """Distil a student (bottom-k layers, a pruned artifact, or a smaller config) from its teacher.

    Rerun the same command after an interruption to resume. Runs on CPU as is, and on one or several
    GPUs with `accelerate launch -m headcut distill ...`.

    Example: headcut distill minilm_bottom3_cpu --set train_data=../shared/data/homedepot/train.tsv
    --set dev_data=../shared/data/homedepot/dev.tsv --out runs/bottom3
    """
    quiet_transformers()
    from headcut.recipes import command_line_words, set_origins

    # a check's refusal (finetune.check_dev_gold): led by a --set as typed, its other keys changed by --set
    with command_line_words(set_origins(list(set_))):
        _distill(recipe, out, set_, tune, overwrite)


def _distill(recipe: str, out: Path | None, set_: list[str], tune: int, overwrite: bool) -> None:
    from headcut.distill import DistillRecipe
    from headcut.recipes import load_recipe, read_from

    rec = load_recipe(DistillRecipe, recipe, overrides=list(set_), kind="distill", flag="")  # RECIPE, by its value
    _check_search_asked(set_, tune)
    # an --out that holds the recipe file is distill's and tune's refusal (input_paths)
    out = out or Path("runs") / (read_from(rec).stem + ("-tune" if tune else ""))
    bar, progress = training_progress("distilling")
    if tune:
        from headcut.distill.tune import check_not_searched, check_searchable, tune as search
        from headcut.recipes import set_origins

        given = set_origins(set_)
        searched = given.get("tune_fields") or str(read_from(rec))
        check_searchable(rec, searched, names="flags")
        check_not_searched(rec, given)

        def on_trial(t):
            params = "  ".join(f"{k}={v:.4g}" for k, v in t["params"].items())
            bar.write(f"trial {t['number']}: {rec.select_metric} {t['value']:.4f}  {params}")

        with on_interrupt(lambda: _search_left(out)), bar:
            summary = search(rec, out, trials=tune, overwrite=overwrite, progress=progress, on_trial=on_trial,
                             names="flags")
        best = summary["best"]
        params = "  ".join(f"{k}={v:.4g}" for k, v in best["params"].items())
        typer.echo(f"best of {len(summary['trials'])} trials: {summary['metric']} {best['value']:.4f}  {params}")
        typer.echo(f"best student: {best['artifact']}\nwrote {out / 'tune.json'}")
        return
    from headcut.distill import distill as run

    with on_interrupt(training_left(out)), bar:
        result = run(rec, out, overwrite=overwrite, progress=progress, names="flags")
    if not main_process():
        return
    t = result.training
    if not result.finished:
        typer.echo(f"stopped early; rerun the same command to resume from {result.work_dir}")
        return
    typer.echo(format_result(result.metrics))
    typer.echo(f"throughput {t['examples_per_second']:.1f} examples/s ({t['examples_per_cpu_second']:.1f} per "
               f"CPU-second) over {t['steps']} steps (best at step {t['best_step']}); {_teacher_line(t)}")
    if result.speed:
        typer.echo(format_speed(result.speed))
    typer.echo(f"wrote {result.out}")


def _check_search_asked(set_: list[str], tune: int) -> None:
    """--set tune_fields without --tune would be ignored (one training, no search), as a --set of a field the search
    draws would be with it (check_not_searched); a recipe file's own tune_fields is kept for a later --tune."""
    from headcut.recipes import set_origins
    from headcut_grader.errors import UserError

    given = set_origins(set_).get("tune_fields")
    if given and not tune:
        raise UserError(f"{given} says what --tune searches, and no --tune is given, so it would be ignored; pass "
                        "--tune N to search, or drop that --set.")


def _search_left(out: Path) -> str | None:
    """What an interrupted --tune search left in `out`, for on_interrupt (tune.py: how a rerun continues it)."""
    from headcut.distill.tune import STUDY_FILE

    if not main_process():
        return None
    if not (out / STUDY_FILE).exists():
        return "the search had not started; rerun the same command to start it."
    return (f"{out / STUDY_FILE} keeps the finished trials; rerun the same command to continue the search (the "
            "interrupted trial runs again with the same values, resuming after its last checkpoint).")


CACHE_WORDS = {"hit": "read from headcut's cache", "written": "computed and cached", "off": "not needed",
               "online": "from the teacher's pass in every step"}


def _teacher_line(training: dict) -> str:
    """How the teacher's logits were had: computed and cached, read back, or from a teacher pass in every step."""
    return (f"teacher logits: {CACHE_WORDS[training['teacher_cache']]} ({training['teacher_seconds']:.1f}s before "
            "training)")
