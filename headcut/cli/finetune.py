"""`headcut finetune`: make a teacher grader from a recipe."""
from __future__ import annotations

import typer

from headcut.cli.common import (OVERWRITE, Opt, file_to_read, folder_option, main_process, metrics_line,
                                on_interrupt, path, quiet_transformers, training_left, training_progress,
                                user_errors)
from headcut_grader.files import RECIPE_FILE


@user_errors
def finetune(
    recipe: str = typer.Argument("finetune/minilm_synthetic_cpu", parser=file_to_read("RECIPE", what=RECIPE_FILE),
                                 help="Recipe YAML path or built-in name (see recipes/finetune/)."),
    out: path = folder_option(..., "--out", "-o", help="Artifact folder to write (checkpoints go to OUT.partial/)."),
    train: Opt[str] = typer.Option(None, "--train", parser=file_to_read("--train"),
                                   help="Training pairs file (sets train_data)."),
    dev: Opt[str] = typer.Option(None, "--dev", parser=file_to_read("--dev"), help="Dev pairs file (sets dev_data)."),
    set_: list[str] = typer.Option([], "--set",
                                   help="Override a recipe key: --set epochs=3 (repeatable; each key once)."),
    overwrite: bool = OVERWRITE,
):
    """Fine-tune a grader (the teacher) as RECIPE says; resumes after an interruption when rerun.

    Runs on CPU as is, and on one or several GPUs with `accelerate launch -m headcut finetune ...`.

    Example: headcut finetune minilm_homedepot_cpu --train ../shared/data/homedepot/train.tsv
    --dev ../shared/data/homedepot/dev.tsv --out runs/teacher
    """
    quiet_transformers()
    from headcut.finetune import FinetuneRecipe, finetune as run
    from headcut.recipes import command_line_words, load_recipe, set_origins

    flags = {key: (flag, value) for flag, key, value in (("--train", "train_data", train), ("--dev", "dev_data", dev))
             if value}  # named by these flags, as typed, in a refusal
    # a check's refusal (finetune.check_dev_apart, check_dev_gold): --train, --dev and --set KEY=VALUE as typed, other
    # keys changed by --set
    typed = {**set_origins(list(set_)), **{key: f"{flag} {text}" for key, (flag, text) in flags.items()}}
    with command_line_words(typed):
        rec = load_recipe(FinetuneRecipe, recipe, overrides=list(set_), kind="finetune", flags=flags,
                          flag="")  # RECIPE, said by its value; an --out that holds it is finetune's refusal
        bar, progress = training_progress("training")
        with on_interrupt(training_left(out)), bar:
            result = run(rec, out, overwrite=overwrite, progress=progress, names="flags")
    if not main_process():
        return
    if not result["finished"]:
        typer.echo(f"stopped early; rerun the same command to resume from {result['work_dir']}")
        return
    m = result["dev_metrics"]
    typer.echo(f"best dev (n={m['n']}): {metrics_line(m)}")
    typer.echo(f"throughput {result['examples_per_second']:.1f} examples/s "
               f"(CPU time / wall {result['cpu_per_wall']:.2f})")
    typer.echo(f"wrote {result['out']}")
