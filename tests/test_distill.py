"""Distillation on tiny models: students, the loop, caching, unlabeled pairs, resuming, the artifact."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from headcut.synthetic import synthetic_pairs
from headcut.distill import DistillRecipe, build_student, distill
from headcut_grader.errors import UserError
from headcut.models import LoadedModel, load_model, save_model
from headcut.recipes import from_dict
from conftest import LIVE_UNTIL_KILLED, old_style_temporaries, renamed_columns_file, tiny_model

GRADES = [1, 2, 3, 4, 5]


def tiny_tokenizer():
    """A WordPiece vocabulary of the synthetic pairs' words (97 entries), so tiny models need no download."""
    from transformers import BertTokenizer

    p = synthetic_pairs(500)
    words = sorted({w for t in p.queries + p.titles for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words
    return BertTokenizer(vocab={w: i for i, w in enumerate(vocab)})


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see conftest.one_thread


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
    values = dict(teacher=None if teacher is None else str(teacher), student="bottom-k", keep_layers=2,
                  train_data="synthetic", train_rows=400,
                  dev_rows=150, dev_fraction=0.25, max_length=32, epochs=2, batch_size=16, learning_rate=2e-3,
                  eval_every=10, checkpoint_every=10, seed=0, measure_speed=False)
    values.update(changes)
    if values["student"] != "bottom-k":
        del values["keep_layers"]  # only a bottom-k student reads it
    if values.get("dev_data") and "dev_fraction" not in changes:
        del values["dev_fraction"]  # only a split of train_data reads it
    return from_dict(DistillRecipe, values)


def test_bottom_k_distills_into_a_loadable_artifact(tiny_teacher, tmp_path):
    from headcut.evaluate.predict import predict_logits

    recipe = recipe_for(tiny_teacher, ce_weight=0.0, kd_weight=1.0, temperature=1.0, epochs=4, learning_rate=3e-3,
                        eval_every=1000, measure_speed=True)
    teacher = load_model(tiny_teacher)
    untrained = build_student(recipe, teacher).loaded
    pairs = synthetic_pairs(150, seed=5)
    before = predict_logits(untrained.model, untrained.tokenizer, pairs, max_length=32)
    result = distill(recipe, tmp_path / "student")
    assert result.finished and result.training["teacher_cache"] == "written"
    loaded = load_model(tmp_path / "student")
    assert loaded.model.config.num_hidden_layers == 2
    meta = loaded.meta
    assert meta["kind"] == "distill" and meta["teacher"]["weights_hash"] == teacher.weights_hash
    assert meta["recipe"]["keep_layers"] == 2 and meta["student"]["layer_map"] == [1, 3]
    assert set(meta["metrics"]) == {"teacher", "before", "after", "after_minus_teacher"}
    speed = meta["speed"]  # 2 of 4 layers: about half the encoder FLOPs (embeddings/classifier are not counted)
    assert 1.8 < speed["ideal_speedup"] <= 2.0 and [r["batch_size"] for r in speed["latency"]] == [1, 32]
    assert (meta["metrics"]["after_minus_teacher"]["agreement"]["ci"][0]
            <= meta["metrics"]["after_minus_teacher"]["agreement"]["value"])
    after = dev_logits(tmp_path / "student")
    target = dev_logits(tiny_teacher)
    print(kl(target, before), kl(target, after))
    assert kl(target, after) < 0.5 * kl(target, before)  # the student moved towards its teacher


def test_a_second_run_of_the_same_teacher_on_the_same_pairs_reads_the_first_runs_teacher_logits(tiny_teacher,
                                                                                               tmp_path):
    """Teacher logits are kept in headcut's cache folder, not in the run: another recipe on the same teacher,
    pairs and truncation reads them; another truncation is another key."""
    first = distill(recipe_for(tiny_teacher, epochs=1), tmp_path / "first")
    second = distill(recipe_for(tiny_teacher, epochs=1, learning_rate=1e-3), tmp_path / "second")
    assert first.training["teacher_cache"] == "written" and second.training["teacher_cache"] == "hit"
    cached = sorted((Path(os.environ["HEADCUT_CACHE"]) / "teacher-logits").glob("teacher-logits-*.npy"))
    assert len(cached) == 2  # the train pairs' and the dev pairs'
    shorter = distill(recipe_for(tiny_teacher, epochs=1, max_length=24), tmp_path / "shorter")
    assert shorter.training["teacher_cache"] == "written"


def cached_logits(teacher_dir, cache, **kwargs):
    from headcut.batching import encode
    from headcut.distill.cache import teacher_logits

    teacher, pairs = load_model(teacher_dir), synthetic_pairs(40, seed=6)
    encoded = encode(teacher.tokenizer, pairs, max_length=32)
    return teacher_logits(teacher, pairs, encoded=encoded, max_length=32, cache_dir=cache, **kwargs)


def damage_entry(path: Path, how: str) -> None:
    logits = np.load(path)
    if how == "cut short":
        path.write_bytes(path.read_bytes()[:100])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "not npy":
        path.write_bytes(b"hello world")
    elif how == "pickled":
        np.save(path, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif how == "another shape":
        np.save(path, logits[:5])
    elif how == "huge header":  # claims 20 TB: refused by its header, nothing allocated
        with path.open("wb") as f:
            np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (10 ** 12, 5)})
            f.write(logits.tobytes())
    elif how == "nan":
        np.save(path, np.full_like(logits, np.nan))


@pytest.mark.parametrize("how", ["cut short", "empty", "not npy", "pickled", "another shape", "huge header", "nan"])
def test_a_damaged_teacher_logit_entry_is_a_miss_and_replaced_whole(tiny_teacher, tmp_path, how):
    """Was: a cache entry damaged on disk was a traceback (EOFError, ValueError) on every later run of that teacher
    and pairs, one of another shape an IndexError mid-epoch, and NaNs 'training diverged'. Now it is computed again
    and replaced, as a cached layer cost table that does not fit is timed again."""
    cache = tmp_path / "cache"
    logits, hit = cached_logits(tiny_teacher, cache)
    assert not hit
    (entry,) = cache.glob("teacher-logits-*.npy")
    damage_entry(entry, how)
    again, hit = cached_logits(tiny_teacher, cache)
    assert not hit and np.array_equal(again, logits)
    assert np.array_equal(np.load(entry), logits) and cached_logits(tiny_teacher, cache)[1] is True


def test_a_teacher_logit_write_cut_short_leaves_no_temporary(tiny_teacher, tmp_path, monkeypatch):
    """Was: a Ctrl-C or a full disk while np.save wrote an entry left .teacher-logits-KEY.npy.PID.tmp (as large as
    the logits) in the cache, never removed."""
    def cut_short(f, array):
        f.write(b"\x93NUMPY half an entry")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "save", cut_short)
    with pytest.raises(KeyboardInterrupt):
        cached_logits(tiny_teacher, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
    monkeypatch.undo()
    assert cached_logits(tiny_teacher, tmp_path / "cache")[1] is False  # no half entry was taken for a hit


def test_the_teacher_logit_cache_removes_a_dead_writers_temporaries_but_not_a_live_ones(tiny_teacher, tmp_path):
    """Was: a run killed while it wrote an entry left its temporary in the cache for good; now the next write
    removes what a process of this host that is gone left, of any key, and leaves a live writer's alone."""
    import socket
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    live = subprocess.Popen([sys.executable, "-c", LIVE_UNTIL_KILLED], stdin=subprocess.PIPE)
    cache, host = tmp_path / "cache", socket.gethostname()
    cache.mkdir()
    names = {pid: f".teacher-logits-{'0' * 16}.npy.tmp-{pid}@{host}-0123456789" for pid in (dead.pid, live.pid)}
    for name in names.values():
        (cache / name).write_bytes(b"\x93NUMPY a killed write")
    try:
        logits, hit = cached_logits(tiny_teacher, cache)
    finally:
        live.kill()
        live.wait()
    assert not hit and logits.shape == (40, 5)
    assert sorted(p.name for p in cache.iterdir()) == sorted([names[live.pid], *(p.name for p in cache.glob("t*"))])
    assert len(list(cache.glob("teacher-logits-*.npy"))) == 1


def test_the_teacher_logit_cache_removes_old_style_temporaries_of_dead_writers_a_day_old(tiny_teacher, tmp_path):
    """Was: .teacher-logits-KEY.npy.PID.tmp, which headcut wrote before its temporaries named their host, stayed in
    the cache for good (as large as the logits): the sweep knew only the new names. Now one whose pid is no live
    process and that nothing wrote for a day goes; a live pid's, or a fresh one's (its host cannot be told: a
    writer on another machine sharing the cache), stays; so does a name whose pid no process can have."""
    cache = tmp_path / "cache"
    cache.mkdir()
    with old_style_temporaries(cache, lambda case, pid: f".teacher-logits-{case[0] * 16}.npy.{pid}.tmp") as names:
        assert cached_logits(tiny_teacher, cache)[1] is False
    left = {p.name for p in cache.glob(".*")}
    assert left == {names["live"], names["fresh"], names["no pid"]}, left


def test_rerun_after_a_kill_resumes_and_matches_an_uninterrupted_run(tiny_teacher, tmp_path):
    recipe = recipe_for(tiny_teacher, eval_every=5, checkpoint_every=5)  # 19 steps per epoch, 38 in all
    whole = distill(recipe, tmp_path / "whole")
    killed = distill(recipe, tmp_path / "resumed", stop_after_steps=12)  # last checkpoint: step 10
    assert not killed.finished and not (tmp_path / "resumed").exists()
    assert (tmp_path / "resumed.partial" / "checkpoint" / "loop.json").exists()
    resumed = distill(recipe, tmp_path / "resumed")
    assert resumed.finished and resumed.training["teacher_cache"] == "hit"
    assert not (tmp_path / "resumed.partial").exists()
    assert resumed.training["steps"] == whole.training["steps"] == 38
    for name in ("accuracy", "spearman", "loss"):
        assert resumed.metrics["after"][name] == pytest.approx(whole.metrics["after"][name], abs=1e-4)
    a, b = dev_logits(tmp_path / "whole"), dev_logits(tmp_path / "resumed")
    np.testing.assert_allclose(a, b, atol=1e-4)


def test_unlabeled_pairs_are_graded_by_the_teacher(tiny_teacher, tmp_path):
    from headcut.distill.run import UNLABELED, with_unlabeled
    from headcut.finetune import load_data

    extra = synthetic_pairs(60, seed=9)
    path = tmp_path / "logs.tsv"
    path.write_text("query\ttitle\n" + "".join(f"{q}\t{t}\n" for q, t in zip(extra.queries, extra.titles)))
    recipe = recipe_for(tiny_teacher, unlabeled_data=str(path), epochs=1, ce_weight=1.0)
    train_pairs, dev = load_data(recipe)
    merged, labels = with_unlabeled(recipe, train_pairs, dev)
    assert len(merged) == len(train_pairs) + 60
    assert ((labels[: len(train_pairs)] == train_pairs.label_array()).all()
            and (labels[len(train_pairs):] == UNLABELED).all())
    result = distill(recipe, tmp_path / "student")
    assert result.finished
    assert load_model(tmp_path / "student").meta["train_data"]["rows"] == len(train_pairs) + 60


def test_unlabeled_pairs_that_hold_every_dev_pair_are_refused(tmp_path):
    """Was: unlabeled_data naming the dev file (or a file holding its pairs) was trained on with the teacher's grades,
    and checkpoints were chosen on those same pairs. A copy saved another way (here with CRLF line ends) is found
    among the pairs read."""
    from headcut.distill.run import with_unlabeled
    from headcut.finetune import load_data

    train, dev = (renamed_columns_file(tmp_path / name, synthetic_pairs(30, seed=seed))
                  for name, seed in (("train.tsv", 1), ("dev.tsv", 2)))
    copy = tmp_path / "logs.tsv"
    copy.write_bytes(dev.read_bytes().replace(b"\n", b"\r\n"))
    columns = dict(query_col="q", title_col="doc", label_col="rel")
    recipe = recipe_for(tmp_path / "teacher", train_data=str(train), dev_data=str(dev), unlabeled_data=str(copy),
                        **columns)
    train_pairs, dev_pairs = load_data(recipe)
    with pytest.raises(UserError, match=rf"^dev_data {dev}: each of its 30 dev pairs is also among the pairs the run "
                                        rf"trains on \(train_data {train} and unlabeled_data {copy}\), so checkpoints"):
        with_unlabeled(recipe, train_pairs, dev_pairs)


@pytest.mark.parametrize("same", ["the dev file", "a byte copy"])
def test_unlabeled_data_of_the_dev_files_bytes_is_refused_when_the_recipe_is_read(tmp_path, same):
    """Was: found only among the pairs read, after the teacher and the student had loaded; train_data of dev_data's
    bytes was refused when the recipe was read, unlabeled_data was not."""
    dev = renamed_columns_file(tmp_path / "dev.tsv", synthetic_pairs(30, seed=2))
    unlabeled = dev if same == "the dev file" else tmp_path / "copy.tsv"
    unlabeled.write_bytes(dev.read_bytes())
    with pytest.raises(UserError, match=rf"^recipe: dev_data {dev} holds the pairs of unlabeled_data, so checkpoints"):
        recipe_for(tmp_path / "no-teacher-yet", dev_data=str(dev), unlabeled_data=str(unlabeled), query_col="q",
                   title_col="doc", label_col="rel")


def test_unlabeled_pairs_are_read_as_texts_whatever_gold_they_hold(tmp_path):
    """Their gold is never used, so a preset that reads another data set's gold column neither reads nor refuses
    theirs (a file with 'label' under preset homedepot); the run's check reads them the same way."""
    from headcut.distill.run import UNLABELED, with_unlabeled
    from headcut.pipeline.checks import check_readable
    from headcut.pipeline.recipe import DataSection

    path = tmp_path / "logs.tsv"
    path.write_text("query\ttitle\tlabel\ndrill\tcordless drill\t2\npaint\tred lamp\t0\n")
    recipe = recipe_for(tmp_path / "teacher", preset="homedepot", unlabeled_data=str(path))  # only named
    train = synthetic_pairs(10, seed=1)
    merged, labels = with_unlabeled(recipe, train, synthetic_pairs(4, seed=2))
    assert len(merged) == 12 and (labels[10:] == UNLABELED).all()
    check_readable(str(path), DataSection(preset="homedepot"), texts_only=True)
    with pytest.raises(UserError, match="no label column 'grade'"):
        check_readable(str(path), DataSection(preset="homedepot"))  # a file whose gold a stage reads


def test_recipe_keys_name_the_columns_and_its_messages_name_the_keys(tiny_teacher, tmp_path):
    """A recipe reads files whose columns differ from the preset's (query_col, title_col, label_col), and a
    file it cannot read is refused with the recipe key that fixes it: distill and finetune have no column flags."""
    from headcut.distill.run import with_unlabeled
    from headcut.finetune import dev_record, load_data

    pairs = synthetic_pairs(40, seed=3)
    path = renamed_columns_file(tmp_path / "renamed.tsv", pairs)
    train_path = renamed_columns_file(tmp_path / "train.tsv", synthetic_pairs(40, seed=4))  # dev may not be train
    files = dict(train_data=str(train_path), dev_data=str(path), train_rows=None, dev_rows=None)
    recipe = recipe_for(tiny_teacher, **files, query_col="q", title_col="doc", label_col="rel",
                        unlabeled_data=str(train_path))  # read alike; dev pairs may not be trained on
    train, dev = load_data(recipe)
    assert sorted(zip(dev.queries, dev.titles, dev.label_array())) == sorted(zip(pairs.queries, pairs.titles,
                                                                                pairs.label_array()))
    assert len(with_unlabeled(recipe, train, dev)[0]) == 80
    recorded = dev_record(recipe, dev)  # what the artifact's headcut.json keeps, so prune reads the file alike
    assert (recorded["path"], recorded["query_col"], recorded["title_col"], recorded["label_col"]) == (
        str(path.resolve()), "q", "doc", "rel")
    with pytest.raises(UserError, match=r"no column 'query' .*name it with --set query_col=NAME\."):
        load_data(recipe_for(tiny_teacher, **files))
    with pytest.raises(UserError, match=r"no label column 'grade' .*name it with --set label_col=NAME\."):
        load_data(recipe_for(tiny_teacher, **files, query_col="q", title_col="doc"))
    with pytest.raises(UserError, match=r"^recipe: key 'preset' is 'nope', which is unknown; choose one of: homedepot"):
        recipe_for(tiny_teacher, **files, preset="nope")  # refused as the recipe is read, before any work


def test_a_key_no_part_of_the_recipe_reads_is_refused():
    """Set for another kind of student, or unlabeled_rows without unlabeled_data, a key would do nothing."""
    with pytest.raises(UserError, match=r"key 'keep_layers' applies to student=bottom-k only, and this recipe's "
                                        r"student is pruned; remove it \(or set student=bottom-k\)\."):
        from_dict(DistillRecipe, dict(teacher="t", train_data="synthetic", student="pruned", student_model="s",
                                      keep_layers=2))
    with pytest.raises(UserError, match="key 'student_hidden' applies to student=config only"):
        recipe_for("t", student_hidden=64)
    with pytest.raises(UserError, match="key 'student_model' applies to student=pruned only"):
        recipe_for("t", student_model="s")
    with pytest.raises(UserError, match="key 'unlabeled_rows' is set but unlabeled_data is not"):
        recipe_for("t", unlabeled_rows=10)
    config = dict(teacher="t", train_data="synthetic", student="config", student_hidden=64, keep_layers=3)
    assert from_dict(DistillRecipe, config).keep_layers == 3  # a recipe file's key at its default: not set
    with pytest.raises(UserError, match="key 'keep_layers' applies to student=bottom-k only"):  # a --set names it
        from_dict(DistillRecipe, config, origins={"keep_layers": "--set keep_layers=3"})


def test_bottom_k_student_is_exactly_the_teachers_lower_layers(tiny_teacher):
    teacher = load_model(tiny_teacher, attn_implementation="eager")
    student = build_student(recipe_for(tiny_teacher, keep_layers=3), teacher)
    assert student.loaded.model.config.num_hidden_layers == 3 and teacher.model.config.num_hidden_layers == 4
    batch = teacher.tokenizer(["red drill"], ["Acme Pro red cordless drill"], return_tensors="pt")
    with torch.no_grad():
        t = teacher.model(**batch, output_hidden_states=True).hidden_states
        s = student.loaded.model(**batch, output_hidden_states=True).hidden_states
    assert len(s) == 4
    for i in range(4):
        torch.testing.assert_close(s[i], t[i])


@pytest.mark.parametrize("size, words", [
    (dict(student_layers=6), "student_layers=6 is larger than the teacher's 4"),
    (dict(student_layers=6, layer_map=[0, 0, 1, 2, 3, 3]), "student_layers=6 is larger than the teacher's 4"),
    (dict(student_hidden=65536, student_heads=2), "student_hidden=65536 is larger than the teacher's 32"),
    (dict(student_heads=8), "student_heads=8 is larger than the teacher's 4"),
    (dict(student_intermediate=262144), "student_intermediate=262144 is larger than the teacher's 37"),
])
def test_a_config_student_larger_than_its_teacher_is_refused_by_the_size_that_is(tiny_teacher, size, words):
    """Was: a deeper student blamed a layer_map never set; sizes within the keys' ranges but above the teacher's
    (65,536 wide) were killed for memory at 24 GB before a step."""
    import dataclasses

    with pytest.raises(UserError, match=rf"^recipe: {re.escape(words)}; a config student is a smaller model"):
        recipe_for(tiny_teacher, student="config", **{"student_layers": 2, **size})  # refused when read
    recipe = dataclasses.replace(recipe_for(tiny_teacher, student="config", student_layers=2), **size)  # unchecked
    with pytest.raises(UserError, match=rf"^{re.escape(words)}; a config student is a smaller model"):
        build_student(recipe, load_model(tiny_teacher))


def test_config_student_starts_from_mapped_teacher_slices(tiny_teacher, tmp_path):
    teacher = load_model(tiny_teacher)
    recipe = recipe_for(tiny_teacher, student="config", student_layers=2, student_hidden=16, student_heads=2,
                        student_intermediate=20, layer_map=[1, 3])
    student = build_student(recipe, teacher).loaded.model
    t_layers, s_layers = teacher.model.bert.encoder.layer, student.bert.encoder.layer
    assert student.config.hidden_size == 16 and len(s_layers) == 2
    torch.testing.assert_close(s_layers[0].attention.self.query.weight,
                               t_layers[1].attention.self.query.weight[:16, :16])
    torch.testing.assert_close(s_layers[1].intermediate.dense.weight, t_layers[3].intermediate.dense.weight[:20, :16])
    torch.testing.assert_close(student.bert.embeddings.word_embeddings.weight,
                               teacher.model.bert.embeddings.word_embeddings.weight[:, :16])
    # narrower than the teacher: the hidden-state loss learns a projection per mapped layer
    result = distill(from_dict(DistillRecipe, {**recipe.__dict__, "hidden_weight": 0.5, "epochs": 0.5}),
                     tmp_path / "student")
    assert result.finished
    assert load_model(tmp_path / "student").model.config.hidden_size == 16


def test_pruned_student_trains_against_the_teacher_its_artifact_names(tiny_teacher, tmp_path):
    from headcut.arch import heads_per_layer, keep_heads, keep_neurons, layer_parts, neurons_per_layer

    cut = load_model(tiny_teacher)
    keep_heads(cut.model, [[0, 1], [2], [], [1, 3]])
    keep_neurons(cut.model, [list(range(0, 37, 2)), [], list(range(5)), list(range(37))])  # as --flops cuts
    # headcut prune records the model it cut from as source.path
    save_model(cut, tmp_path / "pruned", meta={"kind": "prune", "source": {"path": str(tiny_teacher)}})
    recipe = recipe_for(None, student="pruned", student_model=str(tmp_path / "pruned"), epochs=0.5,
                        hidden_weight=0.5, attention_weight=0.5)  # online teacher, eager attention
    result = distill(recipe, tmp_path / "student")
    # the teacher runs every step for its hidden states and attention maps: no train logits cached beforehand
    assert result.finished and result.training["teacher_cache"] == "online"
    assert len(list((Path(os.environ["HEADCUT_CACHE"]) / "teacher-logits").glob("*.npy"))) == 1  # the dev pairs'
    student = load_model(tmp_path / "student")
    assert heads_per_layer(student.model) == [2, 1, 0, 2] and neurons_per_layer(student.model) == [19, 0, 5, 37]
    assert [p.head_ids for p in layer_parts(student.model)] == [[0, 1], [2], [], [1, 3]]  # original ids survive
    assert student.meta["teacher"]["path"] == str(tiny_teacher) and student.meta["student"]["layer_map"] == [0, 1, 2, 3]
    with pytest.raises(UserError, match="names no teacher"):
        save_model(cut, tmp_path / "orphan", meta={})
        distill(recipe_for(None, student="pruned", student_model=str(tmp_path / "orphan")),
                tmp_path / "never")


def test_a_pruned_student_is_never_trained_against_another_model_at_its_recorded_teacher_path(tiny_teacher, tmp_path,
                                                                                              monkeypatch):
    """Was: prune recorded its --model as typed (source.path 'teacher'), so distilling the pruned student from
    another directory trained it against whatever folder 'teacher' named there, exit 0."""
    import shutil

    from headcut.prune.artifact import prune_meta

    monkeypatch.chdir(tmp_path)
    shutil.copytree(tiny_teacher, "teacher")
    cut = load_model("teacher")
    assert prune_meta(cut, {})["source"]["path"] == str(tmp_path / "teacher")  # found from any directory
    save_model(cut, tmp_path / "pruned", meta={"kind": "prune", "source": {"path": "teacher",
                                                                          "weights_hash": cut.weights_hash}})
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    other = tiny_model("bert", attn="sdpa", vocab_size=len(cut.tokenizer), num_hidden_layers=4, seed=1)
    save_model(LoadedModel(other, cut.tokenizer, {"grades": GRADES, "max_length": 32}), "teacher")
    with pytest.raises(UserError, match=f"was cut from a model of weights {cut.weights_hash}, but teacher, the "
                                        "teacher its headcut.json names, holds weights .*pass --set teacher=DIR"):
        distill(recipe_for(None, student="pruned", student_model=str(tmp_path / "pruned")), tmp_path / "student")
    assert not (tmp_path / "student.partial").exists()


def test_a_pruned_students_recorded_teacher_is_hashed_once_per_run(tiny_teacher, tmp_path, monkeypatch):
    """Was: reading the recipe hashed the teacher's weights to check they are the ones the student was cut from, then
    loading the teacher hashed them again (0.2 s for MiniLM, more for a large teacher); now once, while the file
    stays as it was. Rewritten in place, with its old modification time put back, it is hashed again and refused."""
    import shutil

    from headcut import weight_files
    from headcut.arch import keep_heads
    from headcut_grader.files import file_hash

    teacher = shutil.copytree(tiny_teacher, tmp_path / "teacher")  # a file not hashed before
    weights = teacher / "model.safetensors"
    cut = load_model(tiny_teacher)
    keep_heads(cut.model, [[0, 1], [2], [3], [1, 3]])
    save_model(cut, tmp_path / "pruned", meta={"kind": "prune", "source": {"path": str(teacher),
                                                                          "weights_hash": file_hash(weights)}})
    hashed = []
    monkeypatch.setattr(weight_files, "file_hash",
                        lambda path, **kw: hashed.append(Path(path)) or file_hash(path, **kw))
    recipe = recipe_for(None, student="pruned", student_model=str(tmp_path / "pruned"), epochs=0.25)
    assert distill(recipe, tmp_path / "student").finished
    assert hashed.count(weights) == 1, hashed

    before = weights.stat()
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # a weight's last byte: the same size, another model
    weights.write_bytes(bytes(data))
    os.utime(weights, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(UserError, match="was cut from a model of weights"):
        recipe_for(None, student="pruned", student_model=str(tmp_path / "pruned"))
    assert hashed.count(weights) == 2


@pytest.mark.parametrize("keep, words", [(4, "keep_layers=4 keeps all of the teacher's 4 layers"),
                                         (9, "keep_layers=9 is more than the teacher's 4 layers")])
@pytest.mark.parametrize("given", ["file", "--set"])
def test_a_bottom_k_student_of_the_teachers_layers_or_more_says_which_and_where_it_was_set(tiny_teacher, tmp_path,
                                                                                          keep, words, given):
    """Was: "keep_layers=9 keeps the whole 4-layer teacher; pass --set keep_layers=K" (9 is more than it has), for a
    value of the recipe file too, said once the teacher had loaded."""
    import dataclasses

    from headcut.recipes import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"teacher: {tiny_teacher}\ntrain_data: synthetic\n"
                      f"keep_layers: {keep if given == 'file' else 2}\n")
    overrides = [f"keep_layers={keep}"] if given == "--set" else []
    where = f"{recipe} with --set keep_layers={keep}" if overrides else str(recipe)
    with pytest.raises(UserError, match=rf"^{re.escape(where)}: {words}, and a bottom-k student keeps fewer; set "
                                        r"keep_layers to 3 or less\.$"):
        load_recipe(DistillRecipe, recipe, overrides=overrides)
    # built in Python: build_student says it
    unchecked = dataclasses.replace(recipe_for(tiny_teacher), keep_layers=keep)
    with pytest.raises(UserError, match=rf"^{words}, and a bottom-k student keeps fewer"):
        build_student(unchecked, load_model(tiny_teacher))


@pytest.mark.parametrize("student, words", [("teacher", "is the teacher's own folder"),
                                            ("copy", "has the same layers, heads and FFN neurons as the teacher")])
def test_a_pruned_student_no_smaller_than_its_teacher_is_refused(tiny_teacher, tmp_path, student, words):
    """Was: student: pruned with student_model the teacher itself (or a model of its very shape) distilled it into a
    copy of itself, exit 0. Refused when the recipe is read, and by build_student for a recipe built in Python."""
    import dataclasses
    import shutil

    folder = tiny_teacher if student == "teacher" else shutil.copytree(tiny_teacher, tmp_path / "copy")
    with pytest.raises(UserError, match=rf"^recipe: student_model {re.escape(str(folder))} {words}"):
        recipe_for(tiny_teacher, student="pruned", student_model=str(folder))
    pruned = recipe_for(tiny_teacher, student="pruned", student_model=str(tmp_path / "not-there-yet"))
    with pytest.raises(UserError, match=rf"^student_model {re.escape(str(folder))} {words}.*, so the student would be "
                                        "no smaller than its teacher"):
        distill(dataclasses.replace(pruned, student_model=str(folder)), tmp_path / "student")
    assert not (tmp_path / "student.partial").exists()


def test_a_pruned_student_of_its_recorded_teachers_shape_is_refused_before_any_model_loads(tiny_teacher, tmp_path):
    """Was: a pruned student whose teacher only its headcut.json names (the recipe's teacher null), of the teacher's
    very shape, was refused only once both models had loaded. Now when the recipe is read, on their outlines."""
    copy = load_model(tiny_teacher)
    save_model(copy, tmp_path / "copy", meta={"kind": "prune", "source": {"path": str(tiny_teacher),
                                                                         "weights_hash": copy.weights_hash}})
    with pytest.raises(UserError, match=rf"^recipe: student_model {re.escape(str(tmp_path / 'copy'))} has the same "
                                        rf"layers, heads and FFN neurons as the teacher "
                                        rf"{re.escape(str(tiny_teacher))}"):
        recipe_for(None, student="pruned", student_model=str(tmp_path / "copy"))


def test_a_teacher_of_other_grades_is_refused_as_the_recipe_is_read(tiny_teacher, tmp_path):
    """Was: `--set grades=[0,1,2,3,4]` with a teacher of grades 1..5 was refused only after the teacher loaded, led by
    no recipe. Now its headcut.json is read with the recipe: led by the file and --set values, naming the key and
    the teacher's grades; a recipe built in Python is still refused by distill, before any folder is made."""
    import dataclasses

    from headcut.recipes import find_recipe, load_recipe

    sets = [f"teacher={tiny_teacher}", "grades=[0,1,2,3,4]"]
    lead = f"{find_recipe('minilm_synthetic_cpu', kind='distill')} with --set {sets[0]}, --set {sets[1]}"
    words = (rf"key 'grades' is \[0, 1, 2, 3, 4\], but the teacher {re.escape(str(tiny_teacher))} grades "
             r"\[1, 2, 3, 4, 5\]; set grades to the teacher's \(--set grades=\[1,2,3,4,5\]\), or pass a teacher")
    with pytest.raises(UserError, match=rf"^{re.escape(lead)}: {words}"):
        load_recipe(DistillRecipe, "minilm_synthetic_cpu", overrides=sets, kind="distill")
    unchecked = dataclasses.replace(recipe_for(tiny_teacher), grades=(0, 1, 2, 3, 4))
    with pytest.raises(UserError, match=rf"^{words}"):
        distill(unchecked, tmp_path / "student")
    assert not (tmp_path / "student.partial").exists()


def test_user_errors_name_the_fix(tiny_teacher, tmp_path):
    with pytest.raises(UserError, match="keep_layers=4 keeps all of the teacher's 4 layers"):
        distill(recipe_for(tiny_teacher, keep_layers=4), tmp_path / "a")
    with pytest.raises(UserError, match="no such folder"):
        distill(recipe_for(tmp_path / "typo"), tmp_path / "b")
    assert not (tmp_path / "a.partial").exists() and not (tmp_path / "b.partial").exists()
    with pytest.raises(UserError, match="no teacher; pass --set teacher"):
        recipe_for(None)
    with pytest.raises(UserError, match="every loss weight is 0"):
        recipe_for(tiny_teacher, kd_weight=0.0, ce_weight=0.0)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    with pytest.raises(UserError, match="not empty"):
        distill(recipe_for(tiny_teacher), tmp_path / "full")


def test_a_dev_set_of_one_grade_is_refused_before_training(tiny_teacher, tmp_path):
    """Was: the student's checkpoints chosen on Spearman against one grade, 0.0000 at every evaluation."""
    dev = tmp_path / "dev.tsv"
    dev.write_text("query\ttitle\tgrade\n" + "".join(f"q{i % 2}\ttitle {i}\t4\n" for i in range(10)))
    with pytest.raises(UserError, match=r"dev_data .*dev.tsv: all 10 dev pairs have grade 4; Spearman"):
        distill(recipe_for(tiny_teacher, dev_data=str(dev)), tmp_path / "student")
    assert not (tmp_path / "student.partial").exists()


def test_a_synthetic_dev_set_is_recorded_without_a_file_path(tiny_teacher, tmp_path):
    """dev_data 'synthetic:1' is a generated draw, not a file: the artifact records no path for it."""
    recipe = recipe_for(tiny_teacher, dev_data="synthetic:1", train_rows=64, dev_rows=32, epochs=0.5, eval_every=100)
    distill(recipe, tmp_path / "student")
    meta = json.loads((tmp_path / "student" / "headcut.json").read_text())
    assert meta["dev_data"]["path"] is None and meta["dev_data"]["source"].startswith("synthetic")


def test_a_pruned_student_without_some_layers_matches_each_kept_layer_to_its_original(tiny_teacher, tmp_path):
    """A layer-removed artifact (`prune --drop-layers`): kept layer i still computes original layer ids[i], so the
    hidden-state loss must compare it with that teacher layer, not with an evenly spread one."""
    from headcut.arch import keep_layers

    cut = load_model(tiny_teacher)
    keep_layers(cut.model, [0, 2, 3])  # even spreading would map 3 layers of 4 to [0, 1, 3]
    save_model(cut, tmp_path / "pruned", meta={"kind": "prune", "source": {"path": str(tiny_teacher)}})
    recipe = recipe_for(None, student="pruned", student_model=str(tmp_path / "pruned"), epochs=0.25, hidden_weight=0.5)
    result = distill(recipe, tmp_path / "student")
    assert result.finished and load_model(tmp_path / "student").meta["student"]["layer_map"] == [0, 2, 3]


@pytest.mark.parametrize("changes, words", [
    # bottom-k keeps 2 of the 4 teacher layers: a map names one teacher layer, 0..3, for each
    ({"layer_map": [5, 5], "hidden_weight": 0.5},
     "layer_map=[5, 5] names a layer the 4-layer teacher lacks; use 0..3."),
    ({"layer_map": [0, 1, 2], "attention_weight": 0.5}, "layer_map=[0, 1, 2] has 3 entries for 2 student layers"),
    ({"layer_map": [1], "hidden_weight": 0.5}, "layer_map=[1] has 1 entries for 2 student layers"),
    # a config student of the teacher's width 32 and 4 heads: each head an equal share of the width
    ({"student": "config", "student_layers": 2, "student_heads": 3},
     "the teacher's width 32 (student_hidden unset) is not divisible by student_heads=3, and each head takes an equal "
     "share of the width; pick student_hidden and student_heads that divide."),
    ({"student": "config", "student_layers": 2, "student_hidden": 30},
     "student_hidden=30 is not divisible by the teacher's heads 4 (student_heads unset)"),
    ({"student": "config", "student_layers": 2, "layer_map": [0, 4]}, "layer_map=[0, 4] names a layer the 4-layer"),
])
def test_a_student_that_does_not_fit_the_teacher_is_refused_naming_the_recipe_as_it_is_read(tiny_teacher, changes,
                                                                                             words):
    """Before: an IndexError inside the loss (too many or out of range), or one layer matched silently. Then: one
    sentence from build_student once the teacher had loaded (under `headcut run`, after the teacher stage, which may
    train for an hour), naming no recipe, and blaming a student_hidden nobody set (the teacher's width). Now the recipe
    is refused as it is read (from_dict reads no weights), led by its file; build_student still refuses a recipe
    replace()d in Python."""
    import dataclasses

    from headcut.distill.students import build_student
    from headcut.models import load_model

    values = {"teacher": str(tiny_teacher), "train_data": "synthetic", "max_length": 32, "hidden_weight": 0.5,
              **changes}
    if values.get("student", "bottom-k") == "bottom-k":
        values["keep_layers"] = 2
    with pytest.raises(UserError, match="^r.yaml: " + re.escape(words)):
        from_dict(DistillRecipe, values, where="r.yaml")
    built = dataclasses.replace(recipe_for(tiny_teacher, hidden_weight=0.5), **{"hidden_weight": 0.5, **changes})
    with pytest.raises(UserError, match="^" + re.escape(words)):
        build_student(built, load_model(tiny_teacher))


def test_a_layer_map_no_loss_reads_is_refused(tiny_teacher):
    with pytest.raises(UserError, match="key 'layer_map' matches layers for the hidden-state and attention losses, "
                                        "which are off"):
        recipe_for(tiny_teacher, layer_map=[0, 2])
    assert recipe_for(tiny_teacher, layer_map=[0, 2], hidden_weight=0.5).layer_map == (0, 2)


def test_config_student_refuses_heads_that_do_not_divide_by_the_recipe_check_itself(tiny_teacher):
    """config_student, called from Python, refuses sizes that do not divide with the recipe's sentence (one check,
    distill.sizes.check_heads_divide; was a second copy of it in students.py with its own words)."""
    from headcut.distill.students import config_student

    with pytest.raises(UserError, match=r"^student_hidden=30 is not divisible by the teacher's heads 4 \(student_heads "
                                        r"unset\), and each head takes an equal share of the width"):
        config_student(load_model(tiny_teacher).model, layers=2, hidden=30, heads=None, intermediate=None,
                       layer_map=[0, 1])
