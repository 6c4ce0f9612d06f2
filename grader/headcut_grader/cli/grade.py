"""`headcut grade`: grade a file of pairs with an exported grader (no torch needed)."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import typer

from headcut_grader.cli.common import (LABEL_COL, OVERWRITE, PRESET, QUERY_COL, TITLE_COL, Opt, number, progress_bar,
                                user_errors)


def grade_rows(pairs, result, grades) -> list[dict]:
    rows = []
    for i, row in enumerate(result.rows()):
        out = {"query": pairs.queries[i], "title": pairs.titles[i]}
        if pairs.labels is not None:
            out["true_grade"] = pairs.grades[pairs.labels[i]]
        out["grade"] = row["grade"]
        out["expected_grade"] = round(row["expected_grade"], 4)
        out.update({f"p{g}": round(p, 4) for g, p in zip(grades, row["probabilities"])})
        rows.append(out)
    return rows


def format_rows(rows: list[dict], fmt: str) -> str:
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), delimiter="\t" if fmt == "tsv" else ",",
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


@user_errors
def grade(
    grader_dir: Path = typer.Argument(..., help="Folder written by `headcut export`."),
    pairs_file: Path = typer.Argument(..., help="Pairs to grade: TSV, CSV or JSON lines with query and title columns."),
    out: Path = typer.Option(..., "--out", "-o", help="Where to write grades (same format as the input unless the suffix says)."),
    threads: int = number(2, "--threads", help="ONNX Runtime threads", low=1),
    batch_size: int = number(32, "--batch-size", help="Pairs per forward pass", low=1),
    preset: Opt[str] = PRESET, query_col: Opt[str] = QUERY_COL, title_col: Opt[str] = TITLE_COL,
    label_col: Opt[str] = LABEL_COL, overwrite: bool = OVERWRITE,
):
    """Grade every pair in PAIRS_FILE: grade, expected grade and each grade's probability per row.

    Example: headcut grade runs/grader ../shared/data/homedepot/dev.tsv --out dev-grades.tsv
    """
    from headcut_grader.data import guess_format, read_pairs
    from headcut_grader.files import check_out_file, write_text
    from headcut_grader.grader import Grader

    check_out_file(out, overwrite=overwrite, inputs=[pairs_file, grader_dir], example="grades.tsv")
    fmt = guess_format(out) if out.suffix else guess_format(pairs_file)  # an unknown --out suffix fails before work
    if fmt == "json":
        fmt = "jsonl"
    pairs = read_pairs(pairs_file, preset=preset, query_col=query_col, title_col=title_col, label_col=label_col,
                       require_labels=False)
    grader = Grader(grader_dir, threads=threads, batch_size=batch_size)
    with progress_bar(len(pairs), "grading") as bar:
        result = grader.grade(pairs, progress=bar.update)
    write_text(out, format_rows(grade_rows(pairs, result, grader.record["grades"]), fmt))
    counts = {g: int((result.grades == g).sum()) for g in grader.record["grades"]}
    typer.echo(f"graded {len(pairs)} pairs -> {out} (grades: {', '.join(f'{g}: {n}' for g, n in counts.items())})")
