"""`headcut distill` and `--tune` on a tiny teacher: output, exit codes, a resumable optuna study."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from headcut.cli.main import app
from headcut.models import load_model
from test_distill import recipe_for, tiny_teacher  # noqa: F401 (fixtures; one_thread is in conftest)

runner = CliRunner()


def write_recipe(path, teacher, **changes):
    recipe = recipe_for(teacher, **{"epochs": 1, "eval_every": 10, **changes})
    data = {k: list(v) if isinstance(v, tuple) else v for k, v in recipe.__dict__.items()}
    path.write_text(yaml.safe_dump(data))
    return path


def test_cli_distills_and_reports_against_the_teacher(tiny_teacher, tmp_path):  # noqa: F811
    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher)
    result = runner.invoke(app, ["distill", str(recipe), "--out", str(tmp_path / "s"), "--set", "keep_layers=1"])
    assert result.exit_code == 0, result.output
    assert "after - teacher [95% paired CI]" in result.output and "teacher logits: computed and cached" in result.output
    assert re.search(r"^throughput [\d.]+ examples/s \([\d.]+ per CPU-second\) over \d+ steps \(best at step \d+\); "
                     r"teacher logits: computed and cached \([\d.]+s before training\)$", result.output, re.M)
    assert load_model(tmp_path / "s").model.config.num_hidden_layers == 1
    again = runner.invoke(app, ["distill", str(recipe), "--out", str(tmp_path / "s")])
    assert again.exit_code == 2 and "not empty; choose a new folder or pass --overwrite" in again.output


def test_cli_errors_exit_2_with_one_sentence(tiny_teacher, tmp_path):  # noqa: F811
    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher)
    bad = runner.invoke(app, ["distill", str(recipe), "--set", "temprature=3"])
    assert bad.exit_code == 2 and ("unknown key 'temprature' (did you mean 'temperature'?); valid keys are:"
                                   in bad.output)
    missing = runner.invoke(app, ["distill", "no_such_recipe"])
    assert missing.exit_code == 2 and "distill/minilm_bottom3_cpu" in missing.output
    assert "Traceback" not in bad.output + missing.output


def test_tune_resumes_its_study_and_reruns_a_killed_trial(tiny_teacher, tmp_path):  # noqa: F811
    import optuna

    from headcut.distill import read_tune, tune_ranges
    from headcut.distill.tune import STUDY_FILE, study_name, tune

    recipe = recipe_for(tiny_teacher, epochs=0.5, eval_every=100, tune_fields=("temperature", "learning_rate"))
    seen = []
    first = tune(recipe, tmp_path / "study", trials=2, on_trial=seen.append)
    assert len(first["trials"]) == 2 and len(seen) == 2
    assert first["best"]["value"] == max(t["value"] for t in first["trials"])
    for t in seen:
        meta = load_model(t["artifact"]).meta
        assert meta["recipe"]["temperature"] == t["params"]["temperature"]
        assert meta["metrics"]["after"]["spearman"] == t["value"]
    # a process killed mid-trial leaves it RUNNING in the study
    study = optuna.load_study(study_name=study_name(recipe), storage=f"sqlite:///{tmp_path / 'study' / STUDY_FILE}")
    stale = study.ask()
    params = {k: stale.suggest_float(k, lo, hi, log=log) for k, (lo, hi, log) in tune_ranges().items()
              if k in recipe.tune_fields}
    seen.clear()
    second = tune(recipe, tmp_path / "study", trials=3, on_trial=seen.append)
    assert len(seen) == 1 and seen[0]["params"] == params  # only the missing trial ran, with the killed values
    assert len(second["trials"]) == 3
    assert read_tune(tmp_path / "study") == second
    assert json.loads((tmp_path / "study" / "tune.json").read_text())["best"]["artifact"].startswith("trials/")


def test_tune_refuses_to_replace_another_recipes_study_or_write_into_a_file(tiny_teacher, tmp_path):  # noqa: F811
    """Was: a changed recipe started a second study in study.db and replaced tune.json without --overwrite;
    --out FILE was a NotADirectoryError traceback."""
    import pytest

    from headcut.distill.tune import tune
    from headcut_grader.errors import UserError

    recipe = recipe_for(tiny_teacher, epochs=0.5, eval_every=100, tune_fields=("temperature",))
    tune(recipe, tmp_path / "study", trials=1)
    before = (tmp_path / "study" / "tune.json").read_text()
    changed = recipe_for(tiny_teacher, epochs=0.25, eval_every=100, tune_fields=("temperature",))
    with pytest.raises(UserError, match="holds the study of another recipe .* pass overwrite=True"):
        tune(changed, tmp_path / "study", trials=1)
    assert (tmp_path / "study" / "tune.json").read_text() == before
    (tmp_path / "file").write_text("mine")
    with pytest.raises(UserError, match="^out=.*file is a file; name a folder"):
        tune(recipe, tmp_path / "file", trials=1)
    assert (tmp_path / "file").read_text() == "mine"


def test_tune_refuses_a_second_search_on_a_live_study(tiny_teacher, tmp_path):  # noqa: F811
    """Was: two searches on one --out shared study.db, and a second one with --overwrite deleted it from under the
    first."""
    import pytest

    from headcut.distill.tune import tune
    from headcut.run_folder import LOCK_FILE
    from headcut_grader.errors import UserError
    from test_run_folder import held_lock

    study = tmp_path / "study"
    study.mkdir()
    (study / "study.db").write_text("the live search's")
    with held_lock(study / LOCK_FILE):
        with pytest.raises(UserError, match="another run is using .*study; wait for it to finish"):
            tune(recipe_for(tiny_teacher, tune_fields=("temperature",)), study, trials=1, overwrite=True)
    assert (study / "study.db").read_text() == "the live search's"


def test_tune_refuses_a_study_whose_data_changed_and_resumes_one_whose_did_not(tiny_teacher, tmp_path):  # noqa: F811
    """Was: the study and its trial folders were named by the recipe alone, so after train_data's content changed a
    rerun reused the old trials' metrics as if measured on the new pairs (exit 0, tune.json rewritten)."""
    from headcut.synthetic import synthetic_pairs

    train = tmp_path / "train.tsv"
    pairs = synthetic_pairs(400, seed=3)
    rows = [f"{q}\t{t}\t{pairs.grades[y]}\n" for q, t, y in zip(pairs.queries, pairs.titles, pairs.labels)]
    original = "query\ttitle\tgrade\n" + "".join(rows)
    train.write_text(original)
    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, train_data=str(train), epochs=0.5, eval_every=100,
                          tune_fields=["temperature"])
    args = ["distill", str(recipe), "--tune", "1", "--out", str(tmp_path / "study")]
    assert runner.invoke(app, args).exit_code == 0
    before = (tmp_path / "study" / "tune.json").read_text()
    train.write_text(original.replace("\t5\n", "\t1\n"))  # the same pairs, other grades
    changed = runner.invoke(app, args)
    assert changed.exit_code == 2, changed.output
    assert (f"--out {tmp_path / 'study'} holds this recipe's study on other inputs (train_data changed since), whose "
            "trials' metrics this search would reuse; pass --overwrite to start a fresh study, or choose a new "
            "--out.") in " ".join(changed.output.split())
    assert (tmp_path / "study" / "tune.json").read_text() == before
    train.write_text(original)
    again = runner.invoke(app, args)  # the study is complete: resumed, no trial runs again
    assert again.exit_code == 0, again.output
    assert json.loads((tmp_path / "study" / "tune.json").read_text()) == json.loads(before)
    assert len(list((tmp_path / "study" / "trials").iterdir())) == 1
    train.write_text(original.replace("\t5\n", "\t1\n"))
    fresh = runner.invoke(app, [*args, "--overwrite"])  # the same values on other data: a trial of its own
    assert fresh.exit_code == 0, fresh.output
    assert len(list((tmp_path / "study" / "trials").iterdir())) == 2


def test_ctrl_c_says_where_a_distillation_resumes_and_exits_130(tiny_teacher, tmp_path, monkeypatch):  # noqa: F811
    """Was: Ctrl-C in `headcut distill` exited 130 with nothing said; now one line names the checkpoint a rerun
    resumes after, and the rerun does resume there."""
    from conftest import interrupt_after_checkpoints

    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, checkpoint_every=4)
    args = ["distill", str(recipe), "--out", str(tmp_path / "s")]
    interrupt_after_checkpoints(monkeypatch, 2)
    result = runner.invoke(app, args)
    assert result.exit_code == 130, result.output
    assert (f"interrupted: {tmp_path / 's.partial'} keeps the checkpoint of step 8; rerun the same command to resume "
            "after it.") in result.output.splitlines() and "Traceback" not in result.output
    monkeypatch.undo()
    resumed = interrupt_after_checkpoints(monkeypatch, -1)
    assert runner.invoke(app, args).exit_code == 0 and resumed == [8]


def test_ctrl_c_in_a_search_says_the_study_continues_and_exits_130(tiny_teacher, tmp_path, monkeypatch):  # noqa: F811
    from conftest import interrupt_after_checkpoints

    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, epochs=0.5, eval_every=100, checkpoint_every=4,
                          tune_fields=["temperature"])
    args = ["distill", str(recipe), "--tune", "2", "--out", str(tmp_path / "study")]
    interrupt_after_checkpoints(monkeypatch, 4)  # trial 1 checkpoints at steps 4, 8 and 10; trial 2 first at 4
    result = runner.invoke(app, args)
    assert result.exit_code == 130, result.output
    assert (f"interrupted: {tmp_path / 'study' / 'study.db'} keeps the finished trials; rerun the same command to "
            "continue the search (the interrupted trial runs again with the same values, resuming after its last "
            "checkpoint).") in result.output.splitlines()
    monkeypatch.undo()
    resumed = interrupt_after_checkpoints(monkeypatch, -1)
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "best of 2 trials" in again.output and resumed == [4], again.output


def test_tune_json_names_students_relative_to_the_study_folder_so_it_can_be_moved(tiny_teacher, tmp_path,  # noqa: F811
                                                                                   monkeypatch):
    """Was: tune.json recorded each trial's student by the path as typed (study/trials/<hash>), relative to the
    directory the search ran in, so after a cd or a move of the study folder it named nothing."""
    import pytest

    from headcut.distill import read_tune
    from headcut_grader.errors import UserError

    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, epochs=0.5, eval_every=100, tune_fields=["temperature"])
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    result = runner.invoke(app, ["distill", str(recipe), "--tune", "1", "--out", "study"])
    assert result.exit_code == 0, result.output
    printed = result.output.split("best student: ")[1].split("\n")[0]
    assert load_model(printed).meta["metrics"] is not None  # usable from where the command ran
    written = json.loads((tmp_path / "here" / "study" / "tune.json").read_text())
    assert written["best"]["artifact"].startswith("trials/") and written["trials"][0]["artifact"].startswith("trials/")
    (tmp_path / "here" / "study").rename(tmp_path / "moved")
    monkeypatch.chdir(tmp_path)
    best = read_tune(tmp_path / "moved")["best"]
    assert best["artifact"] == str(tmp_path / "moved" / written["best"]["artifact"])
    assert load_model(best["artifact"]).meta["metrics"]["after"]["spearman"] == best["value"]
    old = {**written, "best": {**written["best"], "artifact": "study/" + written["best"]["artifact"]}}
    (tmp_path / "moved" / "tune.json").write_text(json.dumps(old))  # as an older headcut wrote it
    with pytest.raises(UserError, match=r"tune.json names the best student .*study/trials/.*, which is not there .* "
                                        r"rerun the same headcut distill RECIPE --tune N --out .*moved to write it"):
        read_tune(tmp_path / "moved")
    (tmp_path / "moved" / "tune.json").write_text("[1, 2]")
    with pytest.raises(UserError, match="tune.json cannot be read as a study summary"):
        read_tune(tmp_path / "moved")


def test_a_study_summary_reads_with_a_losing_trials_folder_deleted(tmp_path):
    """read_tune checks only the best student's folder (what the search hands on): a losing trial's folder deleted
    to free space leaves the summary readable, its path still resolved against the study folder."""
    from headcut.distill import read_tune

    (tmp_path / "trials" / "best").mkdir(parents=True)
    best = {"number": 1, "params": {}, "value": 0.5, "artifact": "trials/best"}
    lost = {"number": 0, "params": {}, "value": 0.1, "artifact": "trials/deleted"}
    (tmp_path / "tune.json").write_text(json.dumps({"study": "s", "metric": "spearman", "trials": [lost, best],
                                                    "best": best}))
    summary = read_tune(tmp_path)
    assert [t["artifact"] for t in summary["trials"]] == [str(tmp_path / "trials" / n) for n in ("deleted", "best")]


def test_a_search_whose_first_trial_is_refused_leaves_no_study_behind(tiny_teacher, tmp_path):  # noqa: F811
    """Was: a first trial refused for a recipe value (an accumulation longer than the run) left `out` holding a study
    of no finished trial, and the corrected rerun into the same folder was refused as "the study of another recipe"
    until --overwrite. Now what the search made goes: the folder it made, else its study file."""
    import dataclasses

    import pytest

    from headcut.distill.tune import STUDY_FILE, tune
    from headcut_grader.errors import UserError

    fixed = recipe_for(tiny_teacher, epochs=0.5, eval_every=100, tune_fields=("temperature",))
    refused = dataclasses.replace(fixed, gradient_accumulation=1000)  # as read, its train_rows would refuse it
    kept = tmp_path / "kept"
    kept.mkdir()  # an empty folder the user made: it stays
    for out in (tmp_path / "new", kept):
        with pytest.raises(UserError, match="gradient_accumulation=1000 batches make one optimizer step"):
            tune(refused, out, trials=1)
    assert not (tmp_path / "new").exists() and kept.is_dir() and not (kept / STUDY_FILE).exists()
    assert len(tune(fixed, tmp_path / "new", trials=1)["trials"]) == 1


def refused_after_one(real, error: Exception):
    """`real` (a search's distill) that runs its first trial and raises `error` from each later one."""
    calls = []

    def distill(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise error
        return real(*args, **kwargs)
    return distill


def test_a_search_that_stops_after_a_scored_trial_hands_on_its_best_and_says_why(tiny_teacher, tmp_path,  # noqa: F811
                                                                                  monkeypatch):
    """Was: a search that stopped after some trials scored (a later trial diverged, or too many had no metric) kept
    its study and wrote no tune.json, exit 2, and the diverged trial, left running, was drawn again by every rerun.
    Now tune.json names the best scored trial and records why the search stopped; the refused trial is failed. It
    still exits 2 (tune raises SearchStopped), so `headcut distill --tune 20 ... && deploy` stops at 1 of 20."""
    import types

    import optuna
    import pytest

    import headcut.distill.tune as tune_module
    from headcut.distill.tune import STUDY_FILE, SearchStopped, read_tune
    from headcut.training import TrainingDiverged

    reason = "training diverged: a batch's loss is nan; lower learning_rate (nothing was published)."

    monkeypatch.setattr(tune_module, "distill", refused_after_one(tune_module.distill, TrainingDiverged(reason)))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, epochs=0.5, eval_every=100, tune_fields=["temperature"])
    result = runner.invoke(app, ["distill", str(recipe), "--tune", "3", "--out", str(tmp_path / "study")])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    summary = read_tune(tmp_path / "study")
    assert (f"the search stopped early, after 1 of 3 trials, at trial 1: {reason} {tmp_path / 'study' / 'tune.json'} "
            f"holds the best of the 1 scored trials (spearman {summary['best']['value']:.4f}: ") in said, said
    assert "rerun the same command to continue the search." in said and "Traceback" not in said
    assert len(summary["trials"]) == 1 and summary["best"]["number"] == 0
    assert summary["stopped"] == {"trials_asked": 3, "trial": 1, "reason": reason}
    storage = f"sqlite:///{tmp_path / 'study' / STUDY_FILE}"
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL"]

    scores = [0.5, float("nan"), float("nan")]  # too many trials without a metric stop the search alike

    def scores_then_nan(candidate, folder, **_):
        folder.mkdir(parents=True, exist_ok=True)
        return types.SimpleNamespace(metrics={"after": {"spearman": scores.pop(0)}})

    monkeypatch.setattr(tune_module, "distill", scores_then_nan)
    with pytest.raises(SearchStopped) as stopped:
        tune_module.tune(recipe_for(tiny_teacher, tune_fields=("temperature",)), tmp_path / "nan", trials=2)
    assert len(stopped.value.summary["trials"]) == 1 and stopped.value.summary["best"]["value"] == 0.5
    assert stopped.value.summary["stopped"]["reason"].startswith("the students of 2 trials have no spearman on the dev")
    assert read_tune(tmp_path / "nan") == stopped.value.summary


def test_a_refusal_mid_search_that_is_not_the_trial_s_is_not_a_stop(tiny_teacher, tmp_path, monkeypatch):  # noqa: F811
    """Was: any refusal from a trial after one had scored (a data file deleted mid-search, the teacher folder removed)
    was called 'the search stopped early', tune.json written as if the search had handed on its best. Only a trial's
    own stops (TrainingDiverged, too many trials unscored) stop a search; another refusal is said as is, exit 2, the
    study kept for a rerun and no tune.json written."""
    import optuna

    import headcut.distill.tune as tune_module
    from headcut.distill.tune import STUDY_FILE, SUMMARY_FILE
    from headcut_grader.errors import UserError

    monkeypatch.setattr(tune_module, "distill",
                        refused_after_one(tune_module.distill, UserError("train.tsv: no such file; check the path.")))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, epochs=0.5, eval_every=100, tune_fields=["temperature"])
    result = runner.invoke(app, ["distill", str(recipe), "--tune", "3", "--out", str(tmp_path / "study")])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "train.tsv: no such file; check the path." in said and "stopped early" not in said, said
    assert not (tmp_path / "study" / SUMMARY_FILE).exists()
    storage = f"sqlite:///{tmp_path / 'study' / STUDY_FILE}"
    study = optuna.load_study(study_name=optuna.get_all_study_names(storage)[0], storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "RUNNING"]  # a rerun runs it again


def test_an_accumulation_longer_than_the_files_pairs_is_refused_before_any_model_loads(
        tiny_teacher, tmp_path, monkeypatch):  # noqa: F811
    """Was: without train_rows (or with unlabeled_data but no unlabeled_rows) the pairs were counted only once read,
    after the teacher and student loaded, led by the data keys. Now the files' pairs are counted (only until they are
    enough for a step) as the recipe is read, led by its file and --set values, and, for a recipe built in Python,
    before the teacher loads."""
    import dataclasses

    import pytest

    import headcut.distill.run as run
    from headcut.synthetic import synthetic_pairs
    from headcut_grader.errors import UserError

    def no_model(*args, **kwargs):
        raise AssertionError("a model loaded before the refusal")

    monkeypatch.setattr(run, "load_model", no_model)
    pairs = synthetic_pairs(30, seed=3)
    unlabeled = tmp_path / "u.tsv"
    unlabeled.write_text("query\ttitle\n" + "".join(f"{q}\t{t}\n" for q, t in zip(pairs.queries, pairs.titles)))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, train_rows=None)
    sets = ["gradient_accumulation=1000", f"unlabeled_data={unlabeled}"]
    result = runner.invoke(app, ["distill", str(recipe), "--out", str(tmp_path / "s"),
                                 *(x for item in sets for x in ("--set", item))])
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert (f"{recipe} with --set gradient_accumulation=1000, --set unlabeled_data={unlabeled}: gradient_accumulation="
            f"1000 batches make one optimizer step, but at most 2030 pairs (2000 in train_data synthetic + 30 in "
            f"unlabeled_data {unlabeled}) in batches of 16") in said, said
    assert not (tmp_path / "s").exists() and not (tmp_path / "s.partial").exists()
    built = dataclasses.replace(recipe_for(tiny_teacher, train_rows=None), gradient_accumulation=1000)
    with pytest.raises(UserError, match=r"^train_data synthetic: gradient_accumulation=1000 batches make one optimizer "
                                        r"step, but at most 2000 pairs \(2000 in train_data synthetic\)"):
        run.distill(built, tmp_path / "s")


@pytest.mark.parametrize("key", ["train_data", "dev_data", "unlabeled_data"])
def test_a_data_key_spelled_as_a_folder_is_refused_by_its_key(tiny_teacher, tmp_path, monkeypatch, key):  # noqa: F811
    """`headcut distill R --set train_data=p.tsv/` (R without train_rows, its other checks passing): the recipe's
    check counted p.tsv's pairs and was refused as 'iter_pairs path=p.tsv/ ...' (dev_data=p.tsv/ as a copy of
    train_data's pairs); now one sentence names the key, before any model loads."""
    import headcut.distill.run as run

    pairs = tmp_path / "p.tsv"
    pairs.write_text("query\ttitle\tgrade\n" + "".join(f"q{i % 4}\tt {i}\t{1 + i % 5}\n" for i in range(40)))
    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, train_rows=None, train_data=str(pairs))
    monkeypatch.setattr(run, "load_model", lambda *a, **k: pytest.fail("a model loaded before the refusal"))
    result = runner.invoke(app, ["distill", str(recipe), "--out", str(tmp_path / "s"), "--set", f"{key}={pairs}/"])
    assert result.exit_code == 2, result.output
    assert (f"{key}={pairs}/ ends in /, so it names a folder, but {key} is a file to read; drop the / at its "
            "end.") in " ".join(result.output.split()), result.output
    assert "iter_pairs" not in result.output and not (tmp_path / "s").exists()


def test_a_set_value_of_a_field_the_search_draws_is_refused_not_ignored(tiny_teacher, tmp_path):  # noqa: F811
    """Was: `--tune N --set temperature=4` ran every trial at a temperature the search drew, the --set silently
    ignored (exit 0). Now it is refused before any work, naming both ways to have what was meant."""
    from headcut.distill.tune import check_not_searched

    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, tune_fields=["temperature", "learning_rate"])
    result = runner.invoke(app, ["distill", str(recipe), "--tune", "1", "--set", "temperature=4", "--out",
                                 str(tmp_path / "study")])
    assert result.exit_code == 2, result.output
    assert ("error: --set temperature=4 sets a field the search draws for each trial (tune_fields: temperature, "
            "learning_rate), so it would be ignored; drop it to search temperature, or train with it by leaving it out "
            "of the search (--set tune_fields=[learning_rate]).") in result.output
    assert not (tmp_path / "study").exists()
    check_not_searched(recipe_for(tiny_teacher, tune_fields=("temperature",)), {"kd_weight": "--set kd_weight=0.5"})


def test_a_set_tune_fields_without_tune_is_refused_not_ignored(tiny_teacher, tmp_path, monkeypatch):  # noqa: F811
    """Was: `headcut distill R --set tune_fields=[temperature]` without --tune trained once, the --set silently ignored
    (exit 0), as --set temperature=4 with --tune was. Now refused before any model loads; a recipe file's own
    tune_fields (kept for a later --tune) is not."""
    import headcut.distill.run as run

    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher)
    monkeypatch.setattr(run, "load_model", lambda *a, **k: pytest.fail("a model loaded before the refusal"))
    result = runner.invoke(app, ["distill", str(recipe), "--set", "tune_fields=[temperature]", "--out",
                                 str(tmp_path / "s")])
    assert result.exit_code == 2, result.output
    assert ("error: --set tune_fields=[temperature] says what --tune searches, and no --tune is given, so it would be "
            "ignored; pass --tune N to search, or drop that --set.") in " ".join(result.output.split()), result.output
    assert not (tmp_path / "s").exists()


def test_a_search_whose_trials_score_nan_stops_after_as_many_as_asked(tiny_teacher, tmp_path,  # noqa: F811
                                                                      monkeypatch):
    """Was: a trial whose select_metric was NaN (spearman of a student that gives every pair one grade) was failed by
    optuna with a printed warning and another drawn, so a search whose every trial did so never ended. Now such
    trials are failed quietly, the search stops with one sentence once they are as many as the trials asked for (its
    fresh study removed), and one that scores later finishes with the scored trials alone. The sentence names the one
    cause left, predictions that diverged (dev pairs of one gold value are refused before the study opens, a constant
    prediction scores 0), and its fix: was 'choose another select_metric', which fixes neither."""
    import types
    import warnings

    import pytest

    import headcut.distill.tune as tune_module
    from headcut_grader.errors import UserError

    scores, drawn = [], []

    def fake_distill(candidate, folder, **_):
        drawn.append(folder)
        assert len(drawn) < 30, "the search never ends"
        folder.mkdir(parents=True, exist_ok=True)
        value = scores.pop(0) if scores else float("nan")
        return types.SimpleNamespace(metrics={"after": {"spearman": value}})

    monkeypatch.setattr(tune_module, "distill", fake_distill)
    recipe = recipe_for(tiny_teacher, tune_fields=("temperature",))
    with warnings.catch_warnings(), pytest.raises(UserError) as refused:
        warnings.simplefilter("error")  # was: optuna's "The value nan is not acceptable", printed for each trial
        tune_module.tune(recipe, tmp_path / "nan", trials=3)
    assert str(refused.value) == ("the students of 3 trials have no spearman on the dev pairs (NaN: the predictions "
                                  "were not finite, as when training diverges), so the search cannot rank them; lower "
                                  "learning_rate (--set learning_rate=0.0002).")  # was: choose another select_metric
    with pytest.raises(UserError, match=r"; lower learning_rate \(leave learning_rate out of the search \(--set "
                                        r"tune_fields=\[temperature\]\) and --set learning_rate=0.0002\)\.$"):
        tune_module.tune(recipe_for(tiny_teacher, tune_fields=("temperature", "learning_rate")), tmp_path / "lr",
                         trials=1)
    assert not (tmp_path / "nan" / tune_module.STUDY_FILE).exists()  # its trial folders stay, for a rerun to reuse
    scores.extend([0.5, float("nan"), float("nan"), 0.7, 0.9])  # three scored among five drawn for trials=3
    summary = tune_module.tune(recipe, tmp_path / "some", trials=3)
    assert [t["value"] for t in summary["trials"]] == [0.5, 0.7, 0.9] and summary["best"]["value"] == 0.9


def students_without_a_metric(monkeypatch) -> list:
    """Make tune's distill write and return a student whose select_metric (spearman) is NaN, as a finished trial
    folder records it (null); returns the list of trial folders it was called for."""
    import types

    import headcut.distill.tune as tune_module
    from headcut_grader.files import write_json

    ran = []

    def fake_distill(candidate, folder, **_):
        ran.append(folder)
        folder.mkdir(parents=True, exist_ok=True)
        write_json(folder / "headcut.json", {"metrics": {"after": {"spearman": float("nan")}}})
        return types.SimpleNamespace(metrics={"after": {"spearman": float("nan")}})

    monkeypatch.setattr(tune_module, "distill", fake_distill)
    return ran


def test_a_search_reusing_a_finished_trial_whose_metric_is_null_counts_it_unscored(tiny_teacher, tmp_path,  # noqa: F811
                                                                                   monkeypatch):
    """Was: a rerun that reused a finished trial folder whose headcut.json holds the select_metric as null (NaN is
    written so) crashed with a TypeError (math.isfinite(None)). Now such a trial counts as one without a metric, as it
    did when it ran, and the search stops with the same sentence."""
    import pytest

    import headcut.distill.tune as tune_module
    from headcut_grader.errors import UserError

    ran = students_without_a_metric(monkeypatch)
    recipe = recipe_for(tiny_teacher, tune_fields=("temperature",))
    out = tmp_path / "study"
    out.mkdir()  # the search did not make it, so its trial folders stay
    for overwrite in (False, True):  # the rerun (a fresh study) draws the same values: their folders are reused
        with pytest.raises(UserError, match=r"^the students of 2 trials have no spearman on the dev pairs"):
            tune_module.tune(recipe, out, trials=2, overwrite=overwrite)
    assert len(ran) == 2 and json.loads((ran[0] / "headcut.json").read_text())["metrics"]["after"]["spearman"] is None


def test_a_search_on_dev_pairs_of_one_grade_is_refused_before_the_study_opens(tiny_teacher, tmp_path):  # noqa: F811
    """Spearman against one gold value is undefined (NaN for every trial): such dev pairs are refused, naming dev_data,
    before a study or trial folder is made."""
    import pytest

    from headcut.distill.tune import tune
    from headcut_grader.errors import UserError

    dev = tmp_path / "dev.tsv"
    dev.write_text("query\ttitle\tgrade\n" + "".join(f"q{i % 2}\ttitle {i}\t4\n" for i in range(10)))
    recipe = recipe_for(tiny_teacher, dev_data=str(dev), tune_fields=("temperature",))
    with pytest.raises(UserError, match=r"^dev_data .*dev.tsv: all 10 dev pairs have grade 4; Spearman"):
        tune(recipe, tmp_path / "study", trials=2)
    assert not (tmp_path / "study").exists()


def test_a_search_stopped_without_a_finished_trial_keeps_its_trial_folders_for_the_rerun(tiny_teacher,  # noqa: F811
                                                                                        tmp_path, monkeypatch):
    """Was: a fresh study that ended without a finished trial took the folder the search made with it, trial folders
    and all, so the rerun ran every trial again. Now only the study goes; the rerun into that folder is let in
    without --overwrite and reuses the trials."""
    import pytest

    import headcut.distill.tune as tune_module
    from headcut_grader.errors import UserError

    ran = students_without_a_metric(monkeypatch)
    recipe, out = recipe_for(tiny_teacher, tune_fields=("temperature",)), tmp_path / "new"
    for _ in range(2):
        with pytest.raises(UserError, match=r"^the students of 2 trials have no spearman on the dev pairs"):
            tune_module.tune(recipe, out, trials=2)
        assert not (out / tune_module.STUDY_FILE).exists()
        assert sorted(p.name for p in (out / "trials").iterdir()) == sorted(f.name for f in ran[:2])
    assert len(ran) == 2


def test_a_refused_search_whose_study_file_does_not_read_keeps_it_and_says_the_refusal(tiny_teacher,  # noqa: F811
                                                                                       tmp_path, monkeypatch):
    """Was: removing a fresh study after a refusal loaded it unguarded, so a study file that was not this recipe's
    study (damaged, or another's) replaced the user's sentence with sqlalchemy's DatabaseError or optuna's KeyError.
    Now the refusal is said and the file kept."""
    import optuna
    import pytest

    import headcut.distill.tune as tune_module
    from headcut_grader.errors import UserError

    def damaged(recipe, out, *_, **__):
        (out / tune_module.STUDY_FILE).write_text("not a database " * 100)
        raise UserError("refused.")

    def foreign(recipe, out, *_, **__):
        optuna.create_study(study_name="another", storage=f"sqlite:///{out / tune_module.STUDY_FILE}")
        raise UserError("refused.")

    recipe = recipe_for(tiny_teacher, tune_fields=("temperature",))
    for name, search in (("damaged", damaged), ("foreign", foreign)):
        monkeypatch.setattr(tune_module, "_search", search)
        with pytest.raises(UserError, match=r"^refused\.$"):
            tune_module.tune(recipe, tmp_path / name, trials=1)
        assert (tmp_path / name / tune_module.STUDY_FILE).is_file()


def test_distill_s_command_fits_120_columns_and_says_what_it_said():
    """Was: three lines of headcut/cli/distill.py ran past 120 columns; wrapped, --set's help, the throughput line
    (test_cli_distills_and_reports_against_the_teacher) and the teacher line read as before."""
    import headcut.cli.distill
    from typer.main import get_command

    lines = Path(headcut.cli.distill.__file__).read_text().splitlines()
    long = [n for n, line in enumerate(lines, 1) if len(line) > 120]
    assert not long, long
    help_of = {p.name: p.help for p in get_command(app).commands["distill"].params}
    assert help_of["set_"] == "Override a recipe key: --set temperature=3 (repeatable; each key once)."
    line = headcut.cli.distill._teacher_line({"teacher_cache": "hit", "teacher_seconds": 1.25})
    assert line == "teacher logits: read from headcut's cache (1.2s before training)"


def test_tune_with_no_field_to_search_is_led_by_where_tune_fields_came_from(tiny_teacher, tmp_path):  # noqa: F811
    """Was: 'the recipe's tune_fields is empty' even where --set tune_fields=[] emptied it; now led as other recipe
    refusals are: by the --set, or by the file that holds it. Without --tune the key is unread, and accepted."""
    import pytest

    from headcut.distill.tune import tune
    from headcut_grader.errors import UserError

    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher)
    emptied = runner.invoke(app, ["distill", str(recipe), "--out", str(tmp_path / "a"), "--set", "tune_fields=[]",
                                  "--tune", "1"])
    assert emptied.exit_code == 2 and emptied.output.startswith(
        "error: --set tune_fields=[]: tune_fields is empty, so the search has no field to draw; list the fields to "
        "search, e.g. --set tune_fields=[temperature]."), emptied.output
    held = write_recipe(tmp_path / "held.yaml", tiny_teacher, tune_fields=())
    in_file = runner.invoke(app, ["distill", str(held), "--out", str(tmp_path / "b"), "--tune", "1"])
    assert in_file.exit_code == 2 and in_file.output.startswith(f"error: {held}: tune_fields is empty"), in_file.output
    with pytest.raises(UserError, match=r"^tune recipe: tune_fields is empty.*e\.g\. tune_fields=\('temperature',\)"):
        tune(recipe_for(tiny_teacher, tune_fields=()), tmp_path / "c", trials=1)
    assert not any((tmp_path / name).exists() for name in "abc")


@pytest.mark.parametrize("command", [["distill"], ["distill", "--tune", "2"], ["finetune"]])
def test_an_out_that_holds_the_recipe_file_is_refused_even_with_overwrite(tiny_teacher, tmp_path,  # noqa: F811
                                                                          command):
    """Was: 'headcut finetune runs/t/r.yaml --out runs/t --overwrite' trained, then replaced runs/t, and the recipe
    file in it, with the artifact; an input file there (train_data) was refused so."""
    folder = tmp_path / "runs"
    folder.mkdir()
    recipe = write_recipe(folder / "r.yaml", tiny_teacher)
    if command == ["finetune"]:
        recipe.write_text(f"model: {tiny_teacher}\ntrain_data: synthetic\ntrain_rows: 64\ndev_fraction: 0.25\n")
    before = recipe.read_bytes()
    for out in (folder, recipe):
        result = runner.invoke(app, [*command, str(recipe), "--out", str(out), "--overwrite"])
        assert result.exit_code == 2 and result.stderr == f"error: --out {out} would replace the input {recipe}; " \
                                                          "write the output somewhere else.\n", result.output
    assert recipe.read_bytes() == before and sorted(tmp_path.iterdir()) == [folder]
    assert [p.name for p in folder.iterdir()] == ["r.yaml"]


@pytest.mark.parametrize("call", ["finetune", "distill", "tune"])
def test_a_python_run_whose_out_holds_its_recipe_file_is_refused(tiny_teacher, tmp_path, call):  # noqa: F811
    """The library refuses it, as the commands do (they rely on it): the refusal was the CLI's alone, so
    'finetune(load_recipe(FinetuneRecipe, "runs/r.yaml"), "runs", overwrite=True)' trained, then replaced runs and
    the recipe file in it with the artifact."""
    from headcut.distill import DistillRecipe, distill
    from headcut.distill.tune import tune
    from headcut.finetune import FinetuneRecipe, finetune
    from headcut.recipes import load_recipe
    from headcut_grader.errors import UserError

    folder = tmp_path / "runs"
    folder.mkdir()
    recipe = write_recipe(folder / "r.yaml", tiny_teacher, tune_fields=["temperature"])
    if call == "finetune":
        recipe.write_text(f"model: {tiny_teacher}\ntrain_data: synthetic\ntrain_rows: 64\ndev_fraction: 0.25\n")
    before = recipe.read_bytes()
    rec = load_recipe(FinetuneRecipe if call == "finetune" else DistillRecipe, str(recipe))
    run = {"finetune": finetune, "distill": distill, "tune": lambda r, o, **kw: tune(r, o, trials=1, **kw)}[call]
    for out in (folder, recipe):
        with pytest.raises(UserError, match=f"^out={re.escape(str(out))} would replace the input "
                                            f"{re.escape(str(recipe))}; write the output somewhere else.$"):
            run(rec, out, overwrite=True)
    assert recipe.read_bytes() == before and sorted(tmp_path.iterdir()) == [folder]
    assert [p.name for p in folder.iterdir()] == ["r.yaml"]


@pytest.mark.parametrize("command", ["finetune", "distill", "run"])
def test_a_command_looks_its_recipe_file_up_once(tiny_teacher, tmp_path, monkeypatch, command):  # noqa: F811
    """finetune, distill --tune and run resolve RECIPE once (find_recipe) and pass the path on: the default --out's
    name, tune_fields' lead and the recipe file's guard looked it up again each (a refactor, the same output)."""
    import headcut.pipeline.recipe
    import headcut.recipes
    from headcut.recipes import RECIPE_ROOT, find_recipe

    looked = []
    monkeypatch.setattr(headcut.recipes, "find_recipe",
                        lambda name, **kw: looked.append(str(name)) or find_recipe(name, **kw))
    monkeypatch.setattr(headcut.pipeline.recipe, "find_recipe", headcut.recipes.find_recipe)
    monkeypatch.chdir(tmp_path)
    recipe = write_recipe(tmp_path / "r.yaml", tiny_teacher, tune_fields=())  # refused once the lead is worded
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "r").write_text("not a folder")  # the default --out of run, refused before any stage
    args = {"finetune": ["finetune", "minilm_synthetic_cpu", "--out", str(tmp_path / "runs" / "r")],
            "distill": ["distill", str(recipe), "--tune", "1"], "run": ["run", str(recipe)]}[command]
    if command == "run":
        recipe.write_text((RECIPE_ROOT / "run" / "quickstart.yaml").read_text())
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert looked.count(args[1]) == 1, (looked, result.output)
