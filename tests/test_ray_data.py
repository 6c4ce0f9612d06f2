"""The same grader over a Ray Data dataset on a local Ray instance that the test starts (2 actors)."""
from __future__ import annotations

import numpy as np
import pytest

from headcut.synthetic import synthetic_pairs
from headcut_grader.grader import Grader
from test_export import make_tiny_grader

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'headcut-grader[ray]')")


@pytest.mark.slow
def test_ray_data_grades_like_the_grader(tmp_path):
    from headcut_grader.ray_data import grade_dataset

    folder = make_tiny_grader(tmp_path)[0]
    pairs = synthetic_pairs(2000, seed=6)
    ray.init(num_cpus=3, include_dashboard=False)  # 2 actors + 1 CPU for the read tasks
    try:
        dataset = ray.data.from_items([{"query": q, "title": t} for q, t in zip(pairs.queries, pairs.titles)])
        rows = grade_dataset(dataset, folder, concurrency=2, rows_per_call=256).to_pandas()
    finally:
        ray.shutdown()
    expected = Grader(folder).grade(pairs)
    # Ray may reorder blocks: match rows by their (query, title, position-free) content
    got = {(q, t): (g, e) for q, t, g, e in zip(rows["query"], rows["title"], rows["grade"], rows["expected_grade"])}
    want = {(q, t): (g, e) for q, t, g, e in zip(pairs.queries, pairs.titles, expected.grades, expected.expected)}
    assert len(rows) == len(pairs) and got.keys() == want.keys()
    assert all(got[k][0] == want[k][0] and np.isclose(got[k][1], want[k][1], atol=1e-5) for k in want)


def test_a_dataset_column_the_output_would_replace_is_refused_before_any_batch(tmp_path):
    """Was: a dataset with a gold `grade` column (the Home Depot files' name) came back with it overwritten by the
    predicted grade, the gold lost without a word; now refused on the driver where the schema is known, and by each
    actor's first batch where it is not."""
    from types import SimpleNamespace

    from headcut_grader.errors import UserError
    from headcut_grader.ray_data import GradeBatch, grade_dataset

    folder = make_tiny_grader(tmp_path)[0]
    said = ("grade_dataset: the dataset already has column 'grade', which the grader's output (grade, expected_grade, "
            "p1, p2, p3, p4, p5) would replace; rename it first, e.g. dataset.rename_columns({'grade': 'true_grade'}).")
    batch = {"query": np.array(["drill"]), "title": np.array(["cordless drill"]), "grade": np.array([4])}
    with pytest.raises(UserError) as caught:
        GradeBatch(str(folder))(batch)
    assert str(caught.value) == said
    schema = SimpleNamespace(names=list(batch))
    dataset = SimpleNamespace(schema=lambda fetch_if_missing: schema if not fetch_if_missing else None,
                              map_batches=lambda *a, **k: pytest.fail("graded a dataset whose gold it would replace"))
    with pytest.raises(UserError) as caught:
        grade_dataset(dataset, folder)
    assert str(caught.value) == said
    batch["true_grade"] = batch.pop("grade")
    kept = GradeBatch(str(folder))(batch)
    assert kept["true_grade"].tolist() == [4] and kept["grade"].shape == (1,)
