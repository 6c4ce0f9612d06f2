"""`headcut run` of a one-score pipeline on a tiny recipe (tiny BERT reranker, synthetic pairs scored by their
grade, a few steps per stage): every stage runs and the report speaks ranking metrics."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut.models import LoadedModel, save_model
from headcut.pipeline import load_pipeline, run_pipeline
from conftest import tiny_model

RECIPE = """
data: {{train: synthetic, test: "synthetic:2", test_rows: 60}}
teacher: {{recipe: finetune/minilm_synthetic_cpu, task: score, model: {base}, train_rows: 200, dev_rows: 40,
          max_length: 24, epochs: 1, batch_size: 16, learning_rate: 1.0e-3, eval_every: 5, checkpoint_every: 5}}
scan: {{data: "synthetic:1", rows: 40, methods: [kl, fisher], experiments: none, probes: false, bootstrap: 10}}
prune: {{flops: 0.6, score_rows: 32, calibrate: 32}}
distill:
  small: {{recipe: distill/minilm_score_bottom3_cpu, keep_layers: 1, train_rows: 200, dev_rows: 40, max_length: 24,
          epochs: 2, batch_size: 16, eval_every: 4, checkpoint_every: 4}}
export: {{precision: auto, backend: onnxruntime,
         rows: 40, threads: 1, min_agreement: 0.99, max_spearman_drift: 1.0, max_drop: 100.0}}
bench: {{batch: 4, seq_len: 16, repeats: 2, threads: 1, bootstrap: 50}}
"""

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


@pytest.fixture(scope="module")
def score_recipe(tmp_path_factory) -> Path:
    from test_export import tiny_tokenizer

    root = tmp_path_factory.mktemp("score-run")
    tok = tiny_tokenizer(root)
    torch.set_num_threads(1)
    model = tiny_model("bert", attn="sdpa", num_labels=1, vocab_size=len(tok), num_hidden_layers=3,
                       initializer_range=0.2)
    base = save_model(LoadedModel(model, tok, {"task": "score", "max_length": 24}), root / "base")
    (root / "tiny.yaml").write_text(RECIPE.format(base=base))
    return root / "tiny.yaml"


def test_a_score_run_makes_every_stage_and_a_ranking_report(score_recipe):
    result = run_pipeline(load_pipeline(score_recipe), score_recipe.parent / "out")
    assert list(result.states) == ["teacher", "scan", "prune", "distill.small", "export.teacher", "export.pruned",
                                   "export.small", "bench"]
    assert set(result.states.values()) == {"done"}
    bench = json.loads((result.out / "bench" / "bench.json").read_text())
    assert bench["task"] == "score" and {"spearman", "pearson", "ndcg@10", "mrr"} <= set(bench["teacher"])
    report = json.loads((result.out / "report.json").read_text())
    rows = {r["name"]: r for r in report["rows"]}
    assert list(rows) == ["teacher", "pruned", "small"]
    # its own grader: fp32, or INT8 only where the gate saw 99% of the pairs keep their order (a barely trained
    # tiny teacher's scores are close together, and INT8 rounding alone can reorder half of them)
    assert rows["teacher"]["vs_teacher"]["pair_order"]["value"] > 0.99
    for row in rows.values():
        assert {"ndcg@10", "mrr", "pair_order", "top1", "spearman"} <= set(row["vs_teacher"])
        assert "accuracy" not in row["metrics"] and -1 <= row["metrics"]["spearman"] <= 1
        assert row["precision"] in ("int8", "fp32")
    md = (result.out / "report.md").read_text()
    assert "| grader | precision | size MiB | GFLOP/pair | p50 ms | pairs/s | speed-up | Spearman |" in md
    assert "NDCG@10" in md and "pair order vs teacher" in md and "macro-F1" not in md
    student = json.loads((result.out / "distill-small" / "model" / "headcut.json").read_text())
    assert student["task"] == "score" and student["recipe"]["margin_weight"] == 1.0
    again = run_pipeline(load_pipeline(score_recipe), score_recipe.parent / "out")
    assert set(again.states.values()) == {"skipped"}


def test_a_score_teacher_with_a_grades_student_stops_the_run_before_any_stage(tmp_path):
    result = CliRunner().invoke(app, ["run", "quickstart",
                                      "--set", "teacher.recipe=finetune/minilm_homedepot_score_cpu",
                                      "--out", str(tmp_path / "run")])
    assert result.exit_code == 2, result.output
    assert result.output.replace("\n", " ").startswith(
        "error: [distill.bottom3] distils task=grades, but the run's teacher is a one-score reranker (task score); "
        "pass --set distill.bottom3.recipe=distill/minilm_score_bottom3_cpu")
    assert not (tmp_path / "run" / "teacher").exists()
    scan = CliRunner().invoke(app, ["run", "quickstart", "--set", "teacher.recipe=finetune/minilm_homedepot_score_cpu",
                                    "--set", "distill.bottom3.recipe=distill/minilm_score_bottom3_cpu",
                                    "--out", str(tmp_path / "run")])
    assert scan.exit_code == 2 and "pass --set scan.experiments=none" in scan.output.replace("\n", " ")
