"""A run whose test file is also its dev file reports on no query that chose a checkpoint, and chooses its
INT8 recipes on those queries' pairs only; a test file that chose nothing is reported on whole."""
from __future__ import annotations

import json

import pytest

from headcut.synthetic import synthetic_pairs
from headcut.models import META_FILE
from headcut.pipeline import load_pipeline
from headcut.pipeline.pairs import choice_pairs, read, report_pairs, selection_queries
from headcut.pipeline.recipe import DataSection
from tests.conftest import renamed_columns_file


def write_tsv(path, pairs):
    lines = ["query\ttitle\tgrade\tscore"]
    lines += [f"{q}\t{t}\t{y + 1}\t{1 + y / 2}" for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels)]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture()
def files(tmp_path):
    dev = write_tsv(tmp_path / "dev.tsv", synthetic_pairs(900, seed=5))
    other = write_tsv(tmp_path / "test.tsv", synthetic_pairs(400, seed=6))
    teacher = tmp_path / "teacher"
    teacher.mkdir()  # only its recorded recipe is read here
    (teacher / META_FILE).write_text(json.dumps({"recipe": {"dev_data": str(dev), "dev_rows": 40, "seed": 0,
                                                            "preset": "homedepot"}}))
    return dev, other, teacher


def recipe(tmp_path, dev, test, teacher):
    (tmp_path / "run.yaml").write_text(f"""
data: {{train: synthetic, dev: {dev}, test: {test}, preset: homedepot, test_rows: 200}}
teacher: {{path: {teacher}}}
distill:
  small: {{recipe: distill/minilm_synthetic_cpu, dev_rows: 60, seed: 3}}
export: {{precision: int8, rows: 100}}
""")
    return load_pipeline(tmp_path / "run.yaml")


def test_the_report_shares_no_query_with_the_pairs_that_chose(files, tmp_path):
    from headcut.pipeline.pairs import selections

    dev, _, teacher = files
    r = recipe(tmp_path, dev, dev, teacher)
    meta = json.loads((teacher / META_FILE).read_text())
    chosen = selection_queries(r, meta)
    # both the existing teacher's recorded selection (40 pairs, seed 0) and the student's (60, seed 3) count
    each = [set(pairs().queries) for _, pairs in selections(r, meta)]
    assert len(each) == 2 and all(each) and chosen == each[0] | each[1] and each[0] != each[1]
    report = report_pairs(r, chosen, 200)
    assert len(report) == 200 and not set(report.queries) & chosen
    gate = choice_pairs(r, chosen, 100)
    assert len(gate) == 100 and set(gate.queries) <= chosen
    # without the exclusion the same sample would have reported on chosen queries: the check can fail
    assert set(read(str(dev), data=DataSection(preset="homedepot"), rows=200, seed=0).queries) & chosen


def test_a_test_file_that_chose_nothing_is_reported_whole(files, tmp_path):
    dev, other, teacher = files
    r = recipe(tmp_path, dev, other, teacher)
    meta = json.loads((teacher / META_FILE).read_text())
    chosen = selection_queries(r, meta)
    assert chosen == set()
    assert (report_pairs(r, chosen, 200).fingerprint
            == read(str(other), data=DataSection(preset="homedepot"), rows=200, seed=0).fingerprint)
    gate = choice_pairs(r, chosen, 100)  # the dev file, not the test file
    assert gate.fingerprint == read(str(dev), data=DataSection(preset="homedepot"), rows=100, seed=1).fingerprint


def test_the_data_section_names_the_columns_and_its_messages_name_its_keys(tmp_path):
    from headcut.pipeline.checks import check_readable
    from headcut_grader.errors import UserError

    pairs = synthetic_pairs(50, seed=2)
    path = renamed_columns_file(tmp_path / "renamed.tsv", pairs)
    data = DataSection(query_col="q", title_col="doc", label_col="rel")
    check_readable(str(path), data)
    read_back = read(str(path), data=data, rows=None, seed=0)
    assert sorted(zip(read_back.queries, read_back.titles, read_back.labels)) == sorted(
        zip(pairs.queries, pairs.titles, pairs.labels))
    with pytest.raises(UserError, match=r"no column 'title' .*name it with --set data\.title_col=NAME\."):
        check_readable(str(path), DataSection(query_col="q"))
    with pytest.raises(UserError, match=r"no label column 'grade' .*name it with --set data\.label_col=NAME\."):
        read(str(path), data=DataSection(query_col="q", title_col="doc"), rows=None, seed=0)


def test_a_runs_files_are_read_against_the_teachers_grades(tmp_path):
    """A teacher of grades [2, 3, 4]: the report's, the gate's and the scan's pairs index its grades (grade 2 is
    label 0), and the check before any stage refuses a grade it lacks, naming the line."""
    from headcut.pipeline.checks import check_readable
    from headcut_grader.errors import UserError

    path = tmp_path / "test.tsv"
    path.write_text("query\ttitle\tgrade\ndrill\tcordless drill\t2\nsaw\thand saw\t4\n")
    assert list(read(str(path), data=DataSection(), rows=None, seed=0, grades=(2, 3, 4)).labels) == [0, 2]
    check_readable(str(path), DataSection(), grades=(2, 3, 4))
    with pytest.raises(UserError, match=r"line 3, column 'grade': grade 4 is not one of the grades \[1, 2, 3\]"):
        check_readable(str(path), DataSection(), grades=(1, 2, 3))
