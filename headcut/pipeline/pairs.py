"""Which pairs a run reports on, and which it chooses with: never the same queries.

A data set without a test split of its own (Home Depot: test = dev) would have the run report on pairs
that also chose things: the teacher's and every student's best checkpoint (by dev Spearman) and the INT8
recipe of every grader. So when the test file is a file some model of the run picked its checkpoint on,
the report leaves out every pair whose query is among those selection pairs' queries (pairs of one query
are alike), and the export gate judges INT8 recipes on the pairs of those queries instead. A test file
that chose nothing is reported on whole, and the gate then reads the dev file (or the training pairs).
"""
from __future__ import annotations

from pathlib import Path

from headcut.data_spec import read_spec
from headcut_grader.data import DEFAULT_GRADES, Pairs, read_pairs
from headcut.synthetic import is_synthetic
from headcut.pipeline.recipe import DataSection, PipelineRecipe, planned_subs


def read(spec: str, *, data: DataSection, rows: int | None, seed: int, task: str = "grades",
         grades: tuple = DEFAULT_GRADES, **gold) -> Pairs:
    """A seeded sample of `rows` pairs of a file, or a synthetic draw of that many; `task` score reads the scores,
    grades read against the teacher's `grades` (its labels index them); `gold`: read_pairs' require_labels and
    wants_gold, where the stage decides (prune.inputs.pool_gold; default: gold required)."""
    return read_spec(spec, rows=rows, seed=seed, task=task, grades=grades, **gold, **data.file_options())


def selections(recipe: PipelineRecipe, teacher_meta: dict | None) -> list[tuple[str | None, object]]:
    """(dev spec, how to read the pairs it chose a checkpoint on) of every model of this run that picked one: the
    teacher (trained here, or as an existing grader's headcut.json records) and every student."""
    from headcut.finetune import recorded_recipe, selection_pairs

    subs = planned_subs(recipe)
    found = [(r.dev_data, lambda r=r: selection_pairs(r)) for r in subs.values() if r is not None]
    recorded = recorded_recipe(teacher_meta, where=f"{recipe.teacher.path}/headcut.json") \
        if subs["teacher"] is None and teacher_meta else None
    if recorded is not None:
        found.append((recorded.dev_data, lambda: selection_pairs(recorded)))
    return found


def same_spec(a: str | None, b: str | None) -> bool:
    """The same pairs: the same spec, or two paths of one file."""
    if not a or not b:
        return False
    return a == b or (not is_synthetic(a) and not is_synthetic(b) and Path(a).resolve() == Path(b).resolve())


def selection_queries(recipe: PipelineRecipe, teacher_meta: dict | None) -> set[str]:
    """Queries of the test file's pairs that chose a checkpoint in this run (empty when none did)."""
    return queries_that_chose(recipe.data.test, selections(recipe, teacher_meta))


def queries_that_chose(test: str | None, found: list[tuple[str | None, object]]) -> set[str]:
    """Queries of the pairs of the file `test` among `found` ((dev spec, how to read the pairs it chose on))."""
    queries: set[str] = set()
    for spec, pairs in found:
        picked = pairs() if same_spec(spec, test) else None
        if picked is not None:
            queries.update(picked.queries)
    return queries


def _split(recipe: PipelineRecipe, chosen: set[str], task: str, grades: tuple) -> tuple[Pairs, Pairs]:
    """The test file's pairs whose query chose nothing, and those whose query did."""
    pool = read_pairs(recipe.data.test, task=task, grades=grades, **recipe.data.file_options())
    inside = [i for i, q in enumerate(pool.queries) if q in chosen]
    outside = [i for i, q in enumerate(pool.queries) if q not in chosen]
    return pool.subset(outside), pool.subset(inside)


def report_pairs(recipe: PipelineRecipe, chosen: set[str], rows: int | None, *, task: str = "grades",
                 grades: tuple = DEFAULT_GRADES) -> Pairs:
    """`rows` seeded pairs of the test file that share no query with `chosen` (selection_queries)."""
    data = recipe.data
    if not chosen:
        return read(data.test, data=data, rows=rows, seed=data.seed, task=task, grades=grades)
    return _split(recipe, chosen, task, grades)[0].sample(rows, seed=data.seed)


def choice_pairs(recipe: PipelineRecipe, chosen: set[str], rows: int | None, *, task: str = "grades",
                 grades: tuple = DEFAULT_GRADES) -> Pairs:
    """`rows` seeded pairs to choose an INT8 recipe on, none of them a report pair's query: the pairs of
    the `chosen` queries, else the dev file (when it is not the test file), else the training pairs."""
    data = recipe.data
    if chosen:
        return _split(recipe, chosen, task, grades)[1].sample(rows, seed=data.seed)
    spec = data.dev if data.dev and not same_spec(data.dev, data.test) else data.train
    return read(spec, data=data, rows=rows, seed=data.seed + 1, task=task, grades=grades)
