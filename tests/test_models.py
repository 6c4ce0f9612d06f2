"""Loading and saving graders: built-in MiniLM, pruned round trips, refusing pickle, atomic writes."""
import re

import pytest
import torch

from headcut.arch import heads_per_layer, keep_heads
from headcut_grader.errors import UserError
from headcut.models import LoadedModel, load_model, resolve_source, save_model
from tests.conftest import need_minilm, tiny_inputs, tiny_model


def tiny_loaded(kind="bert"):
    need_minilm()
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_source("minilm-l6"))
    return LoadedModel(tiny_model(kind, attn="sdpa", vocab_size=len(tokenizer)), tokenizer)  # a row per token


@pytest.mark.parametrize("kind", ["bert", "distilbert", "roberta", "deberta-v2", "modernbert"])
def test_pruned_artifact_round_trips_exactly(tmp_path, kind):
    loaded = tiny_loaded(kind)
    keep_heads(loaded.model, [[1, 3], []])
    inputs = tiny_inputs(kind=kind)
    with torch.no_grad():
        before = loaded.model(**inputs).logits
    save_model(loaded, tmp_path / "art", meta={"note": "test"})
    again = load_model(tmp_path / "art")
    assert heads_per_layer(again.model) == [2, 0]
    assert again.meta["note"] == "test" and again.weights_hash
    with torch.no_grad():
        assert torch.equal(again.model(**inputs).logits, before)


def test_save_refuses_non_empty_folder_and_leaves_it_alone(tmp_path):
    loaded = tiny_loaded()
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="not empty; choose a new folder or pass overwrite=True"):
        save_model(loaded, out)
    assert (out / "keep.txt").read_text() == "mine"
    save_model(loaded, out, overwrite=True)
    assert not (out / "keep.txt").exists() and (out / "model.safetensors").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left behind


def test_refuses_pickle_weights_unless_allowed(tmp_path):
    model = tiny_model("bert")
    model.save_pretrained(tmp_path, safe_serialization=False)
    if not (tmp_path / "pytorch_model.bin").exists():
        torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
        (tmp_path / "model.safetensors").unlink(missing_ok=True)
    with pytest.raises(UserError, match="pickle weights .* allow_pickle=True"):
        load_model(tmp_path)


def test_bad_model_sources():
    with pytest.raises(UserError, match="no such folder, and not a built-in name"):
        load_model("/nonexistent/model")


def test_builtin_minilm_loads_with_a_reproducible_fresh_head():
    need_minilm()
    a, b = load_model("minilm-l6"), load_model("minilm-l6")
    assert heads_per_layer(a.model) == [12] * 6
    assert torch.equal(a.model.classifier.weight, b.model.classifier.weight)
    assert a.model.config.num_labels == 5


def test_an_interrupted_write_leaves_no_half_folder(tmp_path):
    from headcut_grader.files import atomic_dir

    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(out) as tmp:
            (tmp / "model.safetensors").write_bytes(b"half")
            raise KeyboardInterrupt  # a user's Ctrl-C halfway through writing
    assert list(tmp_path.iterdir()) == []


def test_write_text_leaves_neither_a_temp_file_nor_a_half_file_on_error(tmp_path):
    from headcut_grader.files import write_text

    target = tmp_path / "out" / "report.md"
    write_text(target, "old\n")
    with pytest.raises(UnicodeEncodeError):
        write_text(target, "half written \ud800")  # a lone surrogate cannot be encoded as UTF-8
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.md"] and target.read_text() == "old\n"


def _three_output_folder(tmp_path, *, outputs=3, **config):
    from transformers import BertTokenizerFast

    folder = tmp_path / "three"
    tiny_model("bert", num_labels=outputs).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "drill", "saw"]) + "\n")
    BertTokenizerFast(str(folder / "vocab.txt")).save_pretrained(folder)
    if config:
        import json

        path = folder / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return folder


def test_a_base_model_of_another_output_count_gets_a_fresh_head_and_a_grader_is_named_by_its_file(tmp_path):
    """Was: a 3-output classifier given a 5-grade head was reported as damaged weights; read as a grader, it blamed
    a headcut.json the folder does not have."""
    folder = _three_output_folder(tmp_path)
    loaded = load_model(folder, num_labels=5)
    assert loaded.model.classifier.weight.shape == (5, loaded.model.config.hidden_size)
    torch.testing.assert_close(loaded.model.classifier.weight, load_model(folder, num_labels=5).model.classifier.weight)
    with pytest.raises(UserError, match=r"config.json: the classifier has 3 outputs, and a folder without headcut.json "
                                        r"is read as the grades 1-5; add headcut.json with its grades"):
        load_model(folder)


def test_a_plain_folder_whose_config_json_was_edited_to_other_outputs_is_told_to_put_it_back(tmp_path):
    """Was: a folder without headcut.json whose config.json's id2label was cut to 3 labels, beside weights of 5
    outputs, was told to add headcut.json with grades [1, 2, 3], which then failed on the weights; the classifier in
    the weights (its header) now says config.json is the file to put back, as where headcut.json is present."""
    labels = {str(i): f"LABEL_{i}" for i in range(3)}
    folder = _three_output_folder(tmp_path, outputs=5, id2label=labels, label2id={v: int(k) for k, v in labels.items()})
    words = (f"{folder / 'config.json'} gives the classifier 3 outputs, but the classifier in "
             f"{folder / 'model.safetensors'} has 5 (the grades 1-5 a folder without headcut.json is read as); put "
             "back the config.json saved with these weights, or copy or download the model folder again.")
    with pytest.raises(UserError, match="^" + re.escape(words) + "$"):
        load_model(folder)


@pytest.mark.parametrize("pruned", [False, True])
def test_a_headcut_grader_of_another_output_count_gets_a_fresh_head(tmp_path, pruned):
    """Was: a grader headcut saved (its config records its shape), as finetune's model with another task or grades
    (finetune --set model=runs/teacher --set task=score), was '...model.safetensors is damaged or incomplete (Error(s)
    in loading state_dict ...); copy or download the model folder again'. Now its encoder is kept and the head is
    fresh, as for any other base model; weights of another shape than the head are still refused."""
    from transformers import BertTokenizerFast

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "drill"]) + "\n")
    model = tiny_model("bert")
    if pruned:
        keep_heads(model, [[0, 2], [0, 1, 2, 3]])
    grader = save_model(LoadedModel(model, BertTokenizerFast(str(tmp_path / "vocab.txt"))), tmp_path / "grader")
    loaded = load_model(grader, num_labels=1)
    assert loaded.model.classifier.weight.shape == (1, 32) and heads_per_layer(loaded.model) == heads_per_layer(model)
    for name, value in model.bert.state_dict().items():
        torch.testing.assert_close(loaded.model.bert.state_dict()[name], value)
    torch.testing.assert_close(loaded.model.classifier.weight, load_model(grader, num_labels=1).model.classifier.weight)
    assert load_model(grader, num_labels=5).model.classifier.weight.equal(model.classifier.weight)


def test_weights_of_another_shape_than_the_head_are_still_refused(tmp_path):
    folder = _three_output_folder(tmp_path, intermediate_size=48)  # wider than the weights: refused before loading
    with pytest.raises(UserError, match=r"config.json describes an encoder of 34,688 weights, but its weights hold "
                                        r"only 34,413; put back the config.json saved with these weights"):
        load_model(folder, num_labels=5)
    folder = _three_output_folder(tmp_path / "narrower", intermediate_size=30)
    with pytest.raises(UserError, match=r"model.safetensors holds bert.encoder.layer.0.intermediate.dense.bias of "
                                        r"shape \[37\], but the model .*config.json describes has \[30\]; put back "
                                        r"the config.json saved with these weights"):
        load_model(folder, num_labels=5)


def test_a_tokenizer_larger_than_the_embedding_table_is_refused(tmp_path):
    """Was: loaded and exported unchecked; ids past the table failed deep in torch or in ONNX Runtime."""
    from transformers import BertTokenizerFast

    folder = tmp_path / "model"
    tiny_model("bert", vocab_size=8).save_pretrained(folder)
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(20)]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    BertTokenizerFast(str(tmp_path / "vocab.txt")).save_pretrained(folder)
    with pytest.raises(UserError, match=r"the tokenizer has 25 tokens but the model's embedding table has 8 rows"):
        load_model(folder)


@pytest.mark.parametrize("flag,allow", [("--model", True), ("", True), ("model", False), ("teacher.path", False),
                                        ("--set teacher.path", False)])
def test_pickle_weights_are_refused_naming_what_allows_them_for_whoever_named_the_folder(tmp_path, flag, allow):
    """Was: 'pass --allow-pickle' to a recipe too (model=..., teacher.path=...), which has no such flag or key."""
    from headcut.weight_files import find_weights

    torch.save({}, tmp_path / "pytorch_model.bin")
    with pytest.raises(UserError, match="holds only pickle weights") as caught:
        find_weights(tmp_path, allow_pickle=False, flag=flag)
    said = str(caught.value)
    assert ("pass --allow-pickle if you trust the source" in said) == allow, said
    assert allow or said.endswith("convert them to safetensors (a recipe loads safetensors only)."), said


def test_outline_if_present_resolves_its_source_once(tmp_path, monkeypatch):
    """Was: headcut.finetune's outline_if_present resolved the source (a built-in's package found, each JSON file
    checked for a BOM), then outline resolved it again; it now lives beside outline and resolves once. A missing
    source is None, as before."""
    import headcut.models as models

    folder = tmp_path / "base"
    tiny_model("bert", num_labels=5).save_pretrained(folder)
    resolved = []
    real = models.resolve_source
    monkeypatch.setattr(models, "resolve_source", lambda *a, **k: resolved.append(a[0]) or real(*a, **k))
    outlined = models.outline_if_present(str(folder), "model")
    assert resolved == [str(folder)]
    assert heads_per_layer(outlined.model) == [4, 4] and outlined.path == str(folder)
    assert models.outline_if_present(str(tmp_path / "missing"), "model") is None
    assert models.outline_if_present(None, "model") is None
