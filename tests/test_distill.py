"""Distillation on tiny models: students, the loop, caching, unlabeled pairs, resuming, the artifact."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

from headcut.data import synthetic_pairs
from headcut.distill import DistillRecipe, build_student, distill
from headcut.errors import UserError
from headcut.models import LoadedModel, load_model, save_model
from headcut.recipes import from_dict
from conftest import tiny_model

GRADES = [1, 2, 3, 4, 5]


def tiny_tokenizer():
    """A WordPiece vocabulary of the synthetic pairs' words (97 entries), so tiny models need no download."""
    from transformers import BertTokenizer

    p = synthetic_pairs(500)
    words = sorted({w for t in p.queries + p.titles for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    return BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run ~20x slower with 2 threads on a shared 2-core machine (threads spin-wait)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_teacher(tmp_path_factory):
    """A random 4-layer tiny BERT, initialised wide (std 0.5) so that its grades vary from pair to pair
    (at BERT's std 0.02 a random tiny model gives every pair nearly the same distribution)."""
    root = tmp_path_factory.mktemp("tiny")
    tok = tiny_tokenizer()
    model = tiny_model("bert", attn="sdpa", vocab_size=len(tok), num_hidden_layers=4, seed=0,
                       initializer_range=0.5)
    save_model(LoadedModel(model, tok, {"grades": GRADES, "max_length": 32}), root / "teacher")
    return root / "teacher"


def dev_logits(model_dir, n=150):
    from headcut.evaluate.predict import predict_logits

    loaded = load_model(model_dir)
    return predict_logits(loaded.model, loaded.tokenizer, synthetic_pairs(n, seed=5), max_length=32)


def kl(teacher_logits, student_logits):
    t, s = torch.tensor(teacher_logits).log_softmax(-1), torch.tensor(student_logits).log_softmax(-1)
    return float((t.exp() * (t - s)).sum(-1).mean())


def recipe_for(teacher, **changes):
    values = dict(teacher=str(teacher), student="bottom-k", keep_layers=2, train_data="synthetic", train_rows=400,
                  dev_rows=150, dev_fraction=0.25, max_length=32, epochs=2, batch_size=16, learning_rate=2e-3,
                  eval_every=10, checkpoint_every=10, seed=0)
    values.update(changes)
    return from_dict(DistillRecipe, values)


def test_bottom_k_distills_into_a_loadable_artifact(tiny_teacher, tmp_path):
    from headcut.evaluate.predict import predict_logits

    recipe = recipe_for(tiny_teacher, ce_weight=0.0, kd_weight=1.0, temperature=1.0, epochs=4, learning_rate=3e-3,
                        eval_every=1000)
    teacher = load_model(tiny_teacher)
    untrained = build_student(recipe, teacher).loaded
    pairs = synthetic_pairs(150, seed=5)
    before = predict_logits(untrained.model, untrained.tokenizer, pairs, max_length=32)
    result = distill(recipe, tmp_path / "student")
    assert result["finished"] and result["training"]["teacher_cache"] == "written"
    loaded = load_model(tmp_path / "student")
    assert loaded.model.config.num_hidden_layers == 2
    meta = loaded.meta
    assert meta["kind"] == "distill" and meta["teacher"]["weights_hash"] == teacher.weights_hash
    assert meta["recipe"]["keep_layers"] == 2 and meta["student"]["layer_map"] == [1, 3]
    assert set(meta["metrics"]) == {"teacher", "before", "after", "after_minus_teacher"}
    assert meta["metrics"]["after_minus_teacher"]["agreement"]["ci"][0] <= meta["metrics"]["after_minus_teacher"]["agreement"]["value"]
    after = dev_logits(tmp_path / "student")
    target = dev_logits(tiny_teacher)
    print(kl(target, before), kl(target, after))
    assert kl(target, after) < 0.5 * kl(target, before)  # the student moved towards its teacher
