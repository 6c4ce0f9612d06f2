"""Tokenising and batching: the token limit defaults to the one the model was trained at."""
from __future__ import annotations

import numpy as np

from headcut.batching import encode
from headcut.synthetic import synthetic_pairs
from headcut.evaluate.criteria import head_importance
from headcut.evaluate.predict import predict_logits
from headcut.models import LoadedModel, load_model, save_model
from test_distill import tiny_tokenizer
from conftest import tiny_model


def test_the_token_limit_defaults_to_the_models_recorded_max_length(tmp_path):
    tok = tiny_tokenizer()
    save_model(LoadedModel(tiny_model("bert", vocab_size=len(tok)), tok, {"max_length": 12}), tmp_path / "m")
    loaded = load_model(tmp_path / "m")
    pairs = synthetic_pairs(40, seed=2)
    assert encode(tok, pairs).lengths().max() > 12  # the pairs are longer than the recorded limit
    assert encode(tok, pairs, model=loaded.model).lengths().max() == 12
    assert encode(tok, pairs, model=loaded.model, max_length=16).lengths().max() == 16  # unless given
    assert np.array_equal(predict_logits(loaded.model, tok, pairs),
                          predict_logits(loaded.model, tok, pairs, max_length=12))
    assert np.array_equal(head_importance(loaded.model, tok, pairs, method="entropy"),
                          head_importance(loaded.model, tok, pairs, method="entropy", max_length=12))
