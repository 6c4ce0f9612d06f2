"""`headcut prune` end to end: a tiny saved grader for exact checks and errors, the real MiniLM for a real one."""
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from headcut.arch import heads_per_layer
from headcut.cli.main import app
from headcut_grader.data import read_pairs
from headcut.splits import split_by_query
from headcut.synthetic import synthetic_pairs
from headcut.evaluate.importance import write_scores
from headcut_grader.files import write_text
from headcut.masking import head_mask
from headcut.models import LoadedModel, load_model, resolve_source, save_model
from headcut.prune import HeadPlan, plan_heads
from tests.conftest import need_homedepot, need_minilm, renamed_columns_file, tiny_inputs, tiny_model


def write_pairs(path, pairs):
    rows = ["query\ttitle\tgrade"] + [f"{q}\t{t}\t{pairs.grades[l]}"
                                      for q, t, l in zip(pairs.queries, pairs.titles, pairs.labels)]
    write_text(path, "\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def tiny_grader(tmp_path_factory):
    """A saved 3-layer x 4-head grader whose headcut.json names its dev data, as finetune writes it."""
    need_minilm()
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("prune")
    dev = write_pairs(root / "dev.tsv", synthetic_pairs(80, seed=2))
    tok = AutoTokenizer.from_pretrained(resolve_source("minilm-l6"))
    model = tiny_model("bert", attn="sdpa", vocab_size=tok.vocab_size, num_hidden_layers=3, initializer_range=0.4)
    meta = {"kind": "finetune", "grades": [1, 2, 3, 4, 5], "max_length": 24,
            "dev_data": {"path": str(dev), "preset": None}}
    return save_model(LoadedModel(model, tok, meta), root / "grader"), dev


def folder_state(path):
    return {p.name: p.stat().st_mtime_ns for p in path.iterdir()}


def run(*args):
    return CliRunner().invoke(app, ["prune", *map(str, args)])


def test_prune_with_the_recorded_dev_data(tmp_path, tiny_grader):
    grader, dev = tiny_grader
    before = folder_state(grader)
    out = tmp_path / "pruned"
    result = run("--model", grader, "--keep-ratio", 0.5, "--out", out, "--method", "fisher", "--bootstrap", 50,
                 "--latency-seconds", 0.05)
    assert result.exit_code == 0, result.output
    for text in ("| heads |", "Ideal speedup from FLOPs", "Measured CPU latency", "| 32 |",
                 "also chose the pruned units", "Same grade as the unpruned model"):
        assert text in result.output
    assert folder_state(grader) == before  # the input is never touched
    pruned = load_model(out)
    source = load_model(grader)
    meta = json.loads((out / "headcut.json").read_text())
    plan = HeadPlan.from_dict(meta["prune"]["plan"])
    assert plan.num_kept == 6 == sum(heads_per_layer(pruned.model))
    assert meta["prune"]["scores"]["data"]["fingerprint"] == read_pairs(dev).fingerprint
    assert meta["source"]["weights_hash"] == source.weights_hash and meta["weights_hash"] == pruned.weights_hash
    inputs = tiny_inputs()
    with torch.no_grad(), head_mask(source.model, plan.mask()):
        assert (source.model(**inputs).logits - pruned.model(**inputs).logits).abs().max() <= 1e-5
    assert (out / "report.md").read_text().startswith("# headcut prune")
    quality = meta["prune"]["quality"]
    assert quality["data"]["rows"] == 80 and set(quality["paired"]) >= {"accuracy", "spearman", "loss", "agreement"}


def test_evaluate_against_a_reference_gives_paired_differences_and_agreement(tmp_path, tiny_grader):
    from headcut.evaluate import predict_logits
    from headcut.prune import pruned_copy

    grader, dev = tiny_grader
    source = load_model(grader)
    plan = HeadPlan([[0, 1], [], [3]], 4)
    pruned = save_model(pruned_copy(source, plan), tmp_path / "pruned")
    out = tmp_path / "against.json"
    result = CliRunner().invoke(app, ["evaluate", "--model", str(pruned), "--against", str(grader), "--data", str(dev),
                                      "--bootstrap", "50", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "model - against [95% paired CI]" in result.output and "same grade as" in result.output
    report = json.loads(out.read_text())
    pairs = read_pairs(dev)
    expected = np.mean(predict_logits(load_model(pruned).model, source.tokenizer, pairs, max_length=24).argmax(1)
                       == predict_logits(source.model, source.tokenizer, pairs, max_length=24).argmax(1))
    paired = report["against"]["model_minus_against"]
    assert paired["agreement"]["value"] == pytest.approx(expected)
    assert paired["accuracy"]["delta"] == pytest.approx(report["accuracy"] - report["against"]["metrics"]["accuracy"])
    same = CliRunner().invoke(app, ["evaluate", "--model", str(grader), "--against", str(grader), "--data", str(dev),
                                    "--bootstrap", "20", "--out", str(tmp_path / "same.json")])
    assert same.exit_code == 0, same.output
    itself = json.loads((tmp_path / "same.json").read_text())["against"]["model_minus_against"]
    assert itself["agreement"]["value"] == 1.0 and itself["spearman"]["delta"] == 0.0
    missing = CliRunner().invoke(app, ["evaluate", "--model", str(grader), "--against", str(tmp_path / "nope"),
                                       "--data", str(dev)])
    assert missing.exit_code == 2 and "nope" in missing.output


def test_prune_with_a_score_file_and_no_prior_keeps_the_global_top_k(tmp_path, tiny_grader):
    grader, dev = tiny_grader
    loaded = load_model(grader)
    scores = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    write_scores(tmp_path / "importance.json", {"ablation": scores},
                 model_info={"path": str(grader), "weights_hash": loaded.weights_hash},
                 data_info={"source": "x", "fingerprint": "y"})
    out = tmp_path / "pruned"
    result = run("--model", grader, "--keep-ratio", 0.75, "--out", out, "--scores", tmp_path / "importance.json",
                 "--layer-prior", 0, "--eval-data", dev, "--no-timing", "--bootstrap", 20)
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "headcut.json").read_text())
    top = set(torch.topk(scores.flatten(), 9).indices.tolist())
    assert {l * 4 + h for l, hs in enumerate(meta["prune"]["plan"]["keep"]) for h in hs} == top
    assert "also chose the pruned units" not in result.output and "Measured CPU latency" not in result.output


def test_iterative_prune_from_the_cli(tmp_path, tiny_grader):
    grader, dev = tiny_grader
    result = run("--model", grader, "--keep-ratio", 0.5, "--out", tmp_path / "it", "--data", dev, "--method", "kl",
                 "--iterative", 2, "--min-heads", 1, "--no-timing", "--bootstrap", 20)
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "it" / "headcut.json").read_text())
    assert meta["prune"]["iterative"] == 2 and min(meta["prune"]["plan"]["heads_per_layer"]) >= 1
    assert "2 iterative steps" in result.output


def test_prune_data_needs_no_grades(tmp_path, tiny_grader):
    """--flops scores units on the model's own outputs (Fisher targets teacher): pairs without a grade column do,
    with quality reported on --eval-data."""
    grader, dev = tiny_grader
    unlabelled = tmp_path / "unlabelled.tsv"
    unlabelled.write_text("".join("\t".join(line.split("\t")[:2]) + "\n" for line in dev.read_text().splitlines()))
    result = run("--model", grader, "--flops", 0.6, "--out", tmp_path / "p", "--data", unlabelled, "--eval-data", dev,
                 "--score-rows", 40, "--calibrate", 40, "--no-timing", "--bootstrap", 20)
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "p" / "headcut.json").read_text())
    assert meta["prune"]["quality"]["data"]["rows"] == 80


def test_user_errors_exit_2_with_one_sentence(tmp_path, tiny_grader):
    grader, dev = tiny_grader
    loaded = load_model(grader)
    other = {"path": "x", "weights_hash": "0123456789abcdef"}
    write_scores(tmp_path / "other.json", {"ablation": torch.zeros(3, 4)}, model_info=other, data_info={})
    write_scores(tmp_path / "shape.json", {"ablation": torch.zeros(2, 4)},
                 model_info={"weights_hash": loaded.weights_hash}, data_info={})
    bare = save_model(LoadedModel(loaded.model, loaded.tokenizer, {"grades": [1, 2, 3, 4, 5]}), tmp_path / "bare")
    from transformers import GPT2Config, GPT2ForSequenceClassification

    gpt = tmp_path / "gpt2"
    GPT2ForSequenceClassification(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=50)).save_pretrained(gpt)
    out = tmp_path / "out"
    cases = [
        (["--model", grader, "--keep-ratio", 1.5], r"--keep-ratio 1.5 is out of range; it must be in \(0, 1\]"),
        (["--model", grader, "--keep-ratio", 0], r"--keep-ratio 0 is out of range; it must be in \(0, 1\]"),
        (["--model", grader, "--flops", 0.0001], "less than the pooler and classifier alone"),
        (["--model", grader, "--keep-ratio", 0.5, "--scores", tmp_path / "other.json"], "computed on another model"),
        (["--model", grader, "--keep-ratio", 0.5, "--scores", tmp_path / "shape.json"],
         r"has \(2, 4\) heads but --model has \(3, 4\)"),
        (["--model", gpt, "--keep-ratio", 0.5], "model type 'gpt2' is not supported"),
        (["--model", bare, "--keep-ratio", 0.5], "records no dev data file; pass --data FILE"),
        (["--model", grader, "--keep-ratio", 0.5, "--data", dev, "--method", "magic"], "--method 'magic'"),
    ]
    for args, message in cases:
        result = run(*args, "--out", out, "--no-timing")
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
        import re

        assert re.search(message, result.output), result.output
        assert not out.exists()
    for flag in ("--keep-ratio", "--flops", "--latency"):  # ranges are checked while parsing: a usage error
        for value in (1.5, 0, "nan"):
            result = run("--model", grader, flag, value, "--out", out)
            assert result.exit_code == 2 and "Traceback" not in result.output and not out.exists()
            assert flag in result.output and "(0, 1]" in result.output and len(result.output.strip().splitlines()) == 1
    out.mkdir()
    (out / "mine.txt").write_text("x")
    result = run("--model", grader, "--keep-ratio", 0.5, "--out", out)
    assert result.exit_code == 2 and "not empty" in result.output and (out / "mine.txt").exists()


@pytest.mark.real
def test_real_teacher_prune_keeps_its_judgement(tmp_path, quick_teacher):
    """Keep 80% of a real Home Depot grader's heads, chosen by Fisher scores of 96 pairs, graded on 300 other
    pairs: its expected grade stays far closer to the teacher's than with random plans of the same size.
    (The quick teacher gives every pair the same argmax grade, so agreement cannot separate methods here.)"""
    need_homedepot()
    from tests.conftest import HOMEDEPOT
    from headcut.evaluate.metrics import expected_grade
    from headcut.evaluate.predict import predict_logits
    from headcut.prune import pruned_copy

    dev = read_pairs(HOMEDEPOT / "dev.tsv", preset="homedepot")
    scoring, report = split_by_query(dev, 0.3, seed=0)
    write_pairs(tmp_path / "score.tsv", scoring.sample(96))
    write_pairs(tmp_path / "report.tsv", report.sample(300))
    out = tmp_path / "pruned"
    result = run("--model", quick_teacher, "--keep-ratio", 0.8, "--out", out, "--data", tmp_path / "score.tsv",
                 "--eval-data", tmp_path / "report.tsv", "--bootstrap", 200, "--latency-seconds", 0.2)
    assert result.exit_code == 0, result.output
    meta = json.loads((out / "headcut.json").read_text())["prune"]
    assert meta["plan"]["kept"] == 58 and meta["scores"]["method"] == "fisher"
    assert meta["speed"]["ideal_speedup"] > 1.0 and len(meta["speed"]["latency"]) == 3
    assert abs(meta["quality"]["paired"]["spearman"]["delta"]) < 0.02

    teacher, pairs = load_model(quick_teacher), read_pairs(tmp_path / "report.tsv")
    reference = expected_grade(predict_logits(teacher.model, teacher.tokenizer, pairs, max_length=teacher.max_length),
                               pairs.grades)

    def grade_gap(model):
        logits = predict_logits(model, teacher.tokenizer, pairs, max_length=teacher.max_length)
        return float(np.mean(np.abs(expected_grade(logits, pairs.grades) - reference)))

    chosen = grade_gap(load_model(out).model)
    randoms = [grade_gap(pruned_copy(teacher, plan_heads(torch.rand(6, 12, generator=torch.Generator().manual_seed(s)),
                                                         0.8, layer_prior=0)).model) for s in range(2)]
    assert chosen < 0.5 * min(randoms), (chosen, randoms)  # measured: 0.010 vs 0.06-0.11


def test_the_default_data_is_read_with_the_columns_finetune_recorded(tmp_path, tiny_grader):
    from headcut.prune.inputs import data_pool

    grader, _ = tiny_grader
    loaded = load_model(grader)
    pairs = synthetic_pairs(30, seed=4)
    path = renamed_columns_file(tmp_path / "renamed.tsv", pairs)
    recorded = {"path": str(path), "preset": None, "query_col": "q", "title_col": "doc", "label_col": "rel"}
    pool = data_pool(LoadedModel(loaded.model, loaded.tokenizer, {**loaded.meta, "dev_data": recorded}), None)
    assert pool.queries == pairs.queries and list(pool.labels) == list(pairs.labels)


def test_the_column_flags_read_the_recorded_dev_data_as_its_refusal_advises(tmp_path, tiny_grader):
    """Was: without --data, --query-col, --title-col and --label-col were silently ignored, and the recorded dev data
    was refused with 'name it with --query-col NAME' (the advice not taken); now they read it, over what finetune
    recorded."""
    grader, _ = tiny_grader
    loaded = load_model(grader)
    path = renamed_columns_file(tmp_path / "renamed.tsv", synthetic_pairs(30, seed=4))
    recorded = tmp_path / "recorded"
    save_model(LoadedModel(loaded.model, loaded.tokenizer, {**loaded.meta, "dev_data": {"path": str(path)}}), recorded)
    common = ["--model", recorded, "--keep-ratio", 0.5, "--method", "kl", "--no-timing", "--bootstrap", 20]
    refused = run(*common, "--out", tmp_path / "refused")
    assert refused.exit_code == 2 and "name it with --query-col." in refused.stderr, refused.output
    result = run(*common, "--out", tmp_path / "out", "--query-col", "q", "--title-col", "doc", "--label-col", "rel")
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "out" / "headcut.json").read_text())
    read = read_pairs(path, query_col="q", title_col="doc", label_col="rel")
    assert meta["prune"]["scores"]["data"]["fingerprint"] == read.fingerprint
    assert meta["prune"]["quality"]["data"]["rows"] == 30


def test_a_python_caller_reads_the_recorded_dev_data_with_its_own_columns(tmp_path, tiny_grader):
    """Was: only `headcut prune` laid its column flags over the columns finetune recorded (cli/prune.py's pool_file);
    data_pool read the recorded dev data as recorded, whatever the caller knew of the file. Now data_pool and
    default_data take `columns`: a value replaces the recorded one, a preset every recorded column."""
    from headcut.prune import default_data
    from headcut.prune.inputs import data_pool
    from headcut_grader.errors import UserError

    grader, _ = tiny_grader
    loaded = load_model(grader)
    pairs = synthetic_pairs(30, seed=4)
    renamed = renamed_columns_file(tmp_path / "renamed.tsv", pairs)
    wrong = {"query_col": "query_text", "title_col": "product", "label_col": "score"}
    model = LoadedModel(loaded.model, loaded.tokenizer, {**loaded.meta, "dev_data": {"path": str(renamed), **wrong}})
    pool = data_pool(model, None, columns={"query_col": "q", "title_col": "doc", "label_col": "rel", "preset": None})
    assert pool.queries == pairs.queries and list(pool.labels) == list(pairs.labels)
    write_text(tmp_path / "plain.tsv", "query\ttitle\tgrade\n" + "".join(
        f"{q}\t{t}\t{pairs.grades[y]}\n" for q, t, y in zip(pairs.queries, pairs.titles, pairs.label_array())))
    plain = LoadedModel(loaded.model, loaded.tokenizer,
                        {**loaded.meta, "dev_data": {"path": str(tmp_path / "plain.tsv"), **wrong}})
    assert default_data(plain, columns={"preset": "homedepot"})[1] == {
        "preset": "homedepot", "query_col": None, "title_col": None, "label_col": None, "label_map": None}
    assert data_pool(plain, None, columns={"preset": "homedepot"}).queries == pairs.queries
    with pytest.raises(UserError, match=r"data_pool columns has key 'query', which is not one of preset, query_col"):
        data_pool(model, None, columns={"query": "q"})
    with pytest.raises(UserError, match="data_pool columns say how the recorded dev data is read, and data is given"):
        data_pool(model, pairs, columns={"query_col": "q"})


def test_the_preset_flag_reads_the_recorded_dev_data_in_place_of_its_recorded_columns(tmp_path, tiny_grader):
    """--preset names the file's whole layout: laid over finetune's recorded --query-col q, it read the preset's file
    by column q ('no column q'). The other column flags still replace the recorded one each (test above)."""
    grader, _ = tiny_grader
    loaded = load_model(grader)
    pairs = synthetic_pairs(30, seed=4)
    write_text(tmp_path / "plain.tsv", "query\ttitle\tgrade\n" + "".join(
        f"{q}\t{t}\t{pairs.grades[y]}\n" for q, t, y in zip(pairs.queries, pairs.titles, pairs.label_array())))
    recorded = tmp_path / "recorded"
    save_model(LoadedModel(loaded.model, loaded.tokenizer, {**loaded.meta, "dev_data": {
        "path": str(tmp_path / "plain.tsv"), "query_col": "q", "title_col": "doc", "label_col": "rel"}}), recorded)
    result = run("--model", recorded, "--keep-ratio", 0.5, "--method", "kl", "--no-timing", "--bootstrap", 20,
                 "--out", tmp_path / "out", "--preset", "homedepot")
    assert result.exit_code == 0, result.output
    meta = json.loads((tmp_path / "out" / "headcut.json").read_text())
    assert meta["prune"]["scores"]["data"]["fingerprint"] == read_pairs(tmp_path / "plain.tsv").fingerprint


def test_each_column_flag_says_which_pairs_files_of_the_prune_it_reads():
    """Was: --preset, --query-col, --title-col, --label-col and --label-map said nothing of which of --data (or the
    recorded dev data) and --eval-data they read; they read each of them, and --help now says so flag by flag."""
    import typer.main

    helps = {param.opts[0]: " ".join(param.help.split()) for param in
             typer.main.get_command(app).commands["prune"].params}
    for flag in ("--preset", "--query-col", "--title-col", "--label-col", "--label-map"):
        assert helps[flag].endswith("Read for each pairs file of this prune alike: --data (else the model's recorded "
                                    "dev data, over the columns it records) and --eval-data."), (flag, helps[flag])
    assert "read with the column flags --data is read with" in helps["--eval-data"]
    assert "each column flag given replacing its own and --preset all of them" in helps["--data"]


@pytest.mark.parametrize("flags, words", [
    (["--label-col", "rel"], "--label-col says how pairs files are read, and this prune reads none (--scores gives "
                             "the scores, and no --eval-data is given), so it would be ignored; pass --eval-data FILE "
                             "or drop --label-col."),
    (["--preset", "homedepot"], "--preset says how pairs files are read"),
    (["--eval-rows", 10], "--eval-rows samples --eval-data, which is not given, so it would be ignored"),
])
def test_a_flag_for_pairs_the_prune_does_not_read_is_refused_before_work(tmp_path, tiny_grader, flags, words):
    """Was: silently ignored (a column flag with --scores and no --eval-data; --eval-rows without --eval-data, quality
    then measured on the scoring sample)."""
    grader, _ = tiny_grader
    loaded = load_model(grader)
    write_scores(tmp_path / "importance.json", {"ablation": torch.rand(3, 4)},
                 model_info={"path": str(grader), "weights_hash": loaded.weights_hash},
                 data_info={"source": "x", "fingerprint": "y"})
    result = run("--model", grader, "--keep-ratio", 0.5, "--scores", tmp_path / "importance.json", "--out",
                 tmp_path / "out", *flags)
    assert result.exit_code == 2 and words in " ".join(result.stderr.split()), result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags, read", [(["--no-tune"], False), (["--no-tune", "--drop-layers"], True),
                                         ([], True)])
def test_calibrate_with_no_tuning_and_no_layer_search_is_refused_not_ignored(tmp_path, tiny_grader, monkeypatch,
                                                                             flags, read):
    """Was: `--flops 0.5 --no-tune --calibrate 50` pruned, --calibrate silently ignored: only mask tuning and the
    --drop-layers search read the calibration pairs. Refused before the model loads, as --tune-fit is with --no-tune."""
    import headcut.models

    grader, _ = tiny_grader

    def no_load(*args, **kwargs):
        raise AssertionError("the model loaded")

    monkeypatch.setattr(headcut.models, "load_model", no_load)
    result = run("--model", grader, "--flops", 0.5, "--calibrate", 50, *flags, "--out", tmp_path / "out")
    said = " ".join(result.stderr.split())
    if read:
        assert "the model loaded" in str(result.exception), result.output
    else:
        assert result.exit_code == 2 and said == ("error: --calibrate picks the pairs mask tuning fits on, and "
                                                  "--no-tune turns tuning off; drop one of them."), result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("names, keep, heads", [("arguments", "keep_ratio=", "min_heads="),
                                                ("keys", "prune.keep_ratio=", "prune.min_heads="),
                                                ("flags", "--keep-ratio ", "--min-heads ")])
def test_the_library_names_its_arguments_a_recipe_its_keys_and_the_command_its_flags(tmp_path, tiny_grader, names,
                                                                                     keep, heads):
    """Was: prune(loaded, keep_ratio=0.01) and a run recipe's [prune] keep_ratio said '--keep-ratio 0.01 keeps 0
    heads', after scoring the heads first; the model's own head counts are now checked before any work."""
    from headcut.prune import prune, prune_to_budget
    from headcut_grader.errors import UserError

    loaded = load_model(tiny_grader[0])
    stages = []

    def refused(call, **kwargs):
        with pytest.raises(UserError) as caught:
            call(loaded, progress=lambda stage, n, total: stages.append(stage), names=names, **kwargs)
        message = str(caught.value)
        assert names == "flags" or "--" not in message, message
        return message

    assert f"{keep}0.01 keeps round(0.01 x 12) = 0 heads" in refused(prune, keep_ratio=0.01)
    assert f"{heads}5 is more than the 4 heads of a layer" in refused(prune, keep_ratio=1.0, min_heads=5)
    assert (f"{heads}3 needs 9 heads but {keep}0.5 keeps 6; raise {keep.strip(' =')} or lower "
            f"{heads.strip(' =')}") in refused(prune, keep_ratio=0.5, min_heads=3)
    assert "re-scans between steps" in refused(prune, keep_ratio=0.5, iterative=2, scores=tmp_path / "x.json")
    assert stages == []  # refused before any scoring
    flops, drop, fit = {"arguments": ("flops", "drop_layers", "tune_fit"),
                        "keys": ("prune.flops", "prune.drop_layers", "prune.tune_fit"),
                        "flags": ("--flops", "--drop-layers", "--tune-fit")}[names]
    assert f"{fit} 'magic' is unknown" in refused(prune_to_budget, flops=0.5, tune_fit="magic")
    assert f"{drop} plans against {flops};" in refused(prune_to_budget, latency=0.5, drop_layers=True)
    pairs = read_pairs(tiny_grader[1])
    assert "less than the pooler and classifier" in refused(prune_to_budget, flops=0.0001, data=pairs)


@pytest.mark.parametrize("names", ["arguments", "keys", "flags"])
def test_the_inputs_of_a_prune_are_named_as_its_caller_wrote_them(tmp_path, tiny_grader, names):
    """Was: prune(loaded, scores=...) and prune_to_budget(loaded, data=...) refused a missing score file, a model
    without recorded dev data, an already pruned model and too few calibration pairs with --scores, --model,
    --data, --calibrate and --no-tune, flags a Python caller or a run recipe never passed."""
    from headcut.arch import keep_neurons
    from headcut.prune import prune, prune_to_budget
    from headcut_grader.errors import UserError

    loaded = load_model(tiny_grader[0])

    def refused(call, model=loaded, **kwargs):
        with pytest.raises(UserError) as caught:
            call(model, names=names, **kwargs)
        message = str(caught.value)
        assert names == "flags" or "--" not in message, message
        return message

    said = {"arguments": ("scores=", "loaded=", "data=FILE", "data", "tune=False"),
            "keys": ("", "teacher.path=", "data.train=FILE", "data.train", "prune.tune=false"),
            "flags": ("--scores ", "--model ", "--data FILE", "--data", "--no-tune")}[names]
    missing = tmp_path / "none.json"
    assert refused(prune, keep_ratio=0.5, scores=missing).startswith(f"{said[0]}{missing}: no such file")
    no_dev = LoadedModel(loaded.model, loaded.tokenizer, {**loaded.meta, "dev_data": None}, "m")
    assert f"{said[1]}m records no dev data file; pass {said[2]} " in refused(prune, no_dev, keep_ratio=0.5)
    assert refused(prune_to_budget, flops=0.5, data=read_pairs(tiny_grader[1]).sample(3, seed=0)).endswith(
        f"holds only 3; pass more pairs with {said[3]}, or {said[4]}.")
    cut = load_model(tiny_grader[0])
    keep_neurons(cut.model, [[0, 1]] * 3)
    assert refused(prune, LoadedModel(cut.model, cut.tokenizer, cut.meta, "cut"), keep_ratio=0.5).startswith(
        f"{said[1]}cut is already pruned")


def test_a_shared_column_flag_told_of_every_file_keeps_its_other_settings():
    """Was: every_file rebuilt the option from its default, names and help alone, dropping any other setting."""
    import typer

    from headcut.cli.prune import EVERY_FILE, every_file

    shared = typer.Option(None, "--query-col", help="Query column.", metavar="NAME", show_default=False,
                          callback=print, rich_help_panel="Columns")
    told = every_file(shared)
    assert told.help == "Query column." + EVERY_FILE and shared.help == "Query column."
    assert ({k: v for k, v in vars(told).items() if k != "help"}
            == {k: v for k, v in vars(shared).items() if k != "help"})
