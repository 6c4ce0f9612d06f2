"""`headcut run`: the whole job (teacher, scan, prune, distill, export, bench) as one resumable pipeline."""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from headcut.cli.common import (Opt, file_to_read, folder_option, on_interrupt, path, quiet_transformers,
                                user_errors)
from headcut_grader.files import RECIPE_FILE

STATE_WIDTH = 8


def stage_lines(width: int):
    """A progress(event) callback: one line per stage with its state, and a bar inside it while it runs.
    Returns (callback, close)."""
    from tqdm import tqdm

    bars: dict = {}

    def label(name, state):
        return f"{name:<{width}} {state:<{STATE_WIDTH}}"

    def progress(event):
        name, state = event["stage"], event["state"]
        bar = bars.get(name)
        if state == "skipped":
            tqdm.write(label(name, "skipped") + " (settings and inputs unchanged)", file=sys.stderr)
            return
        if "reason" in event:
            tqdm.write(f"{name}: rerunning, {event['reason']}", file=sys.stderr)
        if bar is None:
            bar = bars[name] = tqdm(desc=label(name, "running"), total=None, file=sys.stderr, leave=True,
                                    dynamic_ncols=True, disable=None,
                                    bar_format="{desc} |{bar:30}| {n_fmt}/{total_fmt}{postfix}")
            if bar.disable:  # not a terminal (a log file): plain state lines instead of a redrawn bar
                typer.echo(label(name, "running"), err=True)
        if state == "running" and "done" in event:
            bar.total = event["total"]
            bar.n = event["done"]
            bar.set_postfix_str(event["what"], refresh=True)
        elif state in ("done", "failed"):
            seconds = f" in {event['seconds']:.0f}s" if "seconds" in event else ""
            bar.set_description_str(label(name, state))
            bar.set_postfix_str(seconds.strip(), refresh=False)
            if bar.total is not None:
                bar.n = bar.total if state == "done" else bar.n
            bar.close()
            if bar.disable:
                typer.echo(label(name, state) + seconds, err=True)

    def close():
        for bar in bars.values():
            bar.close()

    return progress, close


@user_errors
def run(
    recipe: str = typer.Argument(..., parser=file_to_read("RECIPE", what=RECIPE_FILE),
                                 help="Pipeline recipe: a YAML path or built-in name (see recipes/run/)."),
    set_: list[str] = typer.Option([], "--set", help="Override a key: --set teacher.epochs=1, --set data.train=FILE, "
                                   "--set distill.bottom3.epochs=2 (repeatable; each key once)."),
    out: Opt[path] = folder_option(None, "--out", "-o", help="Run folder (default: runs/<recipe name>); rerunning into "
                                  "it skips unchanged stages and resumes an interrupted one."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Run every stage again from scratch (also: use a "
                                   "non-empty OUT that holds no headcut run)."),
):
    """Run a pipeline recipe: teacher (fine-tune or an existing grader), scan, prune, distil students, export
    ONNX graders and benchmark them; write report.md and a self-contained report.html.

    Each stage writes its own folder under OUT. A rerun skips every stage whose settings and inputs are
    unchanged, resumes one that was interrupted, and reruns a changed stage and what depends on it.

    Examples: headcut run quickstart --out runs/demo (offline, synthetic pairs)
              headcut run homedepot --set teacher.path=runs/teacher --set data.train=../shared/data/homedepot/train.tsv
              --set data.dev=../shared/data/homedepot/dev.tsv --set data.test=../shared/data/homedepot/dev.tsv
    """
    quiet_transformers()
    from headcut.pipeline import load_pipeline, plan, run_pipeline

    rec = load_pipeline(recipe, overrides=list(set_), flag="")  # RECIPE, said by its value
    out = out or Path("runs") / Path(rec.source).stem  # the file load_pipeline found
    progress, close = stage_lines(max(len(s.name) for s in plan(rec)))
    with on_interrupt(lambda: f"rerun the same command to resume ({out})"):
        try:
            result = run_pipeline(rec, out, overwrite=overwrite, progress=progress, names="flags")
        finally:
            close()
    text = (result.out / "report.md").read_text()
    table = text.split("## Every grader", 1)[1].split("![", 1)[0].strip()
    typer.echo(table)
    deploy = result.report["deploy"]
    typer.echo(f"deploy: {deploy['name']} ({result.out / deploy['grader']}, {deploy['speedup']:.2f}x)" if deploy else
               "deploy: no grader is within the recipe's quality floor (see report.md)")
    typer.echo(f"wrote {result.out}/report.html, report.md")
