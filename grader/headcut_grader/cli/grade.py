"""`headcut grade`: grade a file of pairs with an exported grader (no torch needed), in chunks, resumably."""
from __future__ import annotations

import os
from pathlib import Path

import typer

from headcut_grader.errors import counted
from headcut_grader.optional import broken_said
from headcut_grader.ranges import THREADS
from headcut_grader.cli.common import (BACKEND, LABEL_COL, OVERWRITE, PRESET, QUERY_COL, TITLE_COL, Opt, field_option,
                                       file_option, file_to_read, number_in, on_interrupt, path, progress_bar,
                                       user_errors, written_whole)
from headcut_grader.grade_file import GradeSettings


@user_errors
def grade(
    grader_dir: Path = typer.Argument(..., help="Folder written by `headcut export`."),
    pairs_file: path = typer.Argument(..., parser=file_to_read("PAIRS_FILE", path),
                                      help="Pairs to grade: TSV, CSV or JSON lines with query and title columns."),
    out: Path = file_option(..., "--out", "-o", example="grades.tsv",
                            help="Where to write grades (same format as the input unless the suffix says: .tsv, .csv "
                                 "or .jsonl; JSON input is written as JSON lines)."),
    workers: int = field_option(GradeSettings, "workers", "--workers", help="Grading processes, one grader each; "
                                "about one per 1-2 cores"),
    threads: Opt[int] = number_in(THREADS, None, "--threads", help="Runtime threads per worker (default: cores / "
                                  "workers)", kind=int),
    backend: str = BACKEND,
    batch_size: int = field_option(GradeSettings, "batch_size", "--batch-size", help="Pairs per forward pass"),
    chunk_rows: int = field_option(GradeSettings, "chunk_rows", "--chunk-rows", help="Pairs read, graded and "
                                   "written at a time; memory grows with this, never with the file"),
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run of this command after its last "
                                "finished chunk (the output equals an uninterrupted run's)."),
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, overwrite: bool = OVERWRITE,
):
    """Grade every pair in PAIRS_FILE: grade, expected grade and each grade's probability per row (a one-score
    grader: its score), after the input's gold grade or score (true_grade / true_score) where it has one.

    Example: headcut grade runs/grader ../shared/data/homedepot/dev.tsv --out dev-grades.tsv --workers 2
    """
    written = written_whole(out)
    with on_interrupt(lambda: written() or _left(out)):  # from the first import on: a Ctrl-C at any moment is one line
        from headcut_grader.grade_file import grade_file

        settings = GradeSettings(chunk_rows=chunk_rows, batch_size=batch_size, preset=preset, query_col=query_col,
                                 title_col=title_col, label_col=label_col, workers=workers, backend=backend,
                                 threads=threads or max(1, (os.cpu_count() or 1) // workers))
        with progress_bar(None, "grading") as bar:
            summary = grade_file(grader_dir, pairs_file, out, settings=settings, resume=resume,
                                 overwrite=overwrite, progress=bar.update, names="flags")
    resumed = f", {summary.resumed_rows:,} of them by the interrupted run" if summary.resumed_rows else ""
    counts = f"grades: {', '.join(f'{g}: {n:,}' for g, n in summary.counts.items())}; " if summary.counts else ""
    typer.echo(f"graded {counted(summary.rows, 'pair')}{resumed} -> {out} ({counts}{summary.backend})")
    for name, why in summary.broken_runtimes.items():  # auto graded with another graph: say why, and the fix
        typer.echo(f"note: the grader's {name} graph was skipped: {broken_said(name, why)}.",
                   err=True)


def _left(out: Path) -> str:
    """What an interrupted grade left, for on_interrupt: OUT appears only whole, in the last step."""
    from headcut_grader.grade_file import kept_rows, partial_paths

    rows = kept_rows(out)
    if rows is None:
        return f"{out} was not written and no graded rows were kept; rerun the same command to start again."
    return (f"{out} was not written; {partial_paths(out)[0].name} keeps {counted(rows, 'graded row')}; rerun the "
            "same command with --resume to continue after them.")
