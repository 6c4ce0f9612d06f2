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
