"""Pairs named by a data spec, the one way the toolkit reads them: `synthetic` or `synthetic:SEED` (a drawn
set), or a file, sampled to `rows` with `seed`. A one-score task turns drawn grades into scores."""
from __future__ import annotations

from headcut_grader.data import Pairs, read_pairs
from headcut.synthetic import synthetic_spec


def read_spec(spec: str, *, rows: int | None = None, seed: int = 0, task: str = "grades", **options) -> Pairs:
    """The pairs `spec` names; `options` go to `read_pairs` for a file (preset, columns, grades, ...)."""
    synthetic = synthetic_spec(spec, rows)
    if synthetic is not None:
        return as_scores(synthetic) if task == "score" else synthetic
    return read_pairs(spec, task=task, **options).sample(rows, seed=seed)


def as_scores(pairs: Pairs) -> Pairs:
    """Graded pairs as score pairs, the grade as the score (synthetic data for one-score models)."""
    scores = [float(pairs.grades[label]) for label in pairs.label_array()]
    return Pairs(pairs.queries, pairs.titles, None, pairs.grades, pairs.source, scores=scores)
