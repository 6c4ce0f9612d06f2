"""Every shipped recipe loads into its dataclass without running anything; bad keys and types are errors."""
from __future__ import annotations

import re

import pytest
import yaml

from headcut.distill import DistillRecipe
from headcut_grader.errors import UserError
from headcut.finetune import FinetuneRecipe
from headcut.recipes import RECIPE_ROOT, builtin_recipes, load_recipe

KINDS = {"finetune": FinetuneRecipe, "distill": DistillRecipe}
# Keys a shipped recipe leaves null because the user must supply them (data files, their own artifacts).
USER_SUPPLIED = ("train_data", "student_model")


@pytest.mark.parametrize("name", builtin_recipes())
def test_every_shipped_recipe_is_valid(name):
    kind = name.split("/")[0]
    if kind == "run":  # a pipeline recipe: its sections and the finetune/distill recipes they name
        from headcut.pipeline import load_pipeline

        path = RECIPE_ROOT / f"{name}.yaml"
        assert path.read_text().startswith("#"), f"{path} should open with a comment saying what it is for"
        data = yaml.safe_load(path.read_text())
        supplied = [f"{section}.{key}={key}.tsv" for section, keys in data.items() if isinstance(keys, dict)
                    for key, value in keys.items() if value is None and key in ("path", "train", "dev", "test")]
        load_pipeline(name, overrides=supplied)  # files are not opened until a stage runs
        return
    assert kind in KINDS, f"recipes/{kind}/ has no recipe class in tests/test_recipes.py KINDS; add it"
    path = RECIPE_ROOT / f"{name}.yaml"
    text = path.read_text()
    assert text.startswith("#"), f"{path} should open with a comment saying what it is for"
    data = yaml.safe_load(text)
    overrides = [f"{k}=x" for k in USER_SUPPLIED if k in data and data[k] is None]
    recipe = load_recipe(KINDS[kind], name, overrides=overrides)
    assert {k: getattr(recipe, k) for k in data if k not in USER_SUPPLIED} == {
        k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k not in USER_SUPPLIED}


@pytest.mark.parametrize("cls, kind, given, other", [
    (FinetuneRecipe, "finetune", "distill/minilm_synthetic_cpu", "distill"),  # under recipes/distill/
    (DistillRecipe, "distill", "finetune/minilm_synthetic_cpu", "finetune"),
    (DistillRecipe, "distill", "run/quickstart", "run"),
    (FinetuneRecipe, "finetune", "COPY", "distill"),  # a copy elsewhere: its keys are a distill recipe's
    # a copy elsewhere one key (model) away from distill's: was "unknown key 'model'" and distill's keys
    (DistillRecipe, "distill", "COPY", "finetune"),
])
def test_a_recipe_of_another_kind_is_said_to_be_one_with_the_wanted_kind_s_built_ins(tmp_path, cls, kind, given,
                                                                                       other):
    """Was: every key the wanted kind does not take listed as unknown, then all its valid keys."""
    if given == "COPY":
        given = str(tmp_path / "mine.yaml")
        (tmp_path / "mine.yaml").write_text((RECIPE_ROOT / f"{other}/minilm_synthetic_cpu.yaml").read_text())
    with pytest.raises(UserError) as err:
        load_recipe(cls, given, kind=kind, flag="")
    assert str(err.value) == (f"{given} is a {other} recipe, but a {kind} recipe is wanted here; pass one, such as a "
                              f"built-in: {', '.join(builtin_recipes(kind))}.")
    from headcut.pipeline import load_pipeline

    key = {"finetune": "teacher.recipe", "distill": "distill.bottom3.recipe"}[kind]
    if other != "run":
        with pytest.raises(UserError, match=rf"^--set {re.escape(key)}={given} is a {other} recipe, but a {kind} "):
            load_pipeline("quickstart", overrides=[f"{key}={given}"])


def test_the_shipped_distill_recipes_cover_every_student_kind():
    kinds = set()
    for name in builtin_recipes("distill"):
        pruned = "student_model:" in (RECIPE_ROOT / f"{name}.yaml").read_text()  # only a pruned student reads it
        kinds.add(load_recipe(DistillRecipe, name, overrides=["train_data=x"] + ["student_model=x"] * pruned).student)
    assert kinds == {"bottom-k", "pruned", "config"}


def test_a_misspelt_key_names_itself_and_the_valid_keys(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("teacher: runs/teacher\ntrain_data: x\ntemprature: 3\n")
    with pytest.raises(UserError, match=r"unknown key 'temprature' \(did you mean 'temperature'\?\); "
                                        r"valid keys are: .*teacher, .*temperature"):
        load_recipe(DistillRecipe, path)
    with pytest.raises(UserError, match="unknown key 'learning_rat' \\(did you mean 'learning_rate'\\?\\)"):
        load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=["learning_rat=1e-4"])


@pytest.mark.parametrize("override, message", [
    ("temperature=hot", "key 'temperature' must be a number, not 'hot'"),
    ("keep_layers=2.5", "key 'keep_layers' must be a whole number"),
    ("student=tiny", "key 'student' is 'tiny'; choose one of bottom-k, pruned, config"),
    ("cache_teacher=sometimes", "key 'cache_teacher' must be true or false"),
    ("layer_map=3", "key 'layer_map' must be a list"),
    ("tune_fields=[seed]", "tune_fields names 'seed', which is not tunable"),
    ("temperature=0", r"key 'temperature' is 0, which is out of range; it must be in \[0.05, 100\]"),
    ("temperature=1e-300", r"key 'temperature' is 1e-300, which is out of range"),  # was a NaN loss after the cache
])
def test_bad_values_are_errors_that_name_the_key(override, message):
    with pytest.raises(UserError, match=message):
        load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu", overrides=["train_data=x", override])


@pytest.mark.parametrize("override, words", [
    ("temperature=true", "key 'temperature' must be a number, not true."),
    ("temperature={a: 1, b: [x, null]}", "key 'temperature' must be a number, not {a: 1, b: ['x', null]}."),
    ("student=null", "key 'student' is null; choose one of"),
    ("layer_map=[1, false]", "key 'layer_map' item 2 must be a whole number, not false."),
    ("layer_map={'1': 2}", "key 'layer_map' must be a list, not {'1': 2}"),
    ("layer_map=" + "[" * 9 + "]" * 9, "key 'layer_map' item 1 must be a whole number, not [[[[...]]]]."),
])
def test_a_recipe_value_of_the_wrong_type_is_shown_as_yaml_spells_it(override, words):
    """Was Python's spelling of what the user wrote in YAML: 'not True', 'not None', "not {'a': 1}"."""
    with pytest.raises(UserError) as caught:
        load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu", overrides=["train_data=x", override])
    assert words in str(caught.value), str(caught.value)
    assert not re.search(r"True|False|None", str(caught.value).partition(": ")[2])


def test_a_key_or_list_item_left_empty_is_told_how_to_fill_or_drop_it(tmp_path):
    """Was: `epochs:` with nothing after it, or --set epochs=, said "key 'epochs' must be a number, not None": Python's
    word for YAML's null, and no fix. Now: that the value is empty, and what to write or drop, in each place."""
    path = tmp_path / "r.yaml"
    path.write_text("teacher: runs/teacher\ntrain_data: x\nepochs:\nmixed_precision:\ngrades: [1, null, 3]\n")
    with pytest.raises(UserError) as err:
        load_recipe(DistillRecipe, path)
    message = str(err.value)
    for problem in ("key 'epochs' is empty (YAML reads nothing as null); write a value after the colon, or remove the "
                    "key to use its default", "key 'mixed_precision' is empty",
                    "key 'grades' item 2 is empty (YAML reads nothing as null); write the item, or remove it"):
        assert problem in message
    assert "None" not in message
    # an optional key's empty --set too (was: dev_data= and train_rows= read as null, all rows, silently)
    for key in ("epochs", "dev_data", "train_rows"):
        with pytest.raises(UserError, match=rf"^--set {key}=: key '{key}' is empty \(YAML reads nothing as null\); "
                                            rf"write a value \(--set {key}=VALUE\), null where it is meant \(--set "
                                            rf"{key}=null, or ~\), or drop that --set.$"):
            load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu", overrides=["train_data=x", f"{key}="])
    assert load_recipe(DistillRecipe, "distill/minilm_bottom3_cpu", overrides=["train_data=x", "dev_data=~"]).dev_data \
        is None  # an optional key's null is its value


def test_every_bad_key_is_reported_at_once(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("teacher: runs/teacher\ntrain_data: x\ntemprature: 3\nepochs: many\nkeep_layers: 2.5\nbogus: 1\n")
    with pytest.raises(UserError) as err:
        load_recipe(DistillRecipe, path)
    message = str(err.value)
    for problem in ("unknown key 'temprature' (did you mean 'temperature'?)", "unknown key 'bogus'",
                    "key 'epochs' must be a number, not 'many'", "key 'keep_layers' must be a whole number"):
        assert problem in message
    assert message.startswith(f"{path}: ") and message.count("valid keys are") == 1


def test_range_problems_are_reported_with_the_unknown_and_mistyped_keys(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("teacher: runs/teacher\ntrain_data: x\nbogus: 1\nepochs: -1\nkeep_layers: 2.5\n")
    with pytest.raises(UserError) as err:
        load_recipe(DistillRecipe, path, overrides=["temperature=0"])
    message = str(err.value)
    for problem in ("unknown key 'bogus'", "key 'keep_layers' must be a whole number",
                    "key 'epochs' is -1, which is out of range; it must be in (0, 1000]",
                    "key 'temperature' is 0, which is out of range; it must be in [0.05, 100] "
                    "(from --set temperature=0)"):
        assert problem in message
    assert message.startswith(f"{path}: ") and message.count("valid keys are") == 1


@pytest.mark.parametrize("written", ["5e-4", "5E-4", "+5e-4", "5.e-4", ".5e-3"])
def test_exponent_numbers_without_a_dot_are_numbers(written, tmp_path):
    """YAML 1.1 reads 5e-4 as the text '5e-4'; a recipe file and --set both mean the number."""
    path = tmp_path / "r.yaml"
    path.write_text(f"teacher: runs/teacher\ntrain_data: x\nlearning_rate: {written}\n")
    assert load_recipe(DistillRecipe, path).learning_rate == pytest.approx(5e-4)
    assert load_recipe(DistillRecipe, path, overrides=[f"learning_rate={written}"]).learning_rate == pytest.approx(5e-4)


@pytest.mark.parametrize("key, written, words", [
    ("epochs", "1:00", "key 'epochs' must be a number, not '1:00'"),  # YAML 1.1: the base-60 number 60
    ("batch_size", "0x10", "key 'batch_size' must be a whole number, not '0x10'"),  # YAML 1.1: 16
    ("batch_size", "1_6", "key 'batch_size' must be a whole number, not '1_6'"),  # YAML 1.1: 16
    ("seed", "2026-12-01", "key 'seed' must be a whole number, not '2026-12-01'"),  # YAML 1.1: a date
])
def test_numbers_nobody_wrote_are_refused_not_read(tmp_path, key, written, words):
    """Was: YAML 1.1's forms ran on numbers the user never wrote, exit 0. Recipes read scalars as YAML 1.2."""
    written_file, plain = tmp_path / "r.yaml", tmp_path / "plain.yaml"
    plain.write_text("teacher: runs/teacher\ntrain_data: x\n")
    written_file.write_text(plain.read_text() + f"{key}: {written}\n")
    with pytest.raises(UserError, match=re.escape(words)):
        load_recipe(DistillRecipe, written_file)
    with pytest.raises(UserError, match=re.escape(words)):
        load_recipe(DistillRecipe, plain, overrides=[f"{key}={written}"])


@pytest.mark.parametrize("written, value", [("no", "no"), ("017", 17), ("true", True), (".5", 0.5)])
def test_plain_scalars_read_as_yaml_1_2(written, value):
    """Was: `mixed_precision: no` was the boolean False (refused as "is False"), 017 the octal 15."""
    from headcut.recipes import parse_yaml

    assert parse_yaml(written, "x", "fix it") == value and type(parse_yaml(written, "x", "fix it")) is type(value)


PIPELINE = "data: {train: synthetic, test: synthetic}\nteacher: {path: runs/teacher}\n"


@pytest.mark.parametrize("text, line, key", [
    (PIPELINE + "prune:\n  flops: 0.5\n  flops: 0.9\n", 5, "flops"),  # a key twice in a section
    (PIPELINE + "prune: {flops: 0.5}\nexport: {rows: 50}\nprune: {flops: 0.9}\n", 5, "prune"),  # a section twice
    (PIPELINE + "prune: {flops: 0.5, flops: 0.9}\n", 3, "flops"),
])
def test_a_duplicate_key_names_the_file_and_line(tmp_path, text, line, key):
    """YAML lets the last of two equal keys win without a word: the recipe then runs what nobody read."""
    from headcut.pipeline import load_pipeline

    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=rf"^{path}, line {line}, column \d+: .*duplicate key '{key}'") as err:
        load_pipeline(path)
    assert "\n" not in str(err.value)


def test_a_duplicate_key_in_a_training_recipe_and_in_a_set_value(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("train_data: x\nteacher: runs/teacher\nepochs: 1\nepochs: 3\n")
    with pytest.raises(UserError, match=rf"^{path}, line 4, column 1: .*duplicate key 'epochs', first on line 3"):
        load_recipe(DistillRecipe, path)
    from headcut.pipeline import load_pipeline

    with pytest.raises(UserError, match=r"--set 'prune.flops=\{a: 1, a: 2\}', line 1, column 8: .*duplicate key 'a'"):
        load_pipeline("quickstart", overrides=["prune.flops={a: 1, a: 2}"])


def test_a_key_set_twice_by_set_is_refused():
    with pytest.raises(UserError, match=r"^--set epochs=1 and --set epochs=2 set the same key; keep one of them\.$"):
        load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=["epochs=1", "epochs=2"])


@pytest.mark.parametrize("text, key", [("1: 2\n", "1"), ("null: 2\n", "null"), ("2.5: x\n", "2.5")])
def test_a_key_that_is_no_text_is_an_unknown_key(tmp_path, text, key):
    """Named as YAML wrote it (recipes.key_said), not in Python's words ('None')."""
    path = tmp_path / "r.yaml"
    path.write_text("model: minilm-l6\ntrain_data: synthetic\n" + text)
    with pytest.raises(UserError, match=f"unknown key {re.escape(key)}; valid keys are"):
        load_recipe(FinetuneRecipe, path)


@pytest.mark.parametrize("grades", ["[1,2]", "[0,1,2,3,4]"])
def test_synthetic_data_read_against_other_grades_is_refused(grades):
    """Synthetic pairs grade 1..5; under [1, 2] their labels overran (a traceback in the loss), under [0..4]
    every grade was shifted by one (exit 0)."""
    from headcut.finetune import load_data

    recipe = load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=[f"grades={grades}"])
    with pytest.raises(UserError, match=r"^synthetic data grades 1, 2, 3, 4, 5, but the recipe says grades=\[.*; set "
                                        r"grades=\[1, 2, 3, 4, 5\]"):
        load_data(recipe)


@pytest.mark.parametrize("train, dev", [("synthetic", "synthetic"), ("synthetic", "synthetic:0"),
                                        ("pairs.tsv", "./pairs.tsv"), ("pairs.tsv", "copy.tsv")])
def test_dev_pairs_that_are_the_train_pairs_are_refused(train, dev, tmp_path, monkeypatch):
    """A copy of the train file under another name too (was: accepted, checkpoints chosen on training pairs)."""
    monkeypatch.chdir(tmp_path)
    for name in ("pairs.tsv", "copy.tsv"):
        (tmp_path / name).write_text("query\ttitle\tgrade\ndrill\tcordless drill\t3\n")
    with pytest.raises(UserError, match=f"dev_data {re.escape(dev)} holds the pairs of train_data, so checkpoints"):
        load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=[f"train_data={train}",
                                                                                f"dev_data={dev}"])
    other = load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=["dev_data=synthetic:1"])
    assert other.dev_data == "synthetic:1"


@pytest.mark.parametrize("key", ["train_data", "dev_data", "unlabeled_data"])
def test_a_missing_data_file_names_its_recipe_key(key, tmp_path):
    from headcut.finetune import load_data

    overrides = ["teacher=runs/teacher", f"{key}={tmp_path}/nowhere.tsv"] + (["train_data=synthetic"]
                                                                          if key != "train_data" else [])
    recipe = load_recipe(DistillRecipe, "distill/minilm_synthetic_cpu", overrides=overrides)
    with pytest.raises(UserError, match=f"^{key}={re.escape(str(tmp_path))}/nowhere.tsv: no such file; check the path"):
        load_data(recipe)


def test_synthetic_unlabeled_pairs_are_refused():
    with pytest.raises(UserError, match="key 'unlabeled_data' takes a file of pairs without grades"):
        load_recipe(DistillRecipe, "distill/minilm_synthetic_cpu", overrides=["teacher=t", "unlabeled_data=synthetic"])


def test_merge_keys_still_override():
    """`<<: *base` then a key of its own is YAML's way to override, not a duplicate."""
    from headcut.recipes import parse_yaml

    data = parse_yaml("a: &a {epochs: 1, seed: 3}\nb: {<<: *a, epochs: 2}\n", "r.yaml", "fix the file")
    assert data["b"] == {"epochs": 2, "seed": 3}


def test_a_set_into_a_section_an_alias_shares_changes_that_section_alone(tmp_path):
    """Was: YAML gives an alias (*s) its anchor's very object, so --set distill.a.epochs=3 set b's epochs too."""
    from headcut.pipeline import load_pipeline

    path = tmp_path / "run.yaml"
    path.write_text("data: {train: synthetic, test: 'synthetic:2'}\nteacher: {recipe: finetune/minilm_synthetic_cpu}\n"
                    "distill:\n  a: &s {recipe: distill/minilm_synthetic_cpu, epochs: 2}\n  b: *s\n")
    students = dict(load_pipeline(path, overrides=["distill.a.epochs=3"]).distill)
    assert students["a"].overrides == (("epochs", 3),) and students["b"].overrides == (("epochs", 2),)


def test_a_set_into_a_section_the_file_wrote_as_no_mapping_names_that_section_and_file(tmp_path):
    """Was: "'scan' is not a section; write e.g. --set teacher.epochs=1", where scan is a section written wrong."""
    from headcut.pipeline import load_pipeline

    path = tmp_path / "run.yaml"
    path.write_text("data: {train: synthetic, test: 'synthetic:2'}\nteacher: {recipe: finetune/minilm_synthetic_cpu}\n"
                    "scan: [kl]\n")
    said = f"--set 'scan.rows=5': section 'scan' of {path} is [\"kl\"], but a section must be a mapping of keys"
    with pytest.raises(UserError, match=f"^{re.escape(said)} to values; fix the file.$"):
        load_pipeline(path, overrides=["scan.rows=5"])


def test_an_alias_bomb_is_one_short_sentence_at_once(tmp_path):
    """Nine levels of ten aliases: a billion strings once expanded (data.train's error would repr them)."""
    import time

    from typer.testing import CliRunner

    from headcut.cli.main import app

    levels = ["&l0 [" + ", ".join(["lol"] * 10) + "]"]
    levels += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text(f"data:\n  test: synthetic\n  train: [{', '.join(levels)}]\nteacher: {{path: x}}\n")
    started = time.perf_counter()
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    # expanded, the billion strings would take minutes and gigabytes; 60 s leaves room for a busy machine
    assert result.exit_code == 2 and time.perf_counter() - started < 60
    message = result.stderr.strip()
    assert message.startswith(f"error: {path}, line 3") and "alias" in message
    assert "\n" not in message and "lol" not in message and len(message) < 300


def test_a_recipe_of_too_many_values_without_aliases_is_not_said_to_expand_aliases(tmp_path):
    """Was: 'aliases here expand to more than 100,000 values' for a list written out long, which has no alias."""
    path = tmp_path / "r.yaml"
    path.write_text("teacher: t\ngrades: [" + ", ".join(["1"] * 100_001) + "]\n")
    with pytest.raises(UserError, match=r"r\.yaml, line 2, column 9: invalid YAML \(more than 100,000 values here, "
                                        r"where a recipe holds hundreds\); fix the file\.$") as err:
        load_recipe(DistillRecipe, path)
    assert "alias" not in str(err.value)


def test_a_long_wrong_value_is_shown_short(tmp_path):
    """An error names a mistyped value, but never prints all of a long one."""
    path = tmp_path / "r.yaml"
    path.write_text("train_data: [" + ", ".join(["some-file.tsv"] * 5000) + "]\nteacher: runs/teacher\n")
    with pytest.raises(UserError, match="key 'train_data' must be text, not") as err:
        load_recipe(DistillRecipe, path)
    assert len(str(err.value)) < 400


@pytest.mark.parametrize("content, words", [
    (b"- epochs\n- 2\n", ", line 1: a recipe is a mapping of keys to values, and the file holds the list "
                          "['epochs', 2]; fix the file."),
    (b"epochs: 2\nnote: caf\xe9\n", ": not UTF-8 (byte 0xe9 at byte 19); re-save the file as UTF-8."),
    (b"# epochs: 2\n", ": no keys (the file is empty, or holds only blank lines and comments)"),
])
def test_a_run_names_a_teacher_recipe_file_that_is_no_recipe(tmp_path, content, words):
    """Was: the pipeline read its sub-recipes with its own reader: a list was a TypeError traceback, and
    bytes that are not UTF-8 a UnicodeDecodeError."""
    from headcut.pipeline.recipe import load_pipeline

    bad = tmp_path / "teacher.yaml"
    bad.write_bytes(content)
    with pytest.raises(UserError) as e:
        load_pipeline("quickstart", overrides=[f"teacher.recipe={bad}"])
    assert f"{bad}{words}" in str(e.value)


@pytest.mark.parametrize("value, tag", [("!!binary aGVsbG8=", "!!binary"), ("!!set {a, b}", "!!set"),
                                        ("!!timestamp 2001-12-14", "!!timestamp"), ("!!omap [a: 1]", "!!omap"),
                                        ("!!pairs [a: 1]", "!!pairs"), ("!!python/tuple [1]", "!!python/tuple"),
                                        ("!foo 3", "!foo")])
def test_a_tag_of_a_value_no_key_takes_is_refused_where_it_is_written(tmp_path, value, tag):
    """Was: "key 'seed' must be a whole number, not b'hello'": SafeLoader built the value and a refusal showed it
    as Python writes it ({'b', 'a'}, datetime); the tags of plain values still read (!!str 3 is '3')."""
    path = tmp_path / "r.yaml"
    path.write_text(f"train_data: x\nseed: {value}\n")
    with pytest.raises(UserError) as err:
        load_recipe(FinetuneRecipe, path)
    assert str(err.value) == (f"{path}, line 2, column 7: invalid YAML (the tag {tag} gives a value no recipe key "
                              "takes; remove the tag and write the value plainly); fix the file.")
    path.write_text("train_data: x\n")
    with pytest.raises(UserError, match=rf"--set 'seed={re.escape(value)}', line 1, column 1: .*the tag {tag} "):
        load_recipe(FinetuneRecipe, path, overrides=[f"seed={value}"])
    path.write_text("train_data: !!str x\nseed: !!int '3'\nlearning_rate: !!float 1\n")
    assert load_recipe(FinetuneRecipe, path).seed == 3


@pytest.mark.parametrize("text, at", [("teacher: runs/t\ntrain_data: x\x00\n", "line 2, column 14"),
                                      ("\x07teacher: runs/t\n", "line 1, column 1")])
def test_a_character_yaml_refuses_is_one_sentence_with_its_line(tmp_path, text, at):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_recipe(DistillRecipe, path)
    message = str(err.value)
    assert message.startswith(f"{path}, {at}: invalid YAML (character ") and "\n" not in message


def test_dev_fraction_beside_dev_data_is_refused(tmp_path):
    """Was: dev_fraction silently ignored once dev_data was given. A dev_data given over a recipe file (--dev, a run's
    data.dev) replaces that file's own split, so the file's dev_fraction is let be."""
    from headcut.pipeline import load_pipeline
    from headcut.pipeline.recipe import sub_recipes

    said = (r"key 'dev_fraction' \(0.3\) holds out a share of train_data's queries as dev pairs only when dev_data "
            r"is unset")
    with pytest.raises(UserError, match=said):
        load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu",
                    overrides=["dev_data=synthetic:1", "dev_fraction=0.3"])
    own = tmp_path / "mine.yaml"
    own.write_text("train_data: synthetic\ndev_data: synthetic:1\ndev_fraction: 0.3\n")
    with pytest.raises(UserError, match=said):
        load_recipe(FinetuneRecipe, own)
    assert load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu",
                       overrides=["dev_data=synthetic:1"]).dev_fraction == 0.2
    run = load_pipeline("quickstart", overrides=["data.dev=synthetic:1"])
    assert sub_recipes(run, teacher_dir="t", pruned_dir="p")["teacher"].dev_data == "synthetic:1"
    # the --sets gave both; the run's keys named as the run names them
    in_run = said.replace("train_data", "data.train").replace("dev_data", "data.dev").replace(
        "'dev_fraction'", "'teacher.dev_fraction'")
    with pytest.raises(UserError, match=r"^--set teacher\.dev_fraction=0\.3 --set data\.dev=synthetic:1: " + in_run):
        load_pipeline("quickstart", overrides=["data.dev=synthetic:1", "teacher.dev_fraction=0.3"])


@pytest.mark.parametrize("key, value", [("preset", "homedepot"), ("query_col", "q"), ("title_col", "doc"),
                                        ("label_col", "rel")])
def test_a_file_key_beside_synthetic_data_only_is_refused(key, value, tmp_path):
    """Was: preset and columns silently ignored with synthetic data (and preset=foo recorded in the artifact). A
    shared recipe's own preset is let be where its data are given over it (--train synthetic, a run's data)."""
    from headcut.pipeline import load_pipeline

    said = rf"key '{key}' says how data files are read, but train_data=synthetic read no file"
    with pytest.raises(UserError, match=said):
        load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=[f"{key}={value}"])
    own = tmp_path / "mine.yaml"
    own.write_text(f"train_data: synthetic\n{key}: {value}\n")
    with pytest.raises(UserError, match=said):
        load_recipe(FinetuneRecipe, own)
    with pytest.raises(UserError, match=rf"\[data\].*key '{key}' says how data files are read, but train=synthetic"):
        load_pipeline("quickstart", overrides=[f"data.{key}={value}"])
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("q\tdoc\trel\ndrill\tcordless drill\t3\n")
    read = load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu",
                       overrides=[f"dev_data={pairs}", f"{key}={value}"])
    assert getattr(read, key) == value  # a file reads it
    assert load_recipe(FinetuneRecipe, "finetune/minilm_homedepot_cpu",
                       overrides=["train_data=synthetic"]).preset == "homedepot"


def test_an_unknown_preset_is_refused_even_where_no_file_reads_it():
    from headcut.pipeline import load_pipeline

    with pytest.raises(UserError, match="key 'preset' is 'foo', which is unknown; choose one of: homedepot, qbqtc"):
        load_recipe(FinetuneRecipe, "finetune/minilm_synthetic_cpu", overrides=["dev_data=synthetic:1", "preset=foo"])
    with pytest.raises(UserError, match=r"\[data\].*key 'preset' is 'foo', which is unknown"):
        load_pipeline("quickstart", overrides=["data.preset=foo"])


def test_a_student_s_own_teacher_in_a_run_is_refused_naming_the_recipe_file_and_student(tmp_path):
    """Was: distill.NAME.teacher replaced the run's teacher for that student, exit 0: it learned from another
    model while the report compared it with the run's teacher (and its fingerprint ignored the run's teacher)."""
    from headcut.pipeline import load_pipeline
    from headcut.recipes import find_recipe

    other = str(tmp_path / "other")
    with pytest.raises(UserError) as caught:
        load_pipeline("quickstart", overrides=[f"distill.bottom3.teacher={other}"])
    message = str(caught.value)
    for words in ("the run's teacher", "headcut distill", "--set teacher=DIR"):
        assert words in message, (words, message)
    # led by the --set alone (was by quickstart's file, which does not hold it)
    assert message.startswith(f"--set distill.bottom3.teacher={other}: [distill.bottom3] key 'teacher' ({other}) "
                              "would replace"), message
    own = tmp_path / "run.yaml"
    own.write_text(find_recipe("quickstart", kind="run").read_text().replace(
        "    recipe: distill/minilm_synthetic_cpu\n",
        f"    recipe: distill/minilm_synthetic_cpu\n    teacher: {other}\n"))
    with pytest.raises(UserError, match=rf"^{own}: .*\[distill.bottom3\] key 'teacher' \({other}\) would replace"):
        load_pipeline(own)


def test_a_recipe_key_that_does_not_print_is_quoted_with_escapes(tmp_path):
    """Was: "unknown key 'epochs' (did you mean 'epochs'?)" for a key holding a zero-width space."""
    own = tmp_path / "mine.yaml"
    own.write_text("train_data: synthetic\nepochs\u200b: 2\n", encoding="utf-8")
    with pytest.raises(UserError) as caught:
        load_recipe(FinetuneRecipe, own)
    assert r"unknown key 'epochs\u200b' (did you mean 'epochs'?)" in str(caught.value)
    assert str(caught.value).isprintable()


@pytest.mark.parametrize("text", ["", "\n\n", "# epochs: 3\n", "---\n# nothing yet\n"])
def test_an_empty_or_comment_only_recipe_file_is_refused_not_read_as_all_defaults(tmp_path, text):
    """Was: an empty recipe file (a save that failed, a template not filled in) trained with every default."""
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        load_recipe(FinetuneRecipe, path, overrides=["train_data=synthetic"])  # was: trained with every default
    assert str(err.value) == (f"{path}: no keys (the file is empty, or holds only blank lines and comments); a "
                              "recipe is a mapping of keys to values: write its keys, e.g. in a copy of a shipped "
                              f"one from {RECIPE_ROOT}.")
    path.write_text("{}\n")  # an explicit empty mapping: every default, chosen
    assert load_recipe(FinetuneRecipe, path, overrides=["train_data=synthetic"]).epochs == FinetuneRecipe.epochs


@pytest.mark.parametrize("written, words", [
    ("1e3", "must be a whole number, not 1000.0 (YAML reads a number with a point or an exponent as a decimal: "
            "write 1000)."),
    ("32.0", "must be a whole number, not 32.0 (YAML reads a number with a point or an exponent as a decimal: "
             "write 32)."),
    ("1e400", "must be a whole number, not inf (YAML reads a number past 1e308 as inf)."),
    ("1e30", "must be a whole number, not 1e+30 (YAML reads a number with a point or an exponent as a decimal)."),
    ("2.5", "must be a whole number, not 2.5."),
    ("7" * 305, "is a whole number of 305 digits, which is out of range; it must be in [1, "),
    ("-" + "7" * 305, "is a whole number of 305 digits, which is out of range; it must be in [1, "),
    ("7" * 5000, "is a whole number of 5,000 digits, which is out of range; it must be in [1, "),
])
def test_a_decimal_where_a_whole_number_goes_says_what_yaml_read_it_as(tmp_path, written, words):
    """Was: `batch_size: 1e3` was told "must be a whole number, not 1000.0" (a whole number, to the eye) and 1e400
    "not inf", a value nobody wrote; each now says what YAML read and what to write (a number to write only where it
    is of a size to write). Was: a whole number of over 300 digits (777...7) was read as a float and told it is no
    whole number, 'write 7777...' (not what was written), or 'not inf' past 308 digits; now it is out of the key's
    range, its digits counted."""
    path = tmp_path / "r.yaml"
    path.write_text(f"teacher: runs/teacher\ntrain_data: x\nbatch_size: {written}\n")
    with pytest.raises(UserError, match=re.escape(f"key 'batch_size' {words}")):
        load_recipe(DistillRecipe, path)


def test_a_whole_number_s_leading_zeros_and_sign_do_not_count_as_digits(tmp_path):
    """Was: `batch_size: 000...005` (302 characters, YAML's whole number 5) was read as a float past 300 characters
    and refused; leading zeros and a '+' are no digits of the number."""
    from headcut_grader.readers import bounded_int

    path = tmp_path / "r.yaml"
    for written in ("0" * 301 + "5", "+" + "0" * 301 + "5", "0" * 5000 + "5"):
        path.write_text(f"teacher: runs/teacher\ntrain_data: x\nbatch_size: {written}\n")
        assert load_recipe(DistillRecipe, path).batch_size == 5
    assert bounded_int("-" + "0" * 400 + "12") == -12 and type(bounded_int("0" * 400 + "12")) is int
    path.write_text(f"teacher: {'7' * 5000}\ntrain_data: x\n")  # was: Python's int-length ValueError, a traceback
    with pytest.raises(UserError, match="key 'teacher' is a whole number of 5,000 digits; quote it as written"):
        load_recipe(DistillRecipe, path)


def test_a_quoted_number_or_boolean_is_told_to_lose_its_quotes(tmp_path):
    """Was: `learning_rate: "1e-4"` said only "must be a number, not '1e-4'", which reads as the number it is. Now
    text that YAML reads as the wanted type unquoted is told so (a number, a whole number, a boolean; by file or
    --set); text that is no such value is refused as before."""
    path = tmp_path / "r.yaml"
    path.write_text('learning_rate: "1e-4"\nbatch_size: "32"\ncache_teacher: "true"\nwarmup_ratio: ten\n'
                    'epochs: "2.5"\n')
    with pytest.raises(UserError) as caught:
        load_recipe(DistillRecipe, path, overrides=['eval_every="5"'])
    said, fix = str(caught.value), " (quoted, it is text: remove the quotes)"
    for words in (f"key 'learning_rate' must be a number, not '1e-4'{fix}",
                  f"key 'batch_size' must be a whole number, not '32'{fix}",
                  f"key 'cache_teacher' must be true or false, not 'true'{fix}",
                  f"key 'epochs' must be a number, not '2.5'{fix}",
                  f"key 'eval_every' must be a whole number, not '5'{fix} (from --set eval_every=\"5\")",
                  "key 'warmup_ratio' must be a number, not 'ten';"):
        assert words in said, said
    assert said.count(fix) == 5, said
    path.write_text('seed: "2.5"\n')  # a whole number wanted: a decimal's quotes are not the problem
    with pytest.raises(UserError, match=r"key 'seed' must be a whole number, not '2\.5'\.$"):
        load_recipe(FinetuneRecipe, path)


def test_a_tagged_value_is_told_to_lose_its_tag_not_quotes(tmp_path):
    """Was: `seed: !!str 3` said "(quoted, it is text: remove the quotes)" where no quotes were written, and
    `batch_size: !!float 32` "(YAML reads a number with a point or an exponent as a decimal: write 32)" where none
    was; now each names its tag (by file or --set)."""
    path = tmp_path / "r.yaml"
    path.write_text("train_data: x\nseed: !!str 3\nbatch_size: !!float 32\ncache_teacher: !!str true\n")
    with pytest.raises(UserError) as caught:
        load_recipe(DistillRecipe, path, overrides=["eval_every=!!str 5"])
    said, text, decimal = str(caught.value), "(the tag !!str makes it text: remove the tag)", "(the tag !!float"
    for words in (f"key 'seed' must be a whole number, not '3' {text}",
                  f"key 'batch_size' must be a whole number, not 32.0 {decimal} makes it a decimal: remove the tag)",
                  f"key 'cache_teacher' must be true or false, not 'true' {text}",
                  f"key 'eval_every' must be a whole number, not '5' {text} (from --set eval_every=!!str 5)"):
        assert words in said, said
    assert "quotes" not in said and "a point or an exponent" not in said, said
    path.write_text("teacher: t\ntrain_data: !!str x\nlearning_rate: !!float 1\n")  # a tag of the wanted type reads
    recipe = load_recipe(DistillRecipe, path)
    assert (type(recipe.train_data), type(recipe.learning_rate), recipe.learning_rate) == (str, float, 1.0)


@pytest.mark.parametrize("value, marker", [("--- 2", "---"), ("2\n...", "..."), ("%YAML 1.2\n--- 2", "%YAML"),
                                           ("--- 2\n--- 3", "---")])
def test_a_yaml_document_marker_in_a_set_value_is_refused_naming_the_set(tmp_path, value, marker):
    """Was: `--set 'epochs=--- 2'` set epochs to 2: the value was read as a YAML document, its marker dropped."""
    from headcut.pipeline import load_pipeline
    from headcut_grader.errors import quoted

    path = tmp_path / "r.yaml"
    path.write_text("train_data: x\n")
    item = f"epochs={value}"
    with pytest.raises(UserError) as caught:
        load_recipe(FinetuneRecipe, path, overrides=[item])
    assert str(caught.value).startswith(f"--set {quoted(item)}: {marker} marks a YAML document, which a --set value "
                                        "cannot hold; write the value alone (--set epochs=VALUE), or to give text, ")
    with pytest.raises(UserError, match=rf"^--set {re.escape(quoted('teacher.' + item))}: {marker} marks a YAML "):
        load_pipeline("quickstart", overrides=[f"teacher.{item}"])
    assert load_recipe(FinetuneRecipe, path, overrides=["epochs=2", "dev_data='--- x'"]).dev_data == "--- x"


def test_a_value_with_the_non_specific_tag_is_told_to_lose_its_tag_not_quotes(tmp_path):
    """YAML's non-specific tag makes a scalar text (`seed: ! 3` is '3'), but PyYAML resolved it as if untagged: `! 3`
    and even the quoted `! "3"` read as the number 3, and `train_data: ! 123` was refused as a number. Now `!` makes
    text, and a refusal names the tag ! as it names !!str, not quotes."""
    path = tmp_path / "r.yaml"
    path.write_text("teacher: t\ntrain_data: x\nseed: ! 3\nlearning_rate: ! 1e-4\ncache_teacher: ! true\n")
    with pytest.raises(UserError) as caught:
        load_recipe(DistillRecipe, path, overrides=["eval_every=! 5"])
    said, text = str(caught.value), "(the tag ! makes it text: remove the tag)"
    for words in (f"key 'seed' must be a whole number, not '3' {text}", f"not '1e-4' {text}",
                  f"key 'cache_teacher' must be true or false, not 'true' {text}",
                  f"key 'eval_every' must be a whole number, not '5' {text} (from --set eval_every=! 5)"):
        assert words in said, said
    assert "quotes" not in said, said
    path.write_text("teacher: t\ntrain_data: ! 123\n")  # text where text goes reads, stored as plain str
    recipe = load_recipe(DistillRecipe, path)
    assert (type(recipe.train_data), recipe.train_data) == (str, "123")


def test_a_key_in_other_case_is_told_its_nearest(tmp_path):
    """Was: `--set EPOCHS=1` or `Learning_Rate:` in a file said "unknown key" with no "did you mean": the close-match
    lookup compared case. Now it does not."""
    path = tmp_path / "r.yaml"
    path.write_text("Learning_Rate: 0.001\n")
    with pytest.raises(UserError) as caught:
        load_recipe(FinetuneRecipe, path, overrides=["EPOCHS=1"])
    said = str(caught.value)
    assert "unknown key 'Learning_Rate' (did you mean 'learning_rate'?)" in said, said
    assert "unknown key 'EPOCHS' (did you mean 'epochs'?) (from --set EPOCHS=1)" in said, said


def test_a_refusal_of_keys_together_is_led_again_without_checking_again_and_keeps_what_it_is_about():
    """Was: re-leading a recipe check's refusal by the --sets (or the run's section) that gave its keys ran the whole
    check again (reading the teacher's and student's outlines from disk once more), and the SetError it raised lost
    UserError.about. Now the sentence is led again as it is, about the same keys."""
    import pytest

    from headcut.recipes import Lead, SetError, _checked_together
    from headcut_grader.errors import UserError

    calls = []

    def check(lead, *, named):
        calls.append(lead)
        raise UserError(f"{lead}: every loss weight is 0; set kd_weight above 0.", about=("kd_weight",))

    origins = {"kd_weight": "--set kd_weight=0"}
    with pytest.raises(SetError) as caught:
        _checked_together(check, Lead("[distill.x]", "r.yaml", {}), origins, named=frozenset(origins))
    assert str(caught.value) == "--set kd_weight=0: every loss weight is 0; set kd_weight above 0."
    assert caught.value.about == ("kd_weight",) and calls == ["[distill.x] (r.yaml) with --set kd_weight=0"]
    calls.clear()
    with pytest.raises(UserError) as caught:
        _checked_together(check, Lead("run.yaml: [distill.x]", "r.yaml", {}), {}, named=frozenset({"kd_weight"}))
    assert str(caught.value) == "run.yaml: [distill.x]: every loss weight is 0; set kd_weight above 0."
    assert caught.value.about == ("kd_weight",) and calls == ["run.yaml: [distill.x] (r.yaml)"]


def test_a_worded_refusal_led_again_stays_one_and_words_again_under_its_new_lead():
    """Was: training.worded stuck `say` and `where` onto a plain UserError (read back with hasattr), and
    headcut_grader.errors.led copied it with its sentence led anew but its `where` left as it was, so wording it again
    (a run's names) dropped that lead. Now a WordedError (a type) that led() and recipes.led_again keep one, its lead
    what its sentence is led by, and reworded() words it again under that lead."""
    from headcut.recipes import SetError, led_again
    from headcut.training import worded
    from headcut_grader.errors import WordedError, led

    def say(name, how):
        return f"{name('dev_data')} holds the pairs of {name('train_data')}; set {name('dev_data')}{how('dev_data')}."

    refusal = worded("[teacher]", say, about=("dev_data",))
    assert isinstance(refusal, WordedError)
    assert str(refusal) == "[teacher]: dev_data holds the pairs of train_data; set dev_data."
    run = led(refusal, "run.yaml: ")
    assert isinstance(run, WordedError) and run.about == ("dev_data",)
    assert str(run.reworded(name=lambda key: f"data.{key[:-5]}", how=lambda key: " by --set")) == (
        "run.yaml: [teacher]: data.dev holds the pairs of data.train; set data.dev by --set.")
    by_set = led_again(refusal, "[teacher]", "--set data.dev=x", SetError)
    assert isinstance(by_set, SetError) and isinstance(by_set, WordedError) and by_set.about == ("dev_data",)
    assert str(by_set) == "--set data.dev=x: dev_data holds the pairs of train_data; set dev_data."
    again = by_set.reworded(name=str.upper)
    assert isinstance(again, SetError)
    assert str(again) == "--set data.dev=x: DEV_DATA holds the pairs of TRAIN_DATA; set DEV_DATA."


def test_a_command_line_refusal_is_told_by_its_marker_not_by_the_text_of_its_how():
    """Was: training.by_set and training.typed told a command line's refusal by how(key)'s text (" by --set", " by its
    --set": markers kept in headcut_grader.errors, which has no --set), so a caller whose how(key) said " by --set" was
    taken for one. Now in_flags(command_line=True) gives a marker (recipes.CommandLine) that no text is."""
    import headcut_grader.errors as errors
    from headcut.recipes import in_flags
    from headcut.training import set_to, typed, worded

    def say(name, how):
        return f"{typed(name, how, 'dev_data', 'd.tsv')}: one grade; {set_to(name, how, 'select_metric', 'loss')}."

    refusal = worded("", say, about=("dev_data",))
    for how in (" by --set", " by its --set"):  # a caller's own words, shown as they are
        assert str(refusal.reworded(how=lambda key: how)) == f"dev_data d.tsv: one grade; set select_metric=loss{how}."
    command = in_flags(refusal, {"dev_data": "--set dev_data=d.tsv"}, command_line=True)
    assert str(command) == "--set dev_data=d.tsv: one grade; pass --set select_metric=loss."
    assert not hasattr(errors, "BY_SET") and not hasattr(errors, "SET_GIVEN")  # the runtime has no --set


def test_a_training_recipe_s_seed_reads_the_declared_seed_range():
    """A recipe's seed (finetune, distill) is the seed every --seed and seed argument takes (evaluate_arguments'),
    declared once (was: its own Range(0, 2**32 - 1) literal beside it)."""
    import dataclasses

    from headcut.distill import DistillRecipe
    from headcut.evaluate_arguments import argument_range
    from headcut.finetune import FinetuneRecipe

    for cls in (FinetuneRecipe, DistillRecipe):
        seed = next(f for f in dataclasses.fields(cls) if f.name == "seed")
        assert seed.metadata["range"] is argument_range("seed") and seed.default == 0


def test_a_distill_recipe_s_ordinal_weight_is_finetune_s():
    """DistillRecipe.ordinal_weight weighs finetune.grade_loss's ordinal term, as FinetuneRecipe's does: one default
    and range, declared there (was: its own ranged(0.0, 0.0, 100.0) literal)."""
    import dataclasses

    from headcut.distill import DistillRecipe
    from headcut.finetune import FinetuneRecipe

    def field(cls):
        return next(f for f in dataclasses.fields(cls) if f.name == "ordinal_weight")

    assert field(DistillRecipe).metadata["range"] is field(FinetuneRecipe).metadata["range"]
    assert field(DistillRecipe).default == field(FinetuneRecipe).default


def test_every_loss_weight_reads_the_one_loss_weight_range():
    """Every *_weight key of a training recipe (finetune's ordinal / mse / pairwise / listwise, distill's kd / ce /
    hidden / attention / mse / margin / gold) reads training.LOSS_WEIGHT (was: 13 literals of 0..100 beside them)."""
    import dataclasses

    from headcut.training import LOSS_WEIGHT

    weights = [(cls, f) for cls in (FinetuneRecipe, DistillRecipe) for f in dataclasses.fields(cls)
               if f.name.endswith("_weight")]
    assert len(weights) == 4 + 8
    assert all(f.metadata["range"] is LOSS_WEIGHT for _, f in weights), [
        (cls.__name__, f.name) for cls, f in weights if f.metadata["range"] is not LOSS_WEIGHT]
    with pytest.raises(UserError, match=r"key 'margin_weight' is 101, which is out of range; it must be in \[0, 100\]"):
        load_recipe(DistillRecipe, "minilm_synthetic_cpu", overrides=["margin_weight=101"], kind="distill")


@pytest.mark.parametrize("stray", ["temperature: 2.0", "margin_weight: 1.0"])
def test_a_recipe_with_one_stray_key_of_another_kind_is_told_the_key_not_the_kind(tmp_path, stray):
    """Keys both kinds take (epochs, learning_rate, train_data, batch_size) count for neither: was 'ft.yaml is a
    distill recipe, but a finetune recipe is wanted here' for a finetune recipe with one distill key."""
    path = tmp_path / "ft.yaml"
    path.write_text(f"train_data: t.tsv\nepochs: 2\nlearning_rate: 1.0e-4\nbatch_size: 16\n{stray}\n")
    key = stray.split(":")[0]
    with pytest.raises(UserError, match=rf"unknown key '{key}'"):
        load_recipe(FinetuneRecipe, str(path), kind="finetune")


def _refused_as(tmp_path, text: str, said: str) -> None:
    """A finetune recipe file holding `text` is refused with a sentence that starts with its path and `said`."""
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        load_recipe(FinetuneRecipe, path)
    assert str(caught.value).startswith(f"{tmp_path}/{said}"), str(caught.value)


@pytest.mark.parametrize("text, said", [
    # was: "r.yaml: key 'epochs' is 0, ..." with no line, where invalid YAML is named by its line
    ("model: /m\ntrain_data: synthetic\nepochs: 0\n", "r.yaml, line 3: key 'epochs' is 0, which is out of range"),
    ("model: /m\ntrain_data: synthetic\n\nepochs: x\n", "r.yaml, line 4: key 'epochs' must be a number, not 'x'"),
    ("model: /m\n# a comment\ntrain_data: synthetic\nepoch: 2\n", "r.yaml, line 4: unknown key 'epoch'"),
    ("base: &b {epochs: 0}\n", "r.yaml, line 1: unknown key 'base'"),
    ("model: /m\ntrain_data: synthetic\nepochs: 0\nlr: 2\n",
     "r.yaml: on line 4, unknown key 'lr'; on line 3, key 'epochs' is 0, which is out of range; it must be in "
     "(0, 1000]"),
])
def test_a_recipe_file_s_key_refusal_names_the_line_it_stands_on(tmp_path, text, said):
    _refused_as(tmp_path, text, said)


def test_a_set_value_is_named_by_its_set_not_a_line(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("model: /m\ntrain_data: synthetic\nepochs: 2\nlr: 2\n")
    with pytest.raises(UserError) as caught:
        load_recipe(FinetuneRecipe, path, overrides=["epochs=0"])
    assert str(caught.value).startswith(f"{path}: on line 4, unknown key 'lr'"), str(caught.value)
    assert "key 'epochs' is 0, which is out of range; it must be in (0, 1000] (from --set epochs=0)" in str(
        caught.value), str(caught.value)


def test_a_run_recipe_section_s_key_refusal_names_the_line_it_stands_on(tmp_path):
    from headcut.pipeline.recipe import load_pipeline

    path = tmp_path / "run.yaml"
    text = (RECIPE_ROOT / "run" / "quickstart.yaml").read_text()
    path.write_text(text.replace("  flops: 0.5 ", "  flops: 2.0 "))
    line = text[:text.index("  flops: 0.5 ")].count("\n") + 1
    with pytest.raises(UserError) as caught:
        load_pipeline(path)
    assert str(caught.value).startswith(f"{path}: [prune], line {line}: key 'flops' is 2, which is out of range"), \
        str(caught.value)


def test_a_run_s_teacher_and_student_key_refusals_name_the_line_of_the_file_that_holds_them(tmp_path):
    """Was: '[distill.bottom3]: key 'epochs' is 0' and '[distill.bottom3] (student.yaml): ...', no line: a section's
    keys are read into the finetune or distill recipe its recipe: names, beside that file's own."""
    from headcut.pipeline.recipe import load_pipeline, sub_recipes

    student = tmp_path / "student.yaml"
    student.write_text((RECIPE_ROOT / "distill" / "minilm_synthetic_cpu.yaml").read_text() + "kd_alpha: 1\n")
    own = student.read_text().count("\n")
    text = (RECIPE_ROOT / "run" / "quickstart.yaml").read_text()
    teacher = text.index("  recipe: finetune/minilm_synthetic_cpu\n") + len("  recipe: finetune/minilm_synthetic_cpu\n")
    text = text[:teacher] + "  epochs: 0\n" + text[teacher:]
    line = text[:teacher].count("\n") + 1
    path = tmp_path / "run.yaml"
    path.write_text(text.replace("    recipe: distill/minilm_synthetic_cpu", f"    recipe: {student}"))
    with pytest.raises(UserError) as caught:
        sub_recipes(load_pipeline(path), teacher_dir="t", pruned_dir=None)
    said = str(caught.value)
    assert f"[teacher], line {line}: key 'epochs' is 0, which is out of range" in said, said
    assert f"[distill.bottom3] (student.yaml, line {own}): unknown key 'kd_alpha'" in said, said


def test_importing_headcut_recipes_leaves_yaml_s_dumpers_as_they_were(tmp_path):
    """Was: recipes.py registered Placed with yaml.SafeDumper and yaml.Dumper at import, so importing headcut changed
    yaml.safe_dump for every other user of PyYAML in the process. headcut writes a recipe it read with dump_yaml."""
    import subprocess
    import sys

    probe = ("import yaml\n"
             "before = [dict(d.yaml_representers) for d in (yaml.SafeDumper, yaml.Dumper)]\n"
             "import headcut.recipes\n"
             "after = [dict(d.yaml_representers) for d in (yaml.SafeDumper, yaml.Dumper)]\n"
             "print(before == after)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True", done.stdout + done.stderr
    from headcut.recipes import Placed, dump_yaml, read_recipe_file

    path = tmp_path / "r.yaml"
    path.write_text("model: /m\ntrain_data: synthetic\nscan: {rows: 5}\n")
    data = read_recipe_file(path)
    assert isinstance(data["scan"], Placed)
    assert yaml.safe_load(dump_yaml(data)) == {"model": "/m", "train_data": "synthetic", "scan": {"rows": 5}}


@pytest.mark.parametrize("text, sets, said", [
    # was: "r.yaml: every loss weight is 0; ...", no line, where a lone key's refusal names its line
    ("teacher: /t\ntrain_data: synthetic\nkd_weight: 0\nce_weight: 0\n", [],
     "r.yaml, lines 3 and 4: every loss weight is 0"),
    ("teacher: /t\ntrain_data: synthetic\n\nkd_weight: 0\n", ["ce_weight=0"],
     "r.yaml, line 4 with --set ce_weight=0: every loss weight is 0"),
    ("teacher: /t\ntrain_data: synthetic\n", ["kd_weight=0", "ce_weight=0"],
     "r.yaml with --set kd_weight=0, --set ce_weight=0: every loss weight is 0"),
    ("teacher: /t\ntrain_data: synthetic\nunlabeled_rows: 5\n", [],
     "r.yaml, line 3: key 'unlabeled_rows' is set but unlabeled_data is not"),
])
def test_a_refusal_of_keys_together_names_the_lines_they_stand_on(tmp_path, text, sets, said):
    path = tmp_path / "r.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as caught:
        load_recipe(DistillRecipe, path, overrides=sets)
    assert str(caught.value).startswith(f"{tmp_path}/{said}"), str(caught.value)


@pytest.mark.parametrize("old, new, sets, said", [
    # was: "run.yaml: [teacher] gives both ...", no line; {key}: the line `  key:` stands on in the file
    ("  recipe: finetune/minilm_synthetic_cpu\n", "  recipe: finetune/minilm_synthetic_cpu\n  path: /x\n", [],
     "on lines {recipe} and {path}, [teacher] gives both recipe"),
    ("  flops: 0.5 ", "  keep_ratio: 0.5\n  flops: 0.5 ", [],
     "on lines {keep_ratio} and {flops}, [prune] give exactly"),
    ("  calibrate: 256\n", "  calibrate: 256\n  drop_layers: true\n  iterative: 3\n", [],
     "on lines {drop_layers} and {iterative}, [prune] drop_layers searches one plan"),
    ("  calibrate: 256\n", "  calibrate: 256\n  tune: false\n", [],
     "on lines {calibrate} and {tune}, [prune] calibrate"),
    ("  experiments: all\n", "  experiments: none\n", [], "on lines {experiments} and {draws}, [scan] draws sets up"),
    ("  train: synthetic ", "  train: null ", [], "on line {flops}, [prune] flops scores units on data.train"),
    ("  flops: 0.5 ", "  keep_ratio: 0.5\n  method: foo\n", [],
     "on lines {methods} and {method}, [prune] method 'foo'"),
    # a key a --set gave has no line: the one the file holds is named
    ("  flops: 0.5 ", "  keep_ratio: 0.5\n  method: foo\n", ["scan.methods=[kl]"],
     "on line {method}, [prune] method 'foo'"),
])
def test_a_run_recipe_problem_of_keys_together_names_the_lines_they_stand_on(tmp_path, old, new, sets, said):
    from headcut.pipeline.recipe import load_pipeline

    text = (RECIPE_ROOT / "run" / "quickstart.yaml").read_text().replace(old, new)
    path = tmp_path / "run.yaml"
    path.write_text(text)
    lines = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("  ") and not line.startswith("   ") and ":" in line:
            lines.setdefault(line.split(":")[0].strip(), number)
    with pytest.raises(UserError) as caught:
        load_pipeline(path, overrides=sets)
    assert said.format(**lines) in str(caught.value), str(caught.value)


@pytest.mark.parametrize("text, said", [
    # was: "r.yaml: a recipe is a mapping of keys to values; fix the file.", no line nor what it holds
    ("# a list\n\n- epochs: 2\n- seed: 1\n", "r.yaml, line 3: a recipe is a mapping of keys to values, and the file "
                                            "holds the list [{epochs: 2}, {seed: 1}]; fix the file."),
    ("---\n5\n", "r.yaml, line 2: a recipe is a mapping of keys to values, and the file holds the number 5; fix the "
                 "file."),
    ("just text\n", "r.yaml, line 1: a recipe is a mapping of keys to values, and the file holds the text 'just text'; "
                    "fix the file."),
    # was: "r.yaml: no keys (the file is empty, ...)", though it holds null
    ("# nothing\n~\n", "r.yaml, line 2: a recipe is a mapping of keys to values, and the file holds null; fix the "
                       "file."),
    # was: "unknown key 'None'", "unknown key '1'": Python's words for YAML's null and the number 1
    ("model: /m\ntrain_data: synthetic\nnull: 3\n", "r.yaml, line 3: unknown key null;"),
    ("model: /m\ntrain_data: synthetic\n1: 3\n", "r.yaml, line 3: unknown key 1;"),
])
def test_a_recipe_file_that_is_no_mapping_or_has_a_key_of_no_text_is_said_as_written(tmp_path, text, said):
    _refused_as(tmp_path, text, said)


def test_a_run_recipe_section_named_null_is_said_as_written(tmp_path):
    from headcut.pipeline.recipe import load_pipeline

    path = tmp_path / "run.yaml"
    path.write_text((RECIPE_ROOT / "run" / "quickstart.yaml").read_text() + "null: {}\n")
    with pytest.raises(UserError, match="unknown section null;"):  # was: 'unknown section None'
        load_pipeline(path)
