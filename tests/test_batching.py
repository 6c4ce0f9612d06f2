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


def test_a_text_the_tokenizer_keeps_nothing_of_is_refused_naming_its_line(tmp_path):
    """Was: a title of combining marks alone (or U+FFFD) passed the text checks and was trained and judged on as an
    empty text ([CLS] q [SEP] [SEP]); headcut's encode now says it as the grader does, naming the pair's line."""
    import pytest

    from headcut_grader.data import read_pairs
    from headcut_grader.errors import UserError

    path = tmp_path / "pairs.tsv"
    path.write_text("query\ttitle\tgrade\ndrill\tsaw\t3\nbit\t\u0301\u0301\t2\n")
    with pytest.raises(UserError) as err:
        encode(tiny_tokenizer(), read_pairs(path))
    assert str(err.value) == (f"{path}, line 3, title: empty text (the model's tokenizer keeps none of its characters, "
                              "such as U+0301); fix that pair or drop it.")
