"""Grading on a Ray cluster (`pip install 'headcut-grader[ray]'`): Ray Data reads the Parquet/CSV dataset, spreads
it over actors that each hold one Grader, and writes the graded rows where you say.

    import ray
    from headcut_grader.ray_data import grade_dataset

    ray.init()  # or ray.init("ray://head:10001") for a cluster
    graded = grade_dataset(ray.data.read_parquet("s3://bucket/pairs/"), "runs/grader", concurrency=8)
    graded.write_parquet("s3://bucket/grades/")

The grader folder must be readable at the same path on every node (a shared file system or a copy).
"""
from __future__ import annotations

import numpy as np

from headcut_grader.errors import UserError, quoted
from headcut_grader.files import as_path
from headcut_grader.grader import Grader
from headcut_grader.ranges import BATCH, THREADS, Range, checked_number


class GradeBatch:
    """A Ray Data callable class: one Grader per actor, loaded once, grading one batch of rows per call."""

    def __init__(self, grader_dir: str, *, threads: int = 1, batch_size: int = 32, query_col: str = "query",
                 title_col: str = "title", backend: str = "auto"):
        self.grader = Grader(grader_dir, threads=threads, batch_size=batch_size, backend=backend)
        self.query_col, self.title_col = query_col, title_col
        self.written = output_columns(self.grader)  # once per actor (was: once per batch)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        check_columns(batch, self.written, query_col=self.query_col, title_col=self.title_col)
        pairs = list(zip(batch[self.query_col].tolist(), batch[self.title_col].tolist()))
        result = self.grader.grade(pairs)
        columns = result.columns(digits=None)  # full precision: the caller rounds, if anyone does
        return dict(batch) | {name: np.asarray(values) for name, values in columns.items()}


def output_columns(grader: Grader) -> list[str]:
    """The columns `grader` adds to each row (grade, expected_grade, p<grade>...; or score): what it gives no pairs."""
    return list(grader.grade([]).columns())


def check_columns(columns, written: list[str], *, query_col: str, title_col: str) -> None:
    """The dataset's `columns` hold the queries and titles, and none that the grader's output columns (`written`,
    output_columns) would replace: a gold grade column named grade (the Home Depot files' name) was overwritten by
    the predicted grade, the gold lost without a word."""
    for name, col, holds in (("query_col", query_col, "queries"), ("title_col", title_col, "titles")):
        if col not in columns:  # else KeyError from every actor, naming neither the argument nor the columns
            raise UserError(f"grade_dataset {name} {quoted(col)} is not a column of the dataset (columns: "
                            f"{', '.join(map(quoted, columns))}); pass {name}=NAME of the {holds}' column.")
    taken = [name for name in written if name in columns]
    if taken:
        raise UserError(f"grade_dataset: the dataset already has column {quoted(taken[0])}, which the grader's output "
                        f"({', '.join(written)}) would replace; rename it first, e.g. "
                        f"dataset.rename_columns({{{taken[0]!r}: 'true_{taken[0]}'}}).")


def grade_dataset(dataset, grader_dir, *, concurrency: int = 2, threads: int = 1, batch_size: int = 32,
                  rows_per_call: int = 4096, query_col: str = "query", title_col: str = "title", backend: str = "auto"):
    """`dataset` (a ray.data.Dataset with query and title columns) plus grade, expected_grade and p<grade> columns,
    graded by `concurrency` actors of `threads` runtime threads each. Lazy, like every Ray Data step. `backend`:
    onnxruntime, openvino or auto (resolved here, on the driver's CPU, so every actor runs the same graph)."""
    # Ray pickles these to every actor and reads some itself: plain ints, whatever integer type was passed
    concurrency, threads, batch_size, rows_per_call = (
        checked_number(value, f"grade_dataset {name}", valid, whole=True) for name, value, valid in
        (("concurrency", concurrency, Range(1)), ("threads", threads, THREADS), ("batch_size", batch_size, BATCH),
         ("rows_per_call", rows_per_call, Range(1))))
    as_path(grader_dir, "grade_dataset grader_dir", what="a grader folder's path")
    grader = Grader(grader_dir, threads=threads, backend=backend)  # a bad folder fails here, once
    schema = dataset.schema(fetch_if_missing=False)  # known without reading the data (Parquet, items), or None
    if schema is not None:  # else each actor refuses its first batch, inside Ray's traceback
        check_columns(schema.names, output_columns(grader), query_col=query_col, title_col=title_col)
    backend = grader.backend.name
    return dataset.map_batches(
        GradeBatch, fn_constructor_kwargs={"grader_dir": str(grader_dir), "threads": threads, "batch_size": batch_size,
                                           "query_col": query_col, "title_col": title_col, "backend": backend},
        batch_size=rows_per_call, batch_format="numpy", concurrency=concurrency, num_cpus=threads)
