"""Distilling one-score teachers (rerankers): MSE and margin-MSE on the teacher's score, equal to plain loops,
a loss that falls, and a grades/score mix-up refused in one sentence (exit 2). Tiny random models."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut.distill import DistillRecipe, distill
from headcut.distill.losses import gold_mse, margin_mse, score_mse
from headcut.models import LoadedModel, load_model, save_model
from headcut.recipes import from_dict
from conftest import tiny_model
from test_distill import tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


@pytest.fixture(scope="module")
def score_teacher(tmp_path_factory):
    """A random 3-layer tiny one-score BERT, initialised wide so that its scores vary from pair to pair."""
    root = tmp_path_factory.mktemp("score-teacher")
    tok = tiny_tokenizer()
    model = tiny_model("bert", attn="sdpa", num_labels=1, vocab_size=len(tok), num_hidden_layers=3,
                       initializer_range=0.5)
    meta = {"task": "score", "activation": "identity", "max_length": 32}
    return save_model(LoadedModel(model, tok, meta), root / "teacher")


def score_recipe(teacher, **changes):
    values = dict(teacher=str(teacher), task="score", student="bottom-k", keep_layers=1, train_data="synthetic",
                  train_rows=240, dev_rows=80, dev_fraction=0.25, max_length=32, epochs=3, batch_size=16,
                  learning_rate=3e-3, eval_every=10, checkpoint_every=10, seed=0, measure_speed=False,
                  mse_weight=1.0, margin_weight=1.0, tune_fields=["mse_weight", "learning_rate"])
    values.update(changes)
    return from_dict(DistillRecipe, values)


def plain_margin(student, teacher, queries) -> float:
    """Margin-MSE by a double loop over the pairs of titles of one query."""
    terms = [((student[i] - student[j]) - (teacher[i] - teacher[j])) ** 2
             for i in range(len(student)) for j in range(i + 1, len(student)) if queries[i] == queries[j]]
    return float(np.mean(terms)) if terms else 0.0


def test_margin_mse_equals_a_plain_loop_and_ignores_a_constant_shift():
    g = torch.Generator().manual_seed(0)
    teacher, student = torch.randn(12, 1, generator=g), torch.randn(12, 1, generator=g)
    queries = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3, 3, 3, 4, 0])
    got = margin_mse(student, teacher, queries)
    assert float(got) == pytest.approx(plain_margin(student[:, 0].tolist(), teacher[:, 0].tolist(), queries.tolist()),
                                       rel=1e-6)
    assert float(got) > 0.1  # the student differs, so the check can fail
    assert float(margin_mse(teacher + 3.7, teacher, queries)) == pytest.approx(0.0, abs=1e-10)
    assert float(score_mse(teacher + 3.7, teacher)) == pytest.approx(3.7 ** 2, rel=1e-5)  # the level still counts
    lone = margin_mse(student.requires_grad_(), teacher, torch.arange(12))  # no two titles of one query
    lone.backward()
    assert float(lone.detach()) == 0.0 and student.grad is not None and float(student.grad.abs().sum()) == 0.0


def test_gold_mse_reads_only_pairs_with_a_gold_score():
    student = torch.tensor([[1.0], [2.0], [5.0], [0.5]], requires_grad=True)
    gold = torch.tensor([1.5, float("nan"), 3.0, 0.5])
    # the NaN row adds nothing
    assert float(gold_mse(student, gold).detach()) == pytest.approx((0.5 ** 2 + 2.0 ** 2 + 0.0) / 3)
    none = gold_mse(student, torch.full((4,), float("nan")))
    none.backward()
    assert float(none.detach()) == 0.0 and float(student.grad.abs().sum()) == 0.0


def test_the_score_loss_step_equals_a_plain_computation(score_teacher):
    from headcut.batching import collate
    from headcut.distill.run import Distillation

    recipe = score_recipe(score_teacher, mse_weight=0.7, margin_weight=1.3, gold_weight=0.9)
    run = Distillation(recipe, score_teacher.parent / "never", overwrite=False, progress=None, cache_dir=None)
    run._setup_teacher()
    run._setup_student()
    run._setup_data()
    run.cache_dir = score_teacher.parent / "cache"

    class Folder:  # _setup_targets reads only the folder's path when cache_dir is given
        path = score_teacher.parent

    run.folder = Folder()
    run._setup_targets()
    run._setup_losses()
    assert run.cached is not None and run.query_ids is not None
    rows = np.flatnonzero(np.isin(run.query_ids, run.query_ids[:3]))[:16]  # several titles of a few queries
    batch = collate(run.encoded, rows)
    with torch.no_grad():
        got = float(run._loss_step(run.model, batch, rows))
        student = run.model(**batch).logits[:, 0].double().numpy()
        teacher = run.teacher.model(**batch).logits[:, 0].double().numpy()
    queries, gold = run.query_ids[rows], run.pairs.score_array()[rows]
    expected = (0.7 * np.mean((student - teacher) ** 2) + 1.3 * plain_margin(student, teacher, queries)
                + 0.9 * np.mean((student - gold) ** 2))
    assert plain_margin(student, teacher, queries) > 1e-3  # margins differ, so the check can fail
    assert got == pytest.approx(expected, rel=1e-4)


def test_gold_scores_come_from_the_train_pairs_and_unlabeled_pairs_have_none(score_teacher, tmp_path):
    from headcut.distill.run import with_unlabeled
    from headcut.finetune import load_data
    from headcut.synthetic import synthetic_pairs

    extra = synthetic_pairs(30, seed=9)
    path = tmp_path / "logs.tsv"
    path.write_text("query\ttitle\n" + "".join(f"{q}\t{t}\n" for q, t in zip(extra.queries, extra.titles)))
    recipe = score_recipe(score_teacher, gold_weight=1.0, unlabeled_data=str(path))
    train_pairs, dev = load_data(recipe)
    merged, gold = with_unlabeled(recipe, train_pairs, dev)
    n = len(train_pairs)
    assert len(merged) == n + 30 and np.isnan(gold[n:]).all()
    assert np.array_equal(gold[:n], train_pairs.score_array().astype(np.float32))
    assert len(set(gold[:n].tolist())) > 1  # real scores, not a placeholder
    _, none = with_unlabeled(score_recipe(score_teacher), train_pairs, dev)  # no gold loss: no gold read
    assert np.isnan(none).all()


def test_a_score_student_learns_its_teacher(score_teacher, tmp_path):
    losses = []
    result = distill(score_recipe(score_teacher), tmp_path / "student",
                     progress=lambda e: losses.append(e["loss"]) if "loss" in e else None)
    assert result.finished and len(losses) >= 30
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:3])  # the distillation loss falls
    student = load_model(tmp_path / "student")
    assert (student.task, student.activation, student.model.config.num_labels) == ("score", "identity", 1)
    assert student.model.config.num_hidden_layers == 1
    m = result.metrics
    assert ({"spearman", "ndcg@10", "mrr", "pair_accuracy"} <= set(m["after"])
            and "pair_order" in m["after_minus_teacher"])
    meta = json.loads((tmp_path / "student" / "headcut.json").read_text())
    assert meta["task"] == "score" and meta["recipe"]["margin_weight"] == 1.0


def test_a_grades_and_score_mix_up_is_one_sentence_exit_2(score_teacher, tmp_path):
    from test_score import write_scored

    from headcut.recipes import find_recipe
    from headcut.synthetic import synthetic_pairs

    runner = CliRunner()
    grades_teacher = save_model(LoadedModel(tiny_model("bert", attn="sdpa", vocab_size=len(tiny_tokenizer())),
                                            tiny_tokenizer(), {"grades": [1, 2, 3, 4, 5], "max_length": 32}),
                                tmp_path / "grades-teacher")
    scores_only = write_scored(tmp_path / "s.tsv", synthetic_pairs(40), columns=("score",))
    def read(name, teacher):  # the lead of a refusal as the recipe is read (was: after the teacher loaded, unled)
        sets = f"--set teacher={teacher}, --set train_data=synthetic, --set keep_layers=1"
        return f"error: {find_recipe(name, kind='distill')} with {sets}: the teacher {teacher}"

    cases = [
        # a score teacher given the grades recipe
        (["minilm_bottom3_cpu", "--set", f"teacher={score_teacher}", "--set", "train_data=synthetic"],
         f"{read('minilm_bottom3_cpu', score_teacher)} is a one-score reranker (task score), but the recipe distils "
         "task=grades"),
        # a grades teacher given the score recipe
        (["minilm_score_bottom3_cpu", "--set", f"teacher={grades_teacher}", "--set", "train_data=synthetic"],
         f"{read('minilm_score_bottom3_cpu', grades_teacher)} grades (task grades), but the recipe distils task=score"),
        # a grades teacher given score data
        (["minilm_bottom3_cpu", "--set", f"teacher={grades_teacher}", "--set", f"train_data={scores_only}",
          "--set", "preset=homedepot"], "has scores ('score') but no grade column 'grade', and this model grades"),
    ]
    for args, words in cases:
        result = runner.invoke(app, ["distill", *args, "--set", "keep_layers=1", "--out", str(tmp_path / "never")])
        text = result.output.replace("\n", " ")
        assert result.exit_code == 2, result.output
        assert words in text and "Traceback" not in text and text.count(". ") <= 1
    recipe = tmp_path / "pruned.yaml"  # a score student cut from a grades model
    recipe.write_text(f"teacher: {score_teacher}\ntask: score\nstudent: pruned\nstudent_model: {grades_teacher}\n"
                      "train_data: synthetic\ntune_fields: [learning_rate]\n")
    pruned = runner.invoke(app, ["distill", str(recipe), "--out", str(tmp_path / "never")])
    assert pruned.exit_code == 2, pruned.output
    assert (f"student_model {grades_teacher} is a grades model (task grades) but the teacher {score_teacher} is a "
            "one-score model (task score)") in pruned.output.replace("\n", " ")
    assert not (tmp_path / "never").exists() and not (tmp_path / "never.partial").exists()


def test_a_score_recipe_refuses_the_grades_keys():
    from headcut_grader.errors import UserError

    with pytest.raises(UserError,
                       match="key 'kd_weight' applies to task=grades only, and this recipe distils task=score"):
        score_recipe("t", kd_weight=0.3)
    with pytest.raises(UserError, match="key 'margin_weight' applies to task=score only"):
        score_recipe("t", task="grades", margin_weight=0.5, tune_fields=["learning_rate"])
    with pytest.raises(UserError, match="every loss weight of task=score is 0; set mse_weight, margin_weight or gold"):
        score_recipe("t", mse_weight=0.0, margin_weight=0.0)
    with pytest.raises(UserError, match="key 'grades' applies to task=grades only"):  # a score has no grades
        score_recipe("t", grades=[1, 2])
    with pytest.raises(UserError, match="tune_fields names 'mse_weight' twice"):
        score_recipe("t", tune_fields=["mse_weight", "mse_weight"])


def test_a_recipe_without_tune_fields_searches_its_own_tasks_fields():
    """Was: a score recipe that never named tune_fields was refused over the grades default ('temperature')."""
    from headcut.distill.recipe import TUNED

    score = from_dict(DistillRecipe, dict(teacher="t", task="score", train_data="synthetic"))  # no tune_fields key
    assert score.searched_fields == TUNED["score"] == ("mse_weight", "margin_weight", "learning_rate")
    assert from_dict(DistillRecipe, dict(teacher="t", train_data="synthetic")).searched_fields == TUNED["grades"]


def test_the_distill_command_prints_ranking_metrics_for_a_score_student(score_teacher, tmp_path):
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(f"teacher: {score_teacher}\ntask: score\nstudent: bottom-k\nkeep_layers: 1\n"
                      "train_data: synthetic\n"
                      "train_rows: 120\ndev_rows: 60\nmax_length: 32\nepochs: 1\nbatch_size: 16\neval_every: 4\n"
                      "checkpoint_every: 4\nmargin_weight: 1.0\nmeasure_speed: false\n"
                      "tune_fields: [mse_weight, margin_weight, learning_rate]\n")
    result = CliRunner().invoke(app, ["distill", str(recipe), "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    lines = {line.split()[0]: line for line in result.output.splitlines() if line.strip()}
    assert {"spearman", "pearson", "ndcg@10", "mrr", "pair_accuracy", "pair_order", "top1"} <= set(lines)
    assert "accuracy" not in lines and "macro_f1" not in lines
    assert load_model(tmp_path / "s").task == "score"
