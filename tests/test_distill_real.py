"""Distillation with the real MiniLM teacher on real Home Depot pairs (skips without them)."""
from __future__ import annotations

import pytest
import torch

from conftest import HOMEDEPOT
from headcut.distill import DistillRecipe, distill
from headcut.recipes import load_recipe


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # on the shared 2-core machine 2 threads spin-wait against other jobs
    yield
    torch.set_num_threads(before)


def test_bottom3_student_learns_from_the_real_teacher(quick_teacher, tmp_path, one_thread):
    recipe = load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu", overrides=[
        f"teacher={quick_teacher}", f"train_data={HOMEDEPOT / 'train.tsv'}", f"dev_data={HOMEDEPOT / 'dev.tsv'}",
        "train_rows=2000", "dev_rows=600", "epochs=1", "max_length=48", "eval_every=1000",
        "checkpoint_every=1000", "early_stopping_patience=0", "measure_speed=false"])
    result = distill(recipe, tmp_path / "bottom3")
    m = result.metrics
    print({k: {n: round(m[k][n], 4) for n in ("accuracy", "spearman", "loss")} for k in ("teacher", "before", "after")})
    print(m["after_minus_teacher"]["spearman"], result.training)
    assert m["teacher"]["spearman"] > 0.3
    # 63 steps from a weak quick teacher (Spearman ~0.33) only start closing the gap (seen: Spearman
    # 0.03 -> 0.08, loss 1.55 -> 1.35); longer runs on the real teacher are in the closing note
    assert m["after"]["spearman"] > m["before"]["spearman"] + 0.02
    assert m["after"]["loss"] < m["before"]["loss"] - 0.1
    assert result.training["examples_per_cpu_second"] > 0
