"""One-score models (rerankers, task score): data, the recorded task, CrossEncoder folders, ranking metrics,
scans, pruning, export, serve; tiny random models, one real MiniLM CrossEncoder. Distillation and runs of score
models: tests/test_score_distill.py, tests/test_score_run.py."""
import json
import re

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut_grader.data import Pairs, read_pairs
from headcut.synthetic import synthetic_pairs
from headcut_grader.errors import UserError
from headcut.models import LoadedModel, load_model, resolve_source, save_cross_encoder, save_model
from tests.conftest import need_minilm, tiny_model


def write_scored(path, pairs: Pairs, *, columns=("grade", "score")):
    """A Home Depot-like file: grade 1..5 and a score of (grade + 1) / 2 (1.0-3.0, like the raters' mean)."""
    rows = ["\t".join(("query", "title") + columns)]
    for q, t, label in zip(pairs.queries, pairs.titles, pairs.labels):
        grade = pairs.grades[label]
        values = {"grade": str(grade), "score": f"{(grade + 1) / 2:.2f}"}
        rows.append("\t".join([q, t] + [values[c] for c in columns]))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer():
    need_minilm()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(resolve_source("minilm-l6"))


@pytest.fixture(scope="module")
def reranker(tmp_path_factory, tokenizer):
    """A saved tiny one-score model (3 layers x 4 heads) whose headcut.json names its scored dev data."""
    root = tmp_path_factory.mktemp("score")
    dev = write_scored(root / "dev.tsv", synthetic_pairs(120, seed=2))
    model = tiny_model("bert", attn="sdpa", num_labels=1, vocab_size=tokenizer.vocab_size, num_hidden_layers=3,
                       initializer_range=0.4)
    meta = {"kind": "finetune", "task": "score", "activation": "identity", "max_length": 24,
            "dev_data": {"path": str(dev), "preset": "homedepot"}}
    return save_model(LoadedModel(model, tokenizer, meta), root / "reranker"), dev


def test_score_file_reads_the_score_column(tmp_path):
    path = write_scored(tmp_path / "d.tsv", synthetic_pairs(10, seed=1))
    pairs = read_pairs(path, preset="homedepot", task="score")
    graded = read_pairs(path, preset="homedepot")
    assert pairs.task == "score" and graded.task == "grades"
    assert pairs.scores == [(graded.grades[label] + 1) / 2 for label in graded.labels]
    assert pairs.subset([3, 1]).scores == [pairs.scores[3], pairs.scores[1]]


@pytest.mark.parametrize("value", ["1e308", "-2e15"])
def test_a_score_whose_square_overflows_is_refused_with_its_line(tmp_path, value):
    """Was: 1e308 was read, turned every weight of the trained model to NaN, and finetune exited 0."""
    path = write_scored(tmp_path / "d.tsv", synthetic_pairs(6, seed=1))
    lines = path.read_text().splitlines()
    lines[3] = "\t".join(lines[3].split("\t")[:3] + [value])
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UserError, match=rf"line 4, column 'score': score '{value}' is beyond \+-1e\+15"):
        read_pairs(path, preset="homedepot", task="score")
    assert read_pairs(path, preset="homedepot", task="score", limit=2).scores  # rows above it still read


def test_grades_and_scores_mismatched_are_one_sentence(tmp_path):
    scores_only = write_scored(tmp_path / "s.tsv", synthetic_pairs(6), columns=("score",))
    grades_only = write_scored(tmp_path / "g.tsv", synthetic_pairs(6), columns=("grade",))
    with pytest.raises(UserError, match=r"has scores \('score'\) but no grade column 'grade', and this model grades"):
        read_pairs(scores_only, preset="homedepot")
    with pytest.raises(UserError, match=r"has grades \('grade'\) but no score column 'score', and this model is a "
                                        r"one-score reranker"):
        read_pairs(grades_only, preset="homedepot", task="score")


def test_score_model_given_graded_pairs_exits_2(reranker, tmp_path):
    grader, _ = reranker
    grades_only = write_scored(tmp_path / "g.tsv", synthetic_pairs(20), columns=("grade",))
    result = CliRunner().invoke(app, ["prune", "--model", str(grader), "--keep-ratio", "0.5",
                                      "--data", str(grades_only), "--out", str(tmp_path / "p"), "--no-timing"])
    assert result.exit_code == 2, result.output
    assert "no score column 'score', and this model is a one-score reranker" in result.output.replace("\n", " ")
    assert "Traceback" not in result.output


def test_the_task_is_recorded_and_read_back(reranker):
    loaded = load_model(reranker[0])
    assert (loaded.task, loaded.activation, loaded.model.config.num_labels) == ("score", "identity", 1)
    assert loaded.model.config.id2label == {0: "score"}
    ce = json.loads((reranker[0] / "config_sentence_transformers.json").read_text())
    assert ce["activation_fn"] == "torch.nn.modules.linear.Identity"


# --- ranking metrics ---------------------------------------------------------------------------------


def naive_order(scores, reference, groups):
    """Within-query pairs ordered as `reference` orders them (ties in `scores` half), by a plain double loop."""
    same = total = 0.0
    for g in groups:
        for a in g:
            for b in g:
                if a < b and reference[a] != reference[b]:
                    total += 1
                    if scores[a] == scores[b]:
                        same += 0.5
                    elif (scores[a] > scores[b]) == (reference[a] > reference[b]):
                        same += 1
    return same / total


def test_ranking_metrics_equal_plain_loops_and_cis_bracket_them():
    from headcut.evaluate.ranking import paired_score_bootstrap, score_bootstrap, score_summary

    rng = np.random.default_rng(0)
    gold = np.round(rng.uniform(1, 3, 60) * 3) / 3
    groups = [np.arange(i, i + 6) for i in range(0, 60, 6)]
    scores = gold + rng.normal(0, 0.6, 60)
    s = score_summary(scores, gold, groups)
    assert s["pair_accuracy"] == pytest.approx(naive_order(scores, gold, groups))
    best_first = [1 / (1 + list(g[np.argsort(-scores[g], kind="stable")]).index(
        next(i for i in g[np.argsort(-scores[g], kind="stable")] if gold[i] == gold[g].max()))) for g in groups]
    assert s["mrr"] == pytest.approx(np.mean(best_first))
    ci = score_bootstrap(scores, gold, groups, iters=200)
    assert all(ci[m][0] <= s[m] <= ci[m][1] for m in ("spearman", "ndcg@10", "pair_accuracy"))
    student = scores + rng.normal(0, 0.3, 60)
    p = paired_score_bootstrap(student, scores, gold, groups, iters=200)
    assert p["pair_order"]["value"] == pytest.approx(naive_order(student, scores, groups))
    assert p["top1"]["value"] == np.mean([np.argmax(student[g]) == np.argmax(scores[g]) for g in groups])
    same = paired_score_bootstrap(scores, scores, gold, groups, iters=50)
    assert same["pair_order"]["value"] == 1.0 and same["top1"]["value"] == 1.0 and same["spearman"]["delta"] == 0.0


# --- scans, surgery, tuning on a tiny one-score model -----------------------------------------------


def scored_pairs(n=24):
    pairs = synthetic_pairs(n, seed=4)
    return Pairs(pairs.queries, pairs.titles, None, pairs.grades, "toy",
                 scores=[1.0 + label / 2 for label in pairs.labels])


def masked_scores(model, encoded, mask):
    from headcut.evaluate.predict import predict_logits
    from headcut.masking import head_mask

    with head_mask(model, mask):
        return predict_logits(model, None, None, encoded=encoded, batch_size=8)[:, 0].astype(np.float64)


def test_scan_scores_of_a_score_model_equal_a_naive_loop(tokenizer):
    from headcut.batching import encode
    from headcut.evaluate.criteria import head_importance

    model = tiny_model("bert", num_labels=1, vocab_size=tokenizer.vocab_size, initializer_range=0.4)
    pairs = scored_pairs()
    encoded = encode(tokenizer, pairs, max_length=24, model=model)
    gold = np.asarray(pairs.scores)
    base = masked_scores(model, encoded, torch.ones(2, 4))
    change, loss = np.zeros((2, 4)), np.zeros((2, 4))
    for layer in range(2):
        for head in range(4):
            mask = torch.ones(2, 4)
            mask[layer, head] = 0
            got = masked_scores(model, encoded, mask)
            change[layer, head] = np.mean((got - base) ** 2)
            loss[layer, head] = np.mean((got - gold) ** 2) - np.mean((base - gold) ** 2)
    kl = head_importance(model, tokenizer, pairs, method="kl", batch_size=8, max_length=24).numpy()
    ablation = head_importance(model, tokenizer, pairs, method="ablation", batch_size=8, max_length=24).numpy()
    assert change.max() > 1e-4  # the heads matter, so the check can fail
    assert np.allclose(kl, change, rtol=1e-3, atol=1e-7) and np.allclose(ablation, loss, rtol=1e-3, atol=1e-7)
    eps, fisher = 1e-3, np.zeros((2, 4))
    unlabelled = Pairs(pairs.queries, pairs.titles, None)
    for layer in range(2):
        for head in range(4):
            up, down = torch.ones(2, 4), torch.ones(2, 4)
            up[layer, head] += eps
            down[layer, head] -= eps
            fisher[layer, head] = (((masked_scores(model, encoded, up) - masked_scores(model, encoded, down))
                                    / (2 * eps)) ** 2).sum()
    got = head_importance(model, tokenizer, unlabelled, method="fisher", batch_size=8, max_length=24).numpy()
    assert np.allclose(got, fisher, rtol=2e-2)  # Gaussian Fisher: sum of squared score gradients


def test_pruned_score_model_equals_masking(reranker):
    from headcut.arch import keep_heads, keep_neurons
    from headcut.batching import encode
    from headcut.evaluate.predict import predict_logits
    from headcut.masking import neuron_mask

    loaded = load_model(reranker[0], attn_implementation="eager")
    heads, neurons = [[0, 2], [], [1, 2, 3]], [list(range(0, 37, 2)), list(range(5)), []]
    encoded = encode(loaded.tokenizer, scored_pairs(30), max_length=24, model=loaded.model)
    hm, nm = torch.zeros(3, 4), torch.zeros(3, 37)
    for layer in range(3):
        hm[layer, heads[layer]], nm[layer, neurons[layer]] = 1, 1
    with neuron_mask(loaded.model, nm):
        masked = masked_scores(loaded.model, encoded, hm)
    full = masked_scores(loaded.model, encoded, torch.ones(3, 4))
    keep_heads(loaded.model, heads)
    keep_neurons(loaded.model, neurons)
    cut = predict_logits(loaded.model, None, None, encoded=encoded, batch_size=8)[:, 0]
    assert np.abs(full - masked).max() > 1e-3  # what was cut matters, so the check can fail
    assert np.abs(cut - masked).max() <= 1e-5


def test_flops_prune_of_a_score_model_tunes_never_worse_and_reports_ranking(reranker):
    from headcut.prune import PruneSettings, format_report, prune_to_budget

    loaded = load_model(reranker[0])
    settings = PruneSettings(score_rows=60, calibrate_rows=60, bootstrap=50, timing=False, batch_size=16)
    record = prune_to_budget(loaded, flops=0.6, settings=settings, tune=True).record()
    fits = record["tuning"]["fits"] + record["tuning"]["head"]
    assert fits and all(f["error_after"] <= f["error_before"] for f in fits)
    assert any(f["accepted"] for f in fits)
    q = record["quality"]
    assert q["task"] == "score" and "ndcg@10" in q["before"] and 0 < q["paired"]["pair_order"]["value"] <= 1
    assert "Ordered as the unpruned model orders them" in format_report(record)


# --- sentence-transformers CrossEncoder folders in and out ------------------------------------------


def headcut_scores(folder, pairs):
    from headcut.evaluate.predict import predict_logits
    from headcut_grader.tasks import score_values

    loaded = load_model(folder)
    return score_values(predict_logits(loaded.model, loaded.tokenizer, pairs, max_length=loaded.max_length),
                        loaded.activation)


def test_cross_encoder_round_trip_through_a_prune(tmp_path):
    """The real MiniLM as a CrossEncoder reranker (no hub): its folder loads in headcut, prunes, and the pruned
    model written back loads in sentence-transformers and scores as headcut does."""
    need_minilm()
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    ce = CrossEncoder(str(resolve_source("minilm-l6")), num_labels=1, max_length=32, local_files_only=True)
    torch.nn.init.normal_(ce.model.classifier.weight, std=0.5)  # a head whose scores differ between titles
    ce.save_pretrained(str(tmp_path / "ce"))
    loaded = load_model(tmp_path / "ce")
    assert (loaded.task, loaded.activation) == ("score", "sigmoid")
    pairs = scored_pairs(40)
    data = tmp_path / "d.tsv"
    data.write_text("query\ttitle\tscore\n" + "".join(f"{q}\t{t}\t{s}\n" for q, t, s in
                                                       zip(pairs.queries, pairs.titles, pairs.scores)))
    before = ce.predict(list(zip(pairs.queries, pairs.titles)))
    assert np.abs(headcut_scores(tmp_path / "ce", pairs) - before).max() <= 1e-5
    result = CliRunner().invoke(app, ["prune", "--model", str(tmp_path / "ce"), "--keep-ratio", "0.5", "--data",
                                      str(data), "--out", str(tmp_path / "pruned"), "--no-timing", "--bootstrap", "20",
                                      "--score-rows", "16"])
    assert result.exit_code == 0, result.output
    assert "within each query" in result.output
    result = CliRunner().invoke(app, ["cross-encoder", "--model", str(tmp_path / "pruned"),
                                      "--out", str(tmp_path / "st")])
    assert result.exit_code == 0, result.output
    ours = headcut_scores(tmp_path / "pruned", pairs)
    theirs = CrossEncoder(str(tmp_path / "st"), local_files_only=True).predict(list(zip(pairs.queries, pairs.titles)))
    assert np.abs(ours - before).max() > 1e-3  # pruning changed the scores, so the check below can fail
    assert np.abs(ours - theirs).max() <= 1e-5


def test_a_cross_encoder_of_every_activation_scores_in_sentence_transformers_as_in_headcut(tmp_path):
    """Was: sentence-transformers 6 reads the activation from config.json only, so a model of identity activation
    was scored through a sigmoid (0.5179 where headcut gave 0.0715)."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder
    from test_export import tiny_tokenizer

    from headcut.models import CROSS_ENCODER_CLASSES, save_cross_encoder

    pairs = scored_pairs(30)
    tokenizer = tiny_tokenizer(tmp_path / "tok")
    for activation in CROSS_ENCODER_CLASSES:
        model = tiny_model("bert", num_labels=1, vocab_size=len(tokenizer), initializer_range=0.2)
        folder = save_cross_encoder(LoadedModel(model, tokenizer, {"task": "score", "activation": activation,
                                                                   "max_length": 32}), tmp_path / activation)
        theirs = CrossEncoder(str(folder), local_files_only=True).predict(list(zip(pairs.queries, pairs.titles)))
        ours = headcut_scores(folder, pairs)
        assert np.abs(ours - theirs).max() <= 1e-5, activation
        assert np.ptp(ours) > 1e-4  # scores differ between pairs, so the equality above can fail


def tiny_cross_encoder(tmp_path):
    """A tiny one-score BERT saved as a CrossEncoder folder (identity activation) whose scores differ between pairs."""
    from test_export import tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", num_labels=1, vocab_size=len(tokenizer), initializer_range=0.2)
    return save_cross_encoder(LoadedModel(model, tokenizer, {"task": "score", "activation": "identity",
                                                             "max_length": 32}), tmp_path / "ce")


SIGMOID, IDENTITY = "torch.nn.modules.activation.Sigmoid", "torch.nn.modules.linear.Identity"


def test_every_torch_path_of_an_activation_scores_as_sentence_transformers_applies_it(tmp_path):
    """Was: only the paths sentence-transformers writes (torch.nn.modules.activation.Sigmoid) were read;
    torch.nn.Sigmoid, torch.nn.Identity, which CrossEncoder imports and applies the same, and torch.nn.Tanh were
    refused ('is not one headcut applies'), exit 2."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder
    from sentence_transformers.util import import_from_string
    from headcut.models import CROSS_ENCODER_ACTIVATIONS, CROSS_ENCODER_CLASSES

    pairs, folder = scored_pairs(30), tiny_cross_encoder(tmp_path)
    (folder / "headcut.json").unlink()  # only sentence-transformers' own records
    (folder / "config_sentence_transformers.json").unlink()
    config = json.loads((folder / "config.json").read_text())
    for path in ("torch.nn.Sigmoid", "torch.nn.Identity", "torch.nn.modules.Identity", "torch.nn.Tanh"):
        assert path in CROSS_ENCODER_ACTIVATIONS
    for path, activation in CROSS_ENCODER_ACTIVATIONS.items():
        assert import_from_string(path) is CROSS_ENCODER_CLASSES[activation]  # the path names that class
        (folder / "config.json").write_text(json.dumps({**config, "sentence_transformers": {"activation_fn": path}}))
        theirs = CrossEncoder(str(folder), local_files_only=True).predict(list(zip(pairs.queries, pairs.titles)))
        assert load_model(folder).activation == activation
        assert np.abs(headcut_scores(folder, pairs) - theirs).max() <= 1e-5, path
        assert np.ptp(theirs) > 1e-4  # scores differ between pairs, so the equality above can fail


@pytest.mark.parametrize("modules,st_file,st_config,legacy", [
    (False, IDENTITY, None, None),  # config_sentence_transformers.json without modules.json: not read, the sigmoid
    (True, IDENTITY, SIGMOID, None),  # beside modules.json (a CrossEncoder save) it comes first
    # without its model_type CrossEncoder reads the folder as a SentenceTransformer's, converts it and skips the file
    ("untyped", IDENTITY, None, None),
    (False, IDENTITY, SIGMOID, IDENTITY),  # config.json's sentence_transformers comes before the pre-v4 key
    (False, None, None, IDENTITY),
])
def test_cross_encoder_activation_records_are_read_in_sentence_transformers_order(tmp_path, modules, st_file,
                                                                                   st_config, legacy):
    """Was: config_sentence_transformers.json read first even without modules.json, where sentence-transformers 6
    ignores it: an identity record there scored a folder headcut's way (raw scores), CrossEncoder's way sigmoid."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder

    pairs, folder = scored_pairs(30), tiny_cross_encoder(tmp_path)
    if modules:  # a folder CrossEncoder saved: modules.json, no headcut.json
        CrossEncoder(str(folder), local_files_only=True).save_pretrained(str(tmp_path / "st"))
        folder = tmp_path / "st"
    (folder / "headcut.json").unlink(missing_ok=True)  # only sentence-transformers' own records
    config = json.loads((folder / "config.json").read_text())
    config.pop("sentence_transformers", None)
    config.update({"sentence_transformers": {"activation_fn": st_config}} if st_config else {})
    config.update({"sbert_ce_default_activation_function": legacy} if legacy else {})
    (folder / "config.json").write_text(json.dumps(config))
    records = folder / "config_sentence_transformers.json"
    kept = {k: v for k, v in json.loads(records.read_text()).items() if modules != "untyped" or k != "model_type"}
    records.write_text(json.dumps({**kept, "activation_fn": st_file}))
    if not st_file:
        records.unlink()
    theirs = CrossEncoder(str(folder), local_files_only=True).predict(list(zip(pairs.queries, pairs.titles)))
    ours = headcut_scores(folder, pairs)
    assert np.abs(ours - theirs).max() <= 1e-5
    assert np.ptp(ours) > 1e-4  # scores differ between pairs, so the equality above can fail


TRANSFORMER = "sentence_transformers.base.modules.transformer.Transformer"


def _module(path="", kind=TRANSFORMER, name="0"):
    return {"idx": int(name), "name": name, "path": path, "type": kind}


@pytest.mark.parametrize("modules, bert_config, words", [
    ([], None, "modules.json lists no modules, which sentence-transformers refuses: "),
    ([_module("1_Pooling", "sentence_transformers.models.Pooling")], None, "modules.json lists [{"),
    ([_module(), _module(name="1")], None, "modules.json lists [{"),  # the model twice
    ([_module(), _module("2_Dense", "sentence_transformers.models.Dense", "1")], None, "modules.json lists [{"),
    ([_module("0_Transformer")], None, "modules.json lists [{"),
    ([_module(kind="sentence_transformers.cross_encoder.models.Transformer")], None, "modules.json lists [{"),
    ([_module()], {"max_seq_length": 32, "do_lower_case": False},  # sentence-transformers 5's Transformer settings
     "sentence_bert_config.json has no 'transformer_task', so sentence-transformers reads the model without"),
    ([_module()], {"transformer_task": "feature-extraction"},
     "sentence_bert_config.json: 'transformer_task' is \"feature-extraction\", so"),
    ([_module()], "missing", "sentence_bert_config.json is missing, so"),
], ids=["empty", "pooling", "twice", "dense", "subfolder", "unknown-type", "st5-settings", "encoder", "no-settings"])
def test_a_cross_encoder_modules_json_sentence_transformers_reads_otherwise_is_refused(tmp_path, modules, bert_config,
                                                                                      words):
    """Was: a CrossEncoder folder's modules.json was only checked to be a list of modules, so `[]` (which
    CrossEncoder refuses), or modules other than the one Transformer headcut reads (CrossEncoder fails, or scores
    through them), loaded in headcut, exit 0. The real sentence-transformers shows each one differs."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder

    pairs, folder = scored_pairs(30), tiny_cross_encoder(tmp_path)
    CrossEncoder(str(folder), local_files_only=True).save_pretrained(str(tmp_path / "st"))
    folder = tmp_path / "st"
    (folder / "modules.json").write_text(json.dumps(modules))
    if bert_config == "missing":
        (folder / "sentence_bert_config.json").unlink()
    elif bert_config is not None:
        (folder / "sentence_bert_config.json").write_text(json.dumps(bert_config))
    try:
        theirs = CrossEncoder(str(folder), local_files_only=True)
        theirs.predict(list(zip(pairs.queries, pairs.titles)))
        assert [type(m).__name__ for m in theirs] != ["Transformer"]  # loads, through other modules
    except (ValueError, TypeError, KeyError, ImportError, OSError):
        pass  # sentence-transformers cannot load it
    with pytest.raises(UserError, match="^" + re.escape(f"{folder}/{words}")):
        load_model(folder)
    assert "delete modules.json" in run_refused(tmp_path, folder)


def run_refused(tmp_path, folder) -> str:
    """headcut evaluate's one sentence (exit 2) for the model folder `folder`."""
    data = tmp_path / "d.tsv"
    data.write_text("query\ttitle\tscore\ndrill\tcordless drill\t0.5\n")
    result = CliRunner().invoke(app, ["evaluate", "--model", str(folder), "--data", str(data)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    return result.output


@pytest.mark.parametrize("kind", ["sentence_transformers.models.Transformer",
                                  "sentence_transformers.base.modules.Transformer", TRANSFORMER])
def test_a_cross_encoder_modules_json_of_its_one_transformer_loads_and_scores_as_sentence_transformers(tmp_path,
                                                                                                       kind):
    """Every class path sentence-transformers resolves to its Transformer (an older save's
    sentence_transformers.models.Transformer too) is the folder's model, read as headcut reads it."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.util.misc import import_module_class

    from headcut.models import ST_TRANSFORMERS

    for path in ST_TRANSFORMERS:
        assert import_module_class(path) is Transformer
    pairs, folder = scored_pairs(30), tiny_cross_encoder(tmp_path)
    CrossEncoder(str(folder), local_files_only=True).save_pretrained(str(tmp_path / "st"))
    folder = tmp_path / "st"
    (folder / "modules.json").write_text(json.dumps([_module(kind=kind)]))
    theirs = CrossEncoder(str(folder), local_files_only=True).predict(list(zip(pairs.queries, pairs.titles)))
    assert np.abs(headcut_scores(folder, pairs) - theirs).max() <= 1e-5
    assert np.ptp(theirs) > 1e-4


def test_a_grades_model_built_from_a_config_loads_in_sentence_transformers_with_its_outputs(tmp_path):
    """Was: save_model wrote config.json without 'architectures' for a model built from a config (a student, a
    tiny model), and CrossEncoder reads such a folder as one output (num_labels=1): a grades model's folder failed
    to load ('ignore_mismatched_sizes' ... the classifier's 5 outputs)."""
    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder
    from test_export import tiny_tokenizer

    from headcut.evaluate.predict import predict_logits

    tokenizer, pairs = tiny_tokenizer(tmp_path / "tok"), scored_pairs(20)
    model = tiny_model("bert", vocab_size=len(tokenizer), initializer_range=0.2)
    assert model.config.architectures is None
    folder = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5]}), tmp_path / "m")
    loaded = load_model(folder)
    ours = predict_logits(loaded.model, loaded.tokenizer, pairs, max_length=loaded.max_length)
    theirs = CrossEncoder(str(folder), local_files_only=True)
    assert theirs.num_labels == 5
    assert np.abs(theirs.predict(list(zip(pairs.queries, pairs.titles))) - ours).max() <= 1e-5  # identity: logits


@pytest.mark.parametrize("task", ["score", "grades"])
@pytest.mark.parametrize("max_length", [32, None], ids=["recorded", "default"])
def test_a_saved_model_truncates_in_sentence_transformers_where_headcut_does(tmp_path, task, max_length):
    """Was: save_model kept the tokenizer's model_max_length (here 10^30, MiniLM's 512), which CrossEncoder(path)
    truncates at (up to the model's positions), while headcut reads headcut.json's max_length (or its default,
    128): pairs past that scored otherwise in sentence-transformers, e.g. 0.58 apart at max_length 32."""
    import dataclasses

    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder
    from test_export import tiny_tokenizer

    from headcut.evaluate.predict import predict_logits

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    pairs = scored_pairs(20)
    pairs = dataclasses.replace(pairs, titles=[" ".join([t] * 30) for t in pairs.titles])  # past 128 tokens
    meta = {"task": "score", "activation": "identity"} if task == "score" else {"grades": [1, 2, 3, 4, 5]}
    model = tiny_model("bert", num_labels=1 if task == "score" else 5, vocab_size=len(tokenizer),
                       initializer_range=0.2)
    folder = save_model(LoadedModel(model, tokenizer, {**meta, **({"max_length": max_length} if max_length else {})}),
                        tmp_path / "m")
    loaded = load_model(folder)
    assert loaded.max_length == (max_length or 128)
    ours = predict_logits(loaded.model, loaded.tokenizer, pairs, max_length=loaded.max_length)
    theirs = CrossEncoder(str(folder), local_files_only=True)
    assert theirs.max_seq_length == loaded.max_length
    logits = theirs.predict(list(zip(pairs.queries, pairs.titles)))  # identity: a grades model's logits
    assert np.abs(np.reshape(logits, ours.shape) - ours).max() <= 1e-5
    assert np.ptp(ours) > 1e-4


@pytest.mark.parametrize("meta", [False, True], ids=["cross-encoder", "headcut"])
def test_a_tokenizer_saved_shorter_is_read_at_its_length_as_sentence_transformers_reads_it(tmp_path, meta):
    """Was: a folder whose tokenizer_config.json says model_max_length 16 (CrossEncoder truncates there) was read
    at headcut's default, 128, or headcut.json's max_length, 32: long pairs scored otherwise than in
    CrossEncoder(path), exit 0. Without headcut.json's max_length the tokenizer's shorter one is read; past it,
    headcut.json's is refused naming both files."""
    import dataclasses

    pytest.importorskip("sentence_transformers")
    from sentence_transformers import CrossEncoder

    from headcut.models import outline

    folder = tiny_cross_encoder(tmp_path)  # headcut.json: max_length 32
    record = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**record, "model_max_length": 16}))
    if meta:
        words = (f"{folder / 'headcut.json'} records max_length 32, but {folder / 'tokenizer_config.json'}'s "
                 "model_max_length is 16, where sentence-transformers cuts pairs; set one to the other.")
        with pytest.raises(UserError, match="^" + re.escape(words) + "$"):
            load_model(folder)
        assert words in run_refused(tmp_path, folder).replace("\n", "")
        return
    (folder / "headcut.json").unlink()
    pairs = scored_pairs(20)
    pairs = dataclasses.replace(pairs, titles=[" ".join([t] * 4) for t in pairs.titles])  # past 16 tokens
    theirs = CrossEncoder(str(folder), local_files_only=True)
    assert theirs.max_seq_length == load_model(folder).max_length == outline(folder).max_length == 16
    ours = headcut_scores(folder, pairs)
    assert np.abs(theirs.predict(list(zip(pairs.queries, pairs.titles))) - ours).max() <= 1e-5


def test_an_older_headcut_folder_with_a_shorter_tokenizer_length_is_read_at_headcut_json_s(tmp_path):
    """Was: a folder saved before save_model set the tokenizer's model_max_length (it kept the source tokenizer's,
    here 128) and before headcut.json recorded tensors_hash, with max_length 256, was refused ("set one to the
    other"), though headcut had always read it at 256. It is read so; a folder saved since is still refused."""
    from test_export import tiny_tokenizer

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", num_labels=5, vocab_size=len(tokenizer))
    folder = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 256}), tmp_path / "m")
    record = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**record, "model_max_length": 128}))
    with pytest.raises(UserError, match="set one to the other"):
        load_model(folder)  # a new save: its tensors_hash says so
    meta = json.loads((folder / "headcut.json").read_text())
    del meta["tensors_hash"]
    (folder / "headcut.json").write_text(json.dumps(meta))
    assert load_model(folder).max_length == 256
    from test_bad_input_corners import as_cross_encoder_save

    folder = tiny_cross_encoder(tmp_path)  # CrossEncoder's own folder: cut at 16 there, whatever headcut.json says
    as_cross_encoder_save(folder)
    meta = json.loads((folder / "headcut.json").read_text())
    (folder / "headcut.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "tensors_hash"}))
    (folder / "tokenizer_config.json").write_text(json.dumps({**record, "model_max_length": 16}))
    with pytest.raises(UserError, match="set one to the other"):
        load_model(folder)

def test_a_tokenizer_length_too_short_for_a_pair_names_tokenizer_config_json(tmp_path):
    """Was: a folder without headcut.json whose tokenizer_config.json's model_max_length (read as its length) leaves
    no room for a pair was refused as "headcut.json: 'max_length' is 3", a file the folder does not have."""
    folder = tiny_cross_encoder(tmp_path)
    (folder / "headcut.json").unlink()
    record = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**record, "model_max_length": 3}))
    words = (f"{folder / 'tokenizer_config.json'}: 'model_max_length' is 3, but a pair needs at least 5 tokens (3 "
             "special ones and one of each text) and the model has 512 positions; set it from 5 to 512.")
    with pytest.raises(UserError, match="^" + re.escape(words) + "$"):
        load_model(folder)
    assert words in run_refused(tmp_path, folder).replace("\n", "")


def test_every_stage_takes_a_score_model_and_only_score_models_become_cross_encoders(reranker, tmp_path):
    grader, dev = reranker
    from headcut.models import SCORE_STAGES, check_stage

    for stage in ("distill", "run", "export"):  # distill and run refused score models before issue 24's last part
        assert stage in SCORE_STAGES
        check_stage(load_model(grader), stage)
    grades = LoadedModel(tiny_model("bert"), None, {"grades": [1, 2, 3, 4, 5]}, "g")
    # a Python caller is told its argument, the command its flag (was: --model for both)
    with pytest.raises(UserError, match=r"^loaded=g grades \(task grades\); only a one-score model"):
        save_cross_encoder(grades, tmp_path / "x")
    with pytest.raises(UserError, match=r"^--model g grades \(task grades\); only a one-score model"):
        save_cross_encoder(grades, tmp_path / "x", names="flags")


def test_grades_model_given_score_data_exits_2(tokenizer, tmp_path):
    model = tiny_model("bert", attn="sdpa", vocab_size=tokenizer.vocab_size)
    grader = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 24}), tmp_path / "m")
    scores_only = write_scored(tmp_path / "s.tsv", synthetic_pairs(6), columns=("score",))
    result = CliRunner().invoke(app, ["evaluate", "--model", str(grader), "--data", str(scores_only),
                                      "--preset", "homedepot"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "has scores ('score') but no grade column 'grade', and this model grades" in result.output.replace("\n", " ")


# --- export, the runtime's grade file and serve -----------------------------------------------------


@pytest.fixture(scope="module")
def score_grader(tmp_path_factory):
    """A tiny pruned one-score model (a 0-head layer, sigmoid like a CrossEncoder) exported fp32 and INT8."""
    from test_export import tiny_tokenizer

    from headcut.arch import keep_heads
    from headcut.export.build import build_grader
    from headcut.export.quantize import Int8Gate
    from headcut.data_spec import as_scores

    root = tmp_path_factory.mktemp("score-grader")
    tokenizer = tiny_tokenizer(root / "tok")
    model = tiny_model("bert", num_labels=1, vocab_size=len(tokenizer), max_position_embeddings=128,
                       initializer_range=0.2)
    keep_heads(model, [[0, 2], []])
    meta = {"task": "score", "activation": "sigmoid", "max_length": 64}
    loaded = LoadedModel(model, tokenizer, meta, "tiny", "0" * 16)
    pairs = as_scores(synthetic_pairs(120))
    lenient = Int8Gate(min_agreement=0.0, max_spearman_drift=1.0, max_drop=100.0, min_speed_vs_fp32=0.0)
    fp32 = build_grader(loaded, root / "fp32", pairs=pairs)
    int8 = build_grader(loaded, root / "int8", pairs=pairs, int8=True, gate=lenient)
    return root, loaded, pairs, fp32, int8


def test_exported_score_grader_scores_as_pytorch_and_gates_int8_on_ranking(score_grader):
    from headcut.evaluate.predict import predict_logits
    from headcut.evaluate.ranking import ranking_agreement
    from headcut_grader.grader import Grader, Scores
    from headcut_grader.tasks import score_values

    root, loaded, pairs, fp32, int8 = score_grader
    assert fp32["task"] == "score" and "grades" not in fp32 and fp32["parity"]["fp32"]["max_abs_diff"] <= 1e-4
    result = Grader(root / "fp32").grade(pairs)
    torch_scores = score_values(predict_logits(loaded.model, loaded.tokenizer, pairs, max_length=64), "sigmoid")
    assert isinstance(result, Scores) and np.abs(result.scores - torch_scores).max() <= 1e-5
    assert np.ptp(torch_scores) > 1e-3  # scores differ between pairs, so the check can fail
    assert "ndcg@10" in fp32["accuracy"]["metrics"]
    trial = int8["int8"]["chosen"]
    int8_scores = Grader(root / "int8").grade(pairs).scores
    terms = ranking_agreement(int8_scores, result.scores, pairs.query_groups())
    assert trial["agreement"] == pytest.approx(np.nansum(terms["same"]) / np.nansum(terms["pairs"]), abs=1e-6)


def test_a_tanh_model_exports_a_grader_that_scores_through_tanh(tmp_path):
    """A CrossEncoder of torch.nn.Tanh (was refused at load) is graded as PyTorch scores it: grade and serve
    apply the activation grader.json records (headcut_grader.tasks.ACTIVATIONS)."""
    from test_export import tiny_tokenizer

    from headcut.data_spec import as_scores
    from headcut.evaluate.predict import predict_logits
    from headcut.export.build import build_grader
    from headcut_grader.grader import Grader

    tokenizer = tiny_tokenizer(tmp_path / "tok")
    model = tiny_model("bert", num_labels=1, vocab_size=len(tokenizer), initializer_range=0.6)
    loaded = LoadedModel(model, tokenizer, {"task": "score", "activation": "tanh", "max_length": 32}, "tiny", "0" * 16)
    pairs = as_scores(synthetic_pairs(40))
    build_grader(loaded, tmp_path / "g", pairs=pairs)
    assert json.loads((tmp_path / "g" / "grader.json").read_text())["activation"] == "tanh"
    logits = predict_logits(model, tokenizer, pairs, max_length=32)[:, 0]
    want = torch.tanh(torch.from_numpy(logits).double()).numpy()
    assert np.abs(logits - want).max() > 1e-2  # tanh moved the logits, so the check can fail
    assert np.abs(Grader(tmp_path / "g").grade(pairs).scores - want).max() <= 1e-5


def test_an_exported_score_grader_is_evaluated_as_the_score_model_it_is(score_grader, tmp_path):
    """Was: `headcut evaluate --model SCORE_GRADER` judged the grader's one output as grades ("label 2.50 is not a
    whole grade"): open_scorer passed no task or activation for a grader. Its metrics are now its PyTorch model's."""
    from headcut.models import save_model

    root, loaded, _, _, _ = score_grader
    data = write_scored(tmp_path / "d.tsv", synthetic_pairs(60, seed=3), columns=("score",))
    model = save_model(loaded, tmp_path / "m")
    metrics = {}
    for name, folder in (("grader", root / "fp32"), ("model", model)):
        result = CliRunner().invoke(app, ["evaluate", "--model", str(folder), "--data", str(data), "--label-col",
                                          "score", "--bootstrap", "20", "--out", str(tmp_path / f"{name}.json")])
        assert result.exit_code == 0, result.output
        metrics[name] = json.loads((tmp_path / f"{name}.json").read_text())
    assert metrics["grader"]["model"]["task"] == "score"
    for metric in ("spearman", "pearson", "loss", "ndcg@10"):
        assert metrics["grader"][metric] == pytest.approx(metrics["model"][metric], abs=1e-4), metric
    assert abs(metrics["model"]["spearman"]) > 0.01  # the scores carry an order, so the comparison can fail


def test_grade_file_and_serve_give_the_graders_scores(score_grader, tmp_path):
    import httpx

    from headcut.export.server_load import running_server
    from headcut_grader.grader import Grader
    from headcut_grader.grade_file import GradeSettings, grade_file
    from tests.conftest import ROOT

    root, _, pairs, _, _ = score_grader
    local = Grader(root / "fp32").grade(pairs)
    source = write_scored(tmp_path / "in.tsv", synthetic_pairs(120))  # a grade and a score column, as Home Depot's
    gold = [float(line.split("\t")[3]) for line in source.read_text().splitlines()[1:]]
    for name, settings in (("out.tsv", GradeSettings()), ("named.tsv", GradeSettings(label_col="score")),
                           ("preset.tsv", GradeSettings(preset="homedepot"))):
        grade_file(root / "fp32", source, tmp_path / name, settings=settings)
        lines = [line.split("\t") for line in (tmp_path / name).read_text().splitlines()]
        assert lines[0] == ["query", "title", "true_score", "score"], name  # the input's gold score kept, as a score
        assert [float(r[2]) for r in lines[1:]] == gold and len(set(gold)) > 1
        assert np.allclose([float(r[3]) for r in lines[1:]], local.scores, atol=1e-6)
    with running_server(root / "fp32", workers=1, threads=1, wait_seconds=90, cwd=ROOT) as url:
        body = {"pairs": [{"query": q, "title": t} for q, t in zip(pairs.queries[:12], pairs.titles[:12])]}
        reply = httpx.post(url + "/grade", json=body, timeout=30).json()
        ranked = httpx.post(url + "/rank", json={"query": pairs.queries[0], "titles": pairs.titles[:12]},
                            timeout=30).json()["ranking"]
    assert reply["task"] == "score"
    assert np.allclose([r["score"] for r in reply["results"]], local.scores[:12], atol=1e-5)
    assert [r["index"] for r in ranked] == list(np.argsort(-Grader(root / "fp32").grade(
        [(pairs.queries[0], t) for t in pairs.titles[:12]]).scores, kind="stable"))


def bench_args(model, copy, data, out, *extra):
    return ["bench", "--model", str(model), "--model", str(copy), "--data", str(data), "--preset", "homedepot",
            "--batch-sizes", "1", "--seq-lens", "16", "--repeats", "1", "--out", str(out), *extra]


def test_bench_judges_a_score_model_by_ranking(reranker, tmp_path):
    import shutil

    grader, dev = reranker
    copy = shutil.copytree(grader, tmp_path / "copy")  # the same model under another name
    result = CliRunner().invoke(app, bench_args(grader, copy, dev, tmp_path / "b", "--limit", "40"))
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "b" / "bench.json").read_text())["variants"]
    assert [r["agreement"] for r in rows] == [1.0, 1.0]  # the same model orders every title pair alike
    assert -1 <= rows[0]["spearman"] <= 1 and 0 <= rows[0]["accuracy"] <= 1
    # pairs of which no two share a query: nothing to order, so n/a rather than 0%
    lonely = tmp_path / "lonely.tsv"
    lines = dev.read_text().splitlines()
    lonely.write_text("\n".join([lines[0]] + [f"q{i} {line}" for i, line in enumerate(lines[1:20])]) + "\n")
    result = CliRunner().invoke(app, bench_args(grader, copy, lonely, tmp_path / "c"))
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "c" / "bench.json").read_text())["variants"]
    assert [(r["agreement"], r["accuracy"]) for r in rows] == [(None, None), (None, None)]
    assert "| n/a | " in (tmp_path / "c" / "bench.md").read_text()


def test_bench_refuses_models_of_another_task_before_any_loads(reranker, tokenizer, tmp_path, monkeypatch):
    import headcut.models

    grader, dev = reranker
    model = tiny_model("bert", attn="sdpa", vocab_size=tokenizer.vocab_size)
    grades = save_model(LoadedModel(model, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 24}), tmp_path / "g")
    monkeypatch.setattr(headcut.models, "load_model", lambda *a, **k: pytest.fail("a model loaded"))
    result = CliRunner().invoke(app, bench_args(grader, grades, dev, tmp_path / "b"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert (f"the first --model {grader} is a score model and --model {grades} a grades one"
            in result.output.replace("\n", " "))
    assert not (tmp_path / "b").exists()


def test_scan_command_on_a_score_model(reranker, tmp_path):
    grader, dev = reranker
    base = ["scan", "--model", str(grader), "--data", str(dev), "--preset", "homedepot", "--limit", "40",
            "--no-probes", "--bootstrap", "10"]
    refused = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "pass --experiments none" in refused.output
    result = CliRunner().invoke(app, [*base, "--experiments", "none", "--method", "ablation,kl,fisher",
                                      "--out", str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    assert "baseline: Spearman" in result.output and "NDCG@10" in result.output
    methods = json.loads((tmp_path / "b" / "importance.json").read_text())["methods"]
    assert set(methods) == {"ablation", "kl", "fisher"}


def test_pairs_the_reference_cannot_tell_apart_are_not_judged():
    """Two titles the fp32 reference scores equally, split by float32 rounding in another runtime (about 1e-7),
    are a tie: no order to keep. (On an AVX-512 VNNI CPU such pairs made an OpenVINO INT8 gate's agreement
    differ from the shipped graph's by 4 points.)"""
    from headcut.evaluate.ranking import TIE, ranking_agreement

    reference = np.array([0.5, 0.5 + 1e-7, 0.9])
    terms = ranking_agreement(np.array([0.6, 0.4, 0.9]), reference, [np.arange(3)])
    assert terms["pairs"][0] == 2 and terms["same"][0] == 2  # only the pairs with the 0.9 title are judged
    assert 1e-7 < TIE < 1e-4  # above float32 rounding, below any difference a reranker means


def lonely_pairs(path, n=12):
    """Scored pairs of which no two share a query: nothing to order."""
    path.write_text("query\ttitle\tscore\n" + "".join(f"drill {i}\tcordless drill {i}\t{1 + i % 3}.0\n"
                                                      for i in range(n)))
    return path


def test_ranking_metrics_are_na_where_no_query_has_two_titles(reranker, tmp_path):
    """Was: NDCG@10, MRR and pair accuracy printed and written as 0.0000."""
    grader, _ = reranker
    result = CliRunner().invoke(app, ["evaluate", "--model", str(grader),
                                      "--data", str(lonely_pairs(tmp_path / "l.tsv")), "--label-col", "score",
                                      "--bootstrap", "20", "--out", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert [metrics[m] for m in ("ndcg@10", "mrr", "pair_accuracy")] == [None, None, None]
    assert metrics["judged_pairs"] == 0 and -1 <= metrics["spearman"] <= 1
    assert "pair_accuracy      n/a" in result.output and "no order to judge" in result.output


def test_ranking_figures_are_nan_at_the_source_and_n_a_in_every_report():
    """Was: prune, distill and run reports printed NDCG@10, MRR, pair accuracy and pair order as 0 (and top-1 as
    100%) where no query had two titles: the library returned 0 for 'nothing to judge'."""
    from headcut.cli.distill import format_result
    from headcut.evaluate.ranking import paired_score_bootstrap, score_summary
    from headcut.pipeline.report import score_table_rows
    from headcut.prune.report import _agreement_sentence, _metric_table

    groups = [np.array([i]) for i in range(6)]  # one title per query
    scores, gold = np.linspace(0, 1, 6), np.array([1.0, 2, 3, 1, 2, 3])
    summary = score_summary(scores, gold, groups)
    assert all(np.isnan(summary[m]) for m in ("ndcg@10", "mrr", "pair_accuracy")) and summary["judged_pairs"] == 0
    paired = paired_score_bootstrap(scores, scores[::-1], gold, groups, iters=20)
    assert all(np.isnan(paired[m]["value"]) for m in ("pair_order", "top1")) and np.isnan(paired["ndcg@10"]["delta"])
    assert np.isnan(paired["ndcg@10"]["ci"]).all() and not np.isnan(paired["spearman"]["ci"]).any()

    quality = {"task": "score", "before": summary, "after": summary, "paired": paired}
    table = "\n".join(_metric_table(quality, None))
    assert "| ndcg@10 | n/a | n/a | n/a |" in table and "| pair_accuracy | n/a | n/a | n/a |" in table
    assert "n/a (no query here has two titles" in _agreement_sentence(quality)
    distilled = format_result({"teacher": summary, "before": summary, "after": summary, "after_minus_teacher": paired})
    assert "0.0000" not in distilled.split("spearman")[1].split("loss")[0] and "n/a" in distilled
    row = {"name": "s", "precision": "fp32", "size_mb": 1.0, "flops_per_pair": 1e9, "p50_ms": 1.0, "pairs_per_s": 1.0,
           "speedup": 1.0, "metrics": summary, "vs_teacher": paired}
    assert score_table_rows([row])[0][-6:] == ["n/a"] * 6


def test_json_has_no_nan(tmp_path):
    """NaN figures are written as null: JSON has no NaN, and strict readers refuse Python's."""
    from headcut_grader.files import write_json

    write_json(tmp_path / "f.json", {"a": float("nan"), "b": [1.5, np.float32("nan")], "c": np.array([np.nan, 2.0])})
    text = (tmp_path / "f.json").read_text()
    assert "NaN" not in text and json.loads(text) == {"a": None, "b": [1.5, None], "c": [None, 2.0]}


def test_the_int8_gate_of_a_score_model_needs_two_titles_of_one_query(reranker, tmp_path):
    """Was: every INT8 recipe 'kept 0.00%' of an order there was none of, and the advice was to relax the gate."""
    grader, _ = reranker
    result = CliRunner().invoke(app, ["export", str(grader), "--out", str(tmp_path / "g"), "--int8", "--data",
                                      str(lonely_pairs(tmp_path / "l.tsv")), "--label-col", "score"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "no two of its 12 pairs share a query" in result.output.replace("\n", " ")
    assert not (tmp_path / "g").exists()


@pytest.mark.parametrize("task, column, said", [
    ("grades", "score", "has scores ('score') but no grade column 'grade', and this model grades (task grades); pass "
                        "graded pairs (or name the grade column with --label-col), or use a one-score model."),
    ("score", "grade", "has grades ('grade') but no score column 'score', and this model is a one-score reranker (task "
                       "score); pass a file with a numeric score column (or name it with --label-col), "
                       "or use a grades"),
])
def test_a_scan_that_needs_gold_of_a_file_holding_the_other_tasks_says_which(reranker, tokenizer, tmp_path, task,
                                                                             column, said):
    """Was: 'FILE has no grades, which --method ablation and the experiments need; pass --method kl,...' for a grades
    model on a file with only a score column (and the reverse), never saying that the file's gold is the other
    task's; now the sentence finetune, distill and evaluate give for the mismatch. A scan that reads no gold (kl,
    no experiments) still runs on that file."""
    model = reranker[0]
    if task == "grades":
        tiny = tiny_model("bert", attn="sdpa", vocab_size=tokenizer.vocab_size)
        model = save_model(LoadedModel(tiny, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 24}), tmp_path / "m")
    data = write_scored(tmp_path / "d.tsv", synthetic_pairs(20, seed=3), columns=(column,))
    base = ["scan", "--model", str(model), "--data", str(data), "--no-probes", "--bootstrap", "10"]
    refused = CliRunner().invoke(app, [*base, "--experiments", "none", "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert f"{data} {said}" in " ".join(refused.output.split())
    assert not (tmp_path / "a").exists()
    ran = CliRunner().invoke(app, [*base, "--experiments", "none", "--method", "kl", "--out", str(tmp_path / "b")])
    assert ran.exit_code == 0, ran.output


@pytest.mark.parametrize("task, column, args, said", [
    ("grades", "score", ["--keep-ratio", "0.5", "--method", "ablation"],
     "has scores ('score') but no grade column 'grade', and this model grades (task grades); pass graded pairs (or "
     "name the grade column with --label-col), or use a one-score model."),
    ("grades", "score", ["--flops", "0.5", "--targets", "grades"], "has scores ('score') but no grade column 'grade'"),
    ("score", "grade", ["--flops", "0.5", "--targets", "grades"],
     "has grades ('grade') but no score column 'score', and this model is a one-score reranker (task score); pass a "
     "file with a numeric score column (or name it with --label-col), or use a grades"),
])
def test_a_prune_scoring_on_gold_of_a_file_holding_the_other_tasks_says_which(reranker, tokenizer, tmp_path, task,
                                                                              column, args, said):
    """Was: 'FILE has no grades, which --method ablation needs; use --method kl.' (and '... which --targets grades
    needs') for --data holding only the other task's gold beside --eval-data (the scoring pool's gold is then
    optional), after the pool was read; now the sentence scan, finetune, distill, evaluate, bench and export give for
    the mismatch, before any scoring. A prune whose scoring reads no gold (kl) still runs on that file."""
    model = reranker[0]
    if task == "grades":
        tiny = tiny_model("bert", attn="sdpa", vocab_size=tokenizer.vocab_size)
        model = save_model(LoadedModel(tiny, tokenizer, {"grades": [1, 2, 3, 4, 5], "max_length": 24}), tmp_path / "m")
    data = write_scored(tmp_path / "d.tsv", synthetic_pairs(20, seed=3), columns=(column,))
    held_out = write_scored(tmp_path / "e.tsv", synthetic_pairs(20, seed=4))
    base = ["prune", "--model", str(model), "--data", str(data), "--eval-data", str(held_out), "--no-timing",
            "--bootstrap", "10"]
    refused = CliRunner().invoke(app, [*base, *args, "--out", str(tmp_path / "a")])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert f"{data} {said}" in " ".join(refused.output.split())
    assert not (tmp_path / "a").exists()
    if args[0] == "--keep-ratio":
        ran = CliRunner().invoke(app, [*base, "--keep-ratio", "0.5", "--method", "kl", "--out", str(tmp_path / "b")])
        assert ran.exit_code == 0, ran.output


@pytest.mark.parametrize("task, column", [("grades", "score"), ("score", "grade")])
def test_a_prune_from_python_or_a_run_on_the_other_tasks_gold_says_what_the_command_says(reranker, tokenizer,
                                                                                        tmp_path, task, column):
    """Was: prune() read the dev data recorded with the model with gold required whatever its method and eval_data
    (`headcut prune --data` decided for itself when gold was needed), so with eval_data and method='kl', which reads
    no gold, a file holding only the other task's gold was refused from Python (and by `headcut prune` without
    --data) while `headcut prune --data FILE` ran on it. Now the library decides (prune.inputs.pool_gold) for all of
    them and a run's data.train: where scoring reads gold, the command's sentence in the caller's words (exit 2 for
    a run); where it reads none, the prune runs."""
    from headcut.prune import PruneSettings, prune, prune_to_budget

    data = write_scored(tmp_path / "d.tsv", synthetic_pairs(20, seed=3), columns=(column,))
    held_out = write_scored(tmp_path / "e.tsv", synthetic_pairs(20, seed=4))
    source = load_model(reranker[0])
    tiny, meta = source.model, source.meta
    if task == "grades":
        tiny = tiny_model("bert", attn="sdpa", vocab_size=tokenizer.vocab_size)
        meta = {"grades": [1, 2, 3, 4, 5], "max_length": 24}
    recorded = {**meta, "dev_data": {"path": str(data), "preset": "homedepot"}}
    model = save_model(LoadedModel(tiny, tokenizer, recorded), tmp_path / "m")
    command = CliRunner().invoke(app, ["prune", "--model", str(model), "--data", str(data), "--preset", "homedepot",
                                       "--eval-data", str(held_out), "--keep-ratio", "0.5", "--method", "ablation",
                                       "--no-timing", "--out", str(tmp_path / "a")])
    assert command.exit_code == 2, command.output
    said = " ".join(command.output.split())
    assert said.startswith(f"error: {data} has ") and said.count(". ") == 0
    loaded = load_model(model)
    held = read_pairs(held_out, preset="homedepot", task=loaded.task)
    settings = PruneSettings(timing=False, bootstrap=10, score_rows=16, calibrate_rows=16)
    for call, args in ((prune, dict(keep_ratio=0.5, method="ablation")),
                       (prune_to_budget, dict(flops=0.6, targets="grades", tune=False))):
        with pytest.raises(UserError) as caught:
            call(loaded, eval_data=held, settings=settings, **args)
        assert "error: " + str(caught.value) == said.replace("--label-col", "label_col=NAME")
    kept = prune(loaded, keep_ratio=0.5, method="kl", eval_data=held, settings=settings)
    assert kept.plan["kept"] == kept.plan["total"] // 2 and kept.quality is not None
    budget = prune_to_budget(loaded, flops=0.6, eval_data=held, settings=settings, tune=False)  # Fisher on the model
    assert budget.quality is not None
    recipe = tmp_path / "run.yaml"
    recipe.write_text(f"data: {{train: {data}, test: {held_out}, preset: homedepot, test_rows: 20}}\n"
                      f"teacher: {{path: {model}}}\nprune: {{flops: 0.6, score_rows: 16, tune: false}}\n"
                      "distill: {}\nexport: {precision: fp32, rows: 20, threads: 1}\n"
                      "bench: {batch: 4, seq_len: 16, repeats: 2, threads: 1}\n")
    run = CliRunner().invoke(app, ["run", str(recipe), "--out", str(tmp_path / "run")])
    assert run.exit_code == 2, run.output
    assert said.replace("--label-col", "--set data.label_col=NAME") in " ".join(run.output.split())
    assert not (tmp_path / "run" / "prune").exists()


def test_a_score_grader_whose_record_lost_its_activation_is_refused(score_grader, tmp_path):
    """Was: grader.json without 'activation' graded with identity, so a sigmoid grader's scores were its raw logits,
    exit 0."""
    import json
    import shutil

    from headcut_grader import Grader
    from headcut_grader.errors import UserError

    root = score_grader[0]
    folder = shutil.copytree(root / "fp32", tmp_path / "g")
    record = json.loads((folder / "grader.json").read_text())
    assert record["activation"] == "sigmoid"
    del record["activation"]
    (folder / "grader.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match=r"grader.json is damaged or incomplete \(no 'activation'\); re-export"):
        Grader(folder)
