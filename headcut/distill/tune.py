"""`--tune N`: an optuna search over the recipe's tunable fields (temperature, loss weights, learning rate).

The study lives in `out/study.db` (sqlite), so rerunning the same command continues it: finished trials
are kept, a trial killed mid-way runs again with the same values (its distillation resumes from its
checkpoint), and the search stops once N trials are complete. Trials share one teacher-logit cache.
The study records the content its trials read (teacher weights, pairs fingerprints), and each trial's folder is
named by it too, so a study or trial is never continued onto data that changed since.
`out/tune.json` names each trial's student relative to `out` (trials/<hash>), so the study folder can be moved;
`read_tune(out)` reads it back with those paths resolved against `out`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import contextlib
import math
import os
import shutil
from pathlib import Path

from headcut.distill.recipe import DistillRecipe, tune_ranges
from headcut.distill.run import distill, with_unlabeled
from headcut.distill.students import teacher_source
from headcut.distill_arguments import TRIALS as TRIALS_RANGE
from headcut_grader.errors import UserError, check_names, named, setting
from headcut_grader.files import as_path, check_place, file_hash, overwrite_said, refuse_inputs, write_fault, write_json
from headcut_grader.ranges import check_callbacks, checked_bool, checked_number
from headcut_grader.validation import another_users, read_small_text
from headcut.finetune import load_data, run_hash
from headcut.models import resolve_source
from headcut.weight_files import weights_file
from headcut.recipes import check_recipe, to_dict
from headcut.run_folder import LOCK_FILE, locked, out_flag
from headcut.training import TrainingDiverged

STUDY_FILE = "study.db"
SUMMARY_FILE = "tune.json"
TRIALS = "trials"
TRIALS_SPELLED = {"arguments": {"trials": "tune trials"}, "flags": {"trials": "--tune"}}


class TrialsUnscored(UserError):
    """As many trials as the search asked for had no select_metric (_check_scored): the search stops."""


class SearchStopped(UserError):
    """A search stopped before its trials were complete, once one had scored (a trial diverged: TrainingDiverged, or
    TrialsUnscored). tune.json was written with the best scored trial and `stopped`; `summary` is read_tune's."""

    def __init__(self, message: str, summary: dict):
        super().__init__(message)
        self.summary = summary


TRIAL_STOPS = (TrainingDiverged, TrialsUnscored)  # what stops a search at a trial; any other refusal propagates


def study_name(recipe: DistillRecipe) -> str:
    """Same recipe apart from the searched fields = same study."""
    fixed = {k: v for k, v in to_dict(recipe).items() if k not in recipe.searched_fields}
    return "distill-" + hashlib.sha256(json.dumps(fixed, sort_keys=True).encode()).hexdigest()[:12]


def tune(recipe: DistillRecipe, out: str | Path, *, trials: int, overwrite: bool = False, progress=None,
         on_trial=None, names: str = "arguments") -> dict:
    """Run (or continue) the search until `trials` trials are complete; returns the trials and the best one (read_tune).

    A search that stops at a trial once another has scored (TRIAL_STOPS: a trial diverged, or as many trials as asked
    for had no metric) writes tune.json with the best scored trial and `stopped`, and raises SearchStopped (exit 2
    from the CLI, so a script does not carry on with fewer trials than it asked for). Any other refusal is raised as
    is, the study kept and no tune.json written. Each trial's student lands in out/trials/<hash of its recipe and
    inputs_read>/; `on_trial(record)` is called after each trial. `names`: who called, so that a refusal names `out`,
    `trials` and `overwrite` as they did (out, trials=0; `headcut distill --tune`: --out, --tune 0).
    """
    check_names(names, "tune names")
    check_callbacks("tune", progress=progress, on_trial=on_trial)
    out, flag = as_path(out, "tune out"), out_flag(names, out)
    overwrite = checked_bool(overwrite, "overwrite")
    trials = checked_number(trials, named("trials", names, section="", spelled=TRIALS_SPELLED), TRIALS_RANGE,
                            whole=True)
    check_recipe(recipe, DistillRecipe, "tune recipe")
    check_searchable(recipe, "tune recipe", names=names)
    _check_out(out, recipe, overwrite=overwrite, flag=flag)
    read = inputs_read(recipe)  # a bad data file is said before the study opens
    made, fresh = not out.exists(), overwrite or not (out / STUDY_FILE).exists()
    out.mkdir(parents=True, exist_ok=True)
    with locked(out, flag):  # a second search on `out` would delete or share the study under this one
        try:
            summary = _search(recipe, out, read, trials=trials, overwrite=overwrite, progress=progress,
                              on_trial=on_trial, flag=flag)
        except UserError:
            if fresh:  # only once locked: a live search's study is never this call's to remove
                _remove_unfinished(out, recipe, made=made)
            raise
    if "stopped" in summary:
        raise SearchStopped(stopped_sentence(summary, out), summary)
    return summary


def stopped_sentence(summary: dict, out: Path) -> str:
    """What a search that stopped before its trials were complete tells (tune.json's `stopped`)."""
    stopped, done, best = summary["stopped"], len(summary["trials"]), summary["best"]
    return (f"the search stopped early, after {done} of {stopped['trials_asked']} trials, at trial {stopped['trial']}: "
            f"{stopped['reason']} {out / SUMMARY_FILE} holds the best of the {done} scored trials "
            f"({summary['metric']} {best['value']:.4f}: {best['artifact']}); rerun the same command to continue the "
            "search.")


def _remove_unfinished(out: Path, recipe: DistillRecipe, *, made: bool) -> None:
    """A study this call opened that holds no finished trial (its first trial refused for a recipe value distill
    refuses, such as an accumulation longer than the run, or every trial without a metric) would make the corrected
    rerun a study "of another recipe": it goes. Its trial folders stay, as the rerun reuses them (_check_out lets it
    in), and `out` goes where this call made it and nothing else is left. A study file that does not read as this
    recipe's study (damaged, or another's) is kept: the refusal the user is told is not replaced by its error."""
    study = out / STUDY_FILE
    if study.exists():
        if _finished_in(study, recipe) != 0:
            return
        study.unlink()
    _remove_if_empty(out / TRIALS)
    if made and all(p.name == LOCK_FILE for p in out.iterdir()):
        shutil.rmtree(out, ignore_errors=True)


def _finished_in(study: Path, recipe: DistillRecipe) -> int | None:
    """How many trials of the recipe's study in `study` finished; None where it does not read as that study."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return _complete(optuna.load_study(study_name=study_name(recipe), storage=f"sqlite:///{study}"))
    except (KeyError, ValueError, RuntimeError, SQLAlchemyError):  # no such study, or not a study file of this optuna
        return None


def _remove_if_empty(folder: Path) -> None:
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()


def check_searchable(recipe: DistillRecipe, lead: str, *, names: str) -> None:
    """A search needs a field to draw: an empty tune_fields is refused, led by `lead`, where its value came from (the
    recipe file, its --set); `names`: who called, for the example (--set tune_fields=[...] or tune_fields=(...))."""
    if not recipe.searched_fields:
        example = "--set tune_fields=[temperature]" if names == "flags" else "tune_fields=('temperature',)"
        raise UserError(f"{lead}: tune_fields is empty, so the search has no field to draw; list the fields to "
                        f"search, e.g. {example}.")


def check_not_searched(recipe: DistillRecipe, given: dict[str, str]) -> None:
    """A field the search draws (searched_fields) that the user set over the recipe (`given`: {key: how it was set, e.g.
    '--set temperature=4'}) would be ignored by every trial: refused, naming how to keep it or search it."""
    fields = recipe.searched_fields
    for key, how in given.items():
        if key in fields:
            raise UserError(f"{how} sets a field the search draws for each trial (tune_fields: {', '.join(fields)}), "
                            f"so it would be ignored; drop it to search {key}, or train with it by leaving it out of "
                            f"the search ({_searching_without(recipe, key)}).")


def _search(recipe: DistillRecipe, out: Path, read: dict, *, trials: int, overwrite: bool, progress, on_trial,
            flag: str) -> dict:
    import optuna

    if overwrite and (out / STUDY_FILE).exists():
        (out / STUDY_FILE).unlink()  # a fresh study; finished trial folders are reused when values and data repeat
    study = _open_study(recipe, out, flag)
    with _study_writes(out, flag):
        _check_inputs(study, read, out, flag)
        running = optuna.trial.TrialState.RUNNING
        for stale in study.get_trials(deepcopy=False, states=(running,)):  # left by a killed run
            study.tell(stale.number, state=optuna.trial.TrialState.FAIL)
            study.enqueue_trial(stale.params)
        stopped = _trials(study, recipe, out, read, trials=trials, progress=progress, on_trial=on_trial)
    write_json(out / SUMMARY_FILE, _summary(study, recipe) | ({"stopped": stopped} if stopped else {}))
    return read_tune(out)


def _trials(study, recipe: DistillRecipe, out: Path, read: dict, *, trials: int, progress, on_trial) -> dict | None:
    """Run trials until `trials` are complete; what stopped the search early (_stopped_early), or None."""
    import optuna

    unscored, stopped = 0, None
    while _complete(study) < trials:
        trial = study.ask()
        try:
            values, folder, value = _run_trial(trial, recipe, out, read, progress)
            if value is None:  # optuna fails such a trial and asks for another: N in a row would never end
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                unscored += 1
                _check_scored(unscored, trials, recipe)
                continue
        except TRIAL_STOPS as e:
            stopped = _stopped_early(study, trial, e, trials)
            break
        study.tell(trial, value)
        if on_trial:
            on_trial({"number": trial.number, "params": values, "value": value, "artifact": str(folder)})
    return stopped


def _run_trial(trial, recipe: DistillRecipe, out: Path, read: dict, progress) -> tuple[dict, Path, float | None]:
    """The trial's drawn values, its student's folder and its select_metric (None: not a number), distilled unless a
    finished student of the same recipe and inputs is there."""
    ranges = tune_ranges()
    values = {name: trial.suggest_float(name, ranges[name][0], ranges[name][1], log=ranges[name][2])
              for name in recipe.searched_fields}
    candidate = dataclasses.replace(recipe, **values)
    folder = out / TRIALS / run_hash(candidate, read)
    metrics = _finished_metrics(folder)
    if metrics is None:
        metrics = distill(candidate, folder, overwrite=True, progress=progress).metrics
    trial.set_user_attr("artifact", _in_study(folder))
    return values, folder, _metric(metrics, recipe.select_metric)


def _stopped_early(study, trial, error: UserError, trials: int) -> dict:
    """Why the search stops before `trials` trials are complete: `error`, refused in `trial` (a trial that diverged,
    or too many without a metric: _check_scored). Where a trial scored, its best is what the search hands on: the
    refused trial is failed (a rerun draws other values rather than repeat it) and the record says so; where none
    did, there is nothing to hand on and `error` is raised."""
    import optuna

    if not _complete(study):
        raise error
    if trial.number in {t.number for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}:
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    return {"trials_asked": trials, "trial": trial.number, "reason": str(error)}


def _check_scored(unscored: int, trials: int, recipe: DistillRecipe) -> None:
    """A search whose trials' select_metric is not a number (`unscored` of them in this call) stops once they are as
    many as the `trials` asked for, rather than draw trials that no metric can rank for ever. Dev pairs of one gold
    value are refused before the study opens (finetune.check_dev_gold) and a constant prediction scores 0, so what
    is left is a student whose predictions diverged."""
    if unscored < trials:
        return
    whose = "the student of 1 trial has" if unscored == 1 else f"the students of {unscored} trials have"
    lower = f"--set learning_rate={recipe.learning_rate / 10:g}"
    if "learning_rate" in recipe.searched_fields:
        lower = f"leave learning_rate out of the search ({_searching_without(recipe, 'learning_rate')}) and {lower}"
    raise TrialsUnscored(f"{whose} no {recipe.select_metric} on the dev pairs (NaN: the predictions were not finite, "
                         f"as when training diverges), so the search cannot rank them; lower learning_rate ({lower}).")


def _searching_without(recipe: DistillRecipe, key: str) -> str:
    """How to search every field the recipe does but `key`."""
    rest = [f for f in recipe.searched_fields if f != key]
    return f"--set tune_fields=[{', '.join(rest)}]" if rest else "drop --tune"


def read_tune(out: str | Path) -> dict:
    """The study summary in `out/tune.json`, each trial's `artifact` resolved against `out` (as a path usable from
    here), so a moved study folder still names its students; `stopped` where the search stopped before the trials
    it was asked for (_stopped_early: trials_asked, the refused trial and the reason). Only the best student must be
    there: it is what the search hands on (`headcut distill --tune` prints it). The other trials' paths only record
    where each student was written, and may name folders deleted since to free space (loading one then says it is
    missing)."""
    out = as_path(out, "read_tune out")
    path = out / SUMMARY_FILE
    try:
        summary = json.loads(read_small_text(path))
        for record in [*summary["trials"], summary["best"]]:
            record["artifact"] = str(out / record["artifact"])
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError, KeyError, TypeError) as e:
        raise UserError(f"{path} cannot be read as a study summary ({type(e).__name__}: {e}); rerun the search that "
                        f"wrote it (headcut distill RECIPE --tune N --out {out}) to write it again.") from None
    if not Path(summary["best"]["artifact"]).is_dir():
        raise UserError(f"{path} names the best student {summary['best']['artifact']}, which is not there (a tune.json "
                        f"written before headcut recorded trial paths relative to the study folder names them relative "
                        f"to the directory the search ran in); rerun the same headcut distill RECIPE --tune N --out "
                        f"{out} to write it again (finished trials do not run again).")
    return summary


def _in_study(folder: Path) -> str:
    """A trial folder's path relative to its study folder: trials/<hash>. A study made before headcut recorded
    that holds the path as typed then (relative to that run's directory), whose last name is the same hash."""
    return f"{TRIALS}/{Path(folder).name}"


def inputs_read(recipe: DistillRecipe) -> dict:
    """What the study's trials read besides the recipe, by content, under the recipe keys that name it: the teacher's
    (and a pruned student's) weights hash and the pairs' fingerprints, as each trial's run folder records them."""
    train, dev = load_data(recipe)
    read = {"teacher": _weights_hash(teacher_source(recipe), "teacher"), "train_data": train.fingerprint,
            "dev_data": dev.fingerprint}
    if recipe.dev_data is None:  # dev pairs are a split of train_data
        read["train_data"] = [train.fingerprint, read.pop("dev_data")]
    if recipe.student == "pruned":
        read["student_model"] = _weights_hash(recipe.student_model, "student_model")
    if recipe.unlabeled_data is not None:
        read["unlabeled_data"] = with_unlabeled(recipe, train, dev)[0].fingerprint
    return read


def _weights_hash(source: str, key: str) -> str | None:
    """The hash load_model records for a model's weights (None for a folder without: loading it says so)."""
    weights = weights_file(resolve_source(source, flag=key))
    return None if weights is None else file_hash(weights)


def _open_study(recipe: DistillRecipe, out: Path, flag: str):
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the CLI reports trials itself
    try:
        with _study_writes(out, flag):
            return optuna.create_study(
                study_name=study_name(recipe), storage=f"sqlite:///{out / STUDY_FILE}", load_if_exists=True,
                direction="minimize" if recipe.select_metric == "loss" else "maximize",
                sampler=optuna.samplers.TPESampler(seed=recipe.seed),
            )
    except SQLAlchemyError as e:
        reason = str(getattr(e, "orig", None) or e).splitlines()[0]
        raise UserError(f"{out / STUDY_FILE} is damaged ({reason}); pass {overwrite_said(flag)} to start a fresh "
                        "study (finished trial folders are reused).") from None


@contextlib.contextmanager
def _study_writes(out: Path, flag: str):
    """A write to the study that fails where the user can fix it is one sentence naming study.db: a read-only study
    or folder (_read_only), a full disk (files.write_fault); sqlite's error otherwise (a damaged study, said where it
    is opened). Optuna raises a failed commit as StorageInternalError, sqlite's error its cause."""
    from optuna.exceptions import StorageInternalError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        yield
    except (SQLAlchemyError, StorageInternalError) as e:
        cause = e.__cause__ if isinstance(e, StorageInternalError) else e
        error = getattr(cause, "orig", None) or cause
        if not isinstance(error, BaseException):
            raise
        if held := _read_only(error, out, flag):
            raise UserError(f"{out / STUDY_FILE}: the study cannot be written ({str(error).splitlines()[0]}), as "
                            f"{held}.") from None
        why = write_fault(error, out)
        if why is None:
            raise
        raise UserError(f"{out / STUDY_FILE}: writing the study failed ({why}); check free space and permissions, "
                        "then rerun: it continues the study (finished trial folders are reused).") from None


def _read_only(error: BaseException, out: Path, flag: str) -> str | None:
    """What sqlite's `error` says cannot be written for its permissions (or a read-only mount): 'attempt to write a
    readonly database' (study.db, or the folder its journal is made in), and 'unable to open database file' where
    study.db is yet to be made and `out` is not writable (sqlite says the same for other causes); None otherwise.
    Said with the fix: permissions, not --overwrite (which discards the study); where another user owns the file,
    whose mode this user's chmod cannot change, asking them or another `flag`."""
    if "attempt to write a readonly database" in str(error):
        held, own = f"{out / STUDY_FILE} or its folder is read-only to this user", "both"
        paths = [out, out / STUDY_FILE]
    elif ("unable to open database file" in str(error) and not os.path.lexists(out / STUDY_FILE)
            and not os.access(out, os.W_OK)):
        held, paths, own = f"{out} is read-only to this user, so study.db cannot be made in it", [out], "it"
    else:
        return None
    if foreign := another_users(paths):
        return (f"{held}, and {foreign}, whose mode only they can change: ask them to let this user write it, then "
                f"rerun (it continues the study), or choose another {flag} for a study of this user's own")
    return (f"{held}; make {own} writable (chmod u+w {' '.join(map(str, paths))}), then rerun: it continues the study "
            "(finished trial folders are reused)")


def _check_inputs(study, read: dict, out: Path, flag: str) -> None:
    """A new study records what its trials read; one found in `out` must have read the same (its trials' metrics
    were measured on those inputs), or it is refused before any trial runs."""
    recorded = study.user_attrs.get("inputs_read")
    if recorded is None and not study.trials:
        study.set_user_attr("inputs_read", read)
        return
    if recorded == read:
        return
    if recorded is None:  # made by a headcut that did not record them
        what = "made before headcut recorded the inputs its trials read"
    else:
        what = f"on other inputs ({', '.join(k for k in read if recorded.get(k) != read[k])} changed since)"
    raise UserError(f"{setting(flag, out)} holds this recipe's study {what}, whose trials' metrics this search would "
                    f"reuse; pass {overwrite_said(flag)} to start a fresh study, or choose a new {flag}.")


def _check_out(out: Path, recipe: DistillRecipe, *, overwrite: bool, flag: str) -> None:
    """`out` is a folder that is new, empty, or holds this recipe's study (any other needs --overwrite), and
    holds no input. `flag`: what the caller named `out` by (run_folder.out_flag)."""
    refuse_inputs(out, recipe.input_paths(), flag=flag)
    check_place(out, flag)
    if out.exists() and not out.is_dir():
        raise UserError(f"{setting(flag, out)} is a file; name a folder for the study and its trials.")
    _check_own_files(out, flag)
    if overwrite or not out.exists() or all(p.name in (LOCK_FILE, TRIALS) for p in out.iterdir()):
        return  # new, empty, or the trial folders of a search whose study held no finished trial (they are reused)
    if not (out / STUDY_FILE).exists():
        raise UserError(f"{setting(flag, out)} is not empty and holds no study; choose a new folder or pass "
                        f"{overwrite_said(flag)}.")
    names = _study_names(out / STUDY_FILE)
    if names and study_name(recipe) not in names:
        raise UserError(f"{setting(flag, out)} holds the study of another recipe (a field other than tune_fields "
                        f"changed), whose {SUMMARY_FILE} this search would replace; choose a new folder or pass "
                        f"{overwrite_said(flag)}.")


def _check_own_files(out: Path, flag: str) -> None:
    """The search's own files in `out` (study.db, tune.json: files; trials: a folder) are refused, even with
    --overwrite, where something else of that name stands there (was: a folder study.db was 'damaged ... pass
    --overwrite', and the rerun with it an IsADirectoryError traceback)."""
    for name, folder in ((STUDY_FILE, False), (SUMMARY_FILE, False), (TRIALS, True)):
        path = out / name
        if not (path.exists() or path.is_symlink()) or (path.is_dir() if folder else path.is_file()):
            continue
        kind = ("a folder" if path.is_dir() else "a file" if path.is_file() else
                "not a regular file (a pipe or device)" if path.exists() else "a broken link")
        raise UserError(f"{setting(flag, out)} holds {name}, which is {kind}, where the search keeps its "
                        f"{'trials (a folder)' if folder else 'study' if name == STUDY_FILE else 'summary'}; move "
                        f"{path} away or choose a new folder.")


def _study_names(path: Path) -> list[str]:
    """The studies in `path`; none when it cannot be read (create_study then names it damaged)."""
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return optuna.get_all_study_names(storage=f"sqlite:///{path}")
    except SQLAlchemyError:
        return []


def _complete(study) -> int:
    import optuna

    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def _metric(metrics: dict, name: str) -> float | None:
    """A trial's `name` after distilling; None where it has none: NaN as measured, null as a reused trial's
    headcut.json records NaN."""
    value = metrics["after"].get(name)
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def _finished_metrics(folder: Path) -> dict | None:
    """The metrics of a trial that finished before; None (run it again) when absent or damaged."""
    try:
        metrics = json.loads(read_small_text(folder / "headcut.json")).get("metrics")
    except (OSError, ValueError, AttributeError, UserError):  # missing, cut short by a kill, or not an object
        return None
    return metrics if isinstance(metrics, dict) and isinstance(metrics.get("after"), dict) else None


def _summary(study, recipe: DistillRecipe) -> dict:
    import optuna

    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    records = [{"number": t.number, "params": t.params, "value": t.value,
                "artifact": _in_study(t.user_attrs["artifact"])} for t in done]
    best = study.best_trial
    return {"study": study.study_name, "metric": recipe.select_metric, "trials": records,
            "best": {"number": best.number, "params": best.params, "value": best.value,
                     "artifact": _in_study(best.user_attrs["artifact"])}}
