"""Run a pipeline recipe: stages in order, each skipped when its fingerprint is unchanged.

A stage's fingerprint covers its settings, the content of the files it reads, its kind's algorithm
version (ALGORITHM_VERSIONS) and the fingerprints of the outputs of the stages it depends on (each
finished stage gets a fresh `made` token), so changing one stage reruns it and what depends on it, nothing
upstream, and a stage that had to run again (its folder deleted, say) is followed by everything downstream of it.
Each stage folder holds stage.json: {"fingerprint", "inputs" (what it covers, so a rerun can say what changed),
"state": "running" | "done", "made", "result"}, and once
done the size and sha256 of every file the stage made ("outputs", outputs.py) under a "seal". A stage
found "running" with the same fingerprint was interrupted: it runs again in place, and finetune and
distill resume from their checkpoints (run_folder.py); with another fingerprint, or a folder that no longer
holds what it recorded (a file deleted, cut short or edited, the record itself edited), its folder is cleared.
The run holds OUT/.lock throughout, so no two runs write one folder.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from headcut_grader.errors import UserError, check_names, lead_of
from headcut_grader.files import as_path, file_hash, overwrite_said, resolved_out, write_json
from headcut_grader.validation import read_small_text
from headcut_grader.ranges import check_callbacks, checked_bool
from headcut.pipeline import stages
from headcut.pipeline.bench import bench
from headcut.pipeline.checks import RUN_FILE, check_run, key_path, model_folders, pairs_files, run_parts, said
from headcut.pipeline.outputs import files_of, outputs_problem, seal
from headcut.pipeline.report import WRITTEN
from headcut.pipeline.recipe import PipelineRecipe, as_dict, from_mapping, given_as, planned_subs
from headcut.export.runtimes import export_backend
from headcut.recipes import check_recipe, find_recipe, to_dict
from headcut.run_folder import locked, not_a_folder, out_flag

STAGE_FILE = "stage.json"
# What a kind of stage makes from the same settings and inputs. Bump a kind's number with any change to
# its code that changes its output (a new tuner, another export gate, a fixed metric), so a rerun of an
# older run folder redoes that stage and what follows instead of skipping it as unchanged. 0 is the
# first release and stays out of the fingerprint, so run folders made before versions existed still skip.
# export 1, bench 1: INT8 recipes chosen, and the report made, on pairs of disjoint queries (pairs.py).
ALGORITHM_VERSIONS = {"teacher": 0, "scan": 0, "prune": 0, "distill": 0, "export": 1, "bench": 1}


@dataclass(frozen=True)
class Stage:
    name: str  # teacher, scan, prune, distill.NAME, export.NAME, bench
    deps: tuple[str, ...]
    settings: dict  # what the fingerprint covers besides deps and the files named in it
    run: Callable[[stages.Context], dict]

    @property
    def folder(self) -> str:
        return self.name.replace(".", "-")


@dataclass
class RunResult:
    out: Path
    states: dict[str, str] = field(default_factory=dict)  # stage -> skipped | done | failed
    seconds: dict[str, float] = field(default_factory=dict)
    records: dict[str, dict] = field(default_factory=dict)
    report: dict | None = None  # what report.py wrote (table rows, the grader to deploy)


def plan(recipe: PipelineRecipe) -> list[Stage]:
    """The run's stages in order, with what each depends on and the settings its fingerprint covers."""
    subs = planned_subs(recipe)  # placeholders for the models the run makes: their stages' fingerprints cover them
    data = to_dict(recipe.data)
    teacher = {"path": recipe.teacher.path} if recipe.teacher.path else {"recipe": to_dict(subs["teacher"])}
    out = [Stage("teacher", (), teacher, stages.teacher)]
    models = ["teacher"]
    if recipe.scan is not None:
        out.append(Stage("scan", ("teacher",), {"scan": to_dict(recipe.scan), "data": data}, stages.scan))
    if recipe.prune is not None:
        deps = ("teacher", "scan") if recipe.prune.keep_ratio is not None else ("teacher",)
        # drop_layers came after the first release: at its default, a run folder made before it still skips
        prune = {k: v for k, v in to_dict(recipe.prune).items() if k != "drop_layers" or v}
        out.append(Stage("prune", deps, {"prune": prune, "data": data}, stages.prune))
        models.append("prune")
    for name, _ in recipe.distill:
        sub = subs[f"distill.{name}"]
        deps = ("teacher", "prune") if sub.student == "pruned" else ("teacher",)
        out.append(Stage(f"distill.{name}", deps, {"recipe": to_dict(sub)}, stages.distill(name)))
        models.append(f"distill.{name}")
    # which pairs chose checkpoints decides which the report leaves out and the INT8 gate reads (pairs.py)
    chosen_on = sorted({(r.dev_data, r.dev_rows, r.seed) for r in subs.values() if r is not None}, key=str)
    export = {"export": to_dict(recipe.export), "chosen_on": chosen_on,
              "data": {k: v for k, v in data.items() if k != "test_rows"}}  # the report's size is the bench's
    if recipe.export.backend == "auto":  # the runtimes installed here: installing OpenVINO later reruns the export
        alone = export_backend("auto", recipe.export.precision).alone
        export["auto_from"] = ["onnxruntime"] if alone else ["onnxruntime", "openvino"]
    for model in models:
        label = "pruned" if model == "prune" else model.partition(".")[2] or model
        out.append(Stage(f"export.{label}", (model,), export, stages.export(model)))
    out.append(Stage("bench", tuple(s.name for s in out if s.name.startswith("export.")) + ("teacher",),
                     {"bench": to_dict(recipe.bench), "data": data, "chosen_on": chosen_on}, bench))
    return out


def stage_inputs(stage: Stage, upstream: dict[str, str], hashes: dict[str, str]) -> dict:
    """What a stage's fingerprint covers, as JSON reads it back. `upstream`: each finished stage's output token
    (its fingerprint and `made`)."""
    files = {v: _content(v, hashes) for v in _strings(stage.settings) if Path(v).exists()}
    covered = {"stage": stage.name, "settings": stage.settings, "files": files,
               "deps": {d: upstream[d] for d in stage.deps}}
    version = ALGORITHM_VERSIONS[stage.name.partition(".")[0]]
    if version:
        covered["version"] = version
    return json.loads(json.dumps(covered, sort_keys=True, default=str))


def fingerprint(stage: Stage, upstream: dict[str, str], hashes: dict[str, str]) -> str:
    return _digest(stage_inputs(stage, upstream, hashes))


def _digest(inputs: dict) -> str:
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def what_changed(before: dict | None, now: dict) -> str:
    """Why a stage runs again, from the inputs its last run recorded: the first few settings, files and stages
    upstream that differ (a run folder older than the record: that its settings or inputs changed)."""
    if not isinstance(before, dict):
        return "its settings or inputs changed"
    old, new = _flat(before), _flat(now)
    changes = []
    for key in [*new, *(k for k in old if k not in new)]:  # settings, files, stages, version
        if old.get(key) == new.get(key) or (key.startswith("files.") and not (key in old and key in new)):
            continue  # a file read or no longer read follows from a setting, which is named
        changes.append(_change(key, old.get(key), new.get(key)))
    shown = "; ".join(changes[:3]) + (f"; and {len(changes) - 3} more" if len(changes) > 3 else "")
    return f"since its last run: {shown}" if changes else "its settings or inputs changed"


def _change(key: str, before, now) -> str:
    kind, _, name = key.partition(".")
    if kind == "settings":
        return f"{name} {_shown(before)} -> {_shown(now)}"
    return {"files": f"{name} changed", "deps": f"the {name} stage it reads was rerun"}.get(
        kind, "headcut's algorithm for it changed")


def _flat(inputs: dict) -> dict:
    """A stage's recorded inputs as {kind.name: value}: settings by dotted key, files by path, stages by name."""
    files, deps = (part if isinstance(part, dict) else {} for part in (inputs.get("files"), inputs.get("deps")))
    out = {f"settings.{k}": v for k, v in _leaves(inputs.get("settings"))}  # a record edited by hand: what reads
    out |= {f"files.{path}": digest for path, digest in files.items()}
    out |= {f"deps.{name}": token for name, token in deps.items()}
    return out | {"version": inputs.get("version")}


def _leaves(value, prefix: str = ""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{prefix}{k}.")
    else:
        yield prefix.rstrip("."), value


def _shown(value) -> str:
    return "(unset)" if value is None else json.dumps(value)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _content(path: str, hashes: dict[str, str]) -> str:
    """A file's content hash, or a model folder's: each of its files (weights, config, tokenizer, headcut.json:
    an edited max_length or tokenizer changes what a stage makes); computed once per run."""
    p = Path(path)
    if path not in hashes:
        model = p.is_dir() and (p / "config.json").is_file()
        hashes[path] = file_hash(p) if p.is_file() else _model_hash(p) if model else "folder"
    return hashes[path]


def _model_hash(folder: Path) -> str:
    """One hash of the names and contents of a model folder's files."""
    digest = hashlib.sha256()
    for f in sorted(x for x in folder.iterdir() if x.is_file()):
        digest.update(f"{f.name}\0{file_hash(f)}\0".encode())
    return digest.hexdigest()


def _read_stage(folder: Path) -> dict:
    try:
        record = json.loads(read_small_text(folder / STAGE_FILE))
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError, UserError):
        return {}


def run_pipeline(recipe: PipelineRecipe, out: str | Path, *, overwrite: bool = False,
                 progress: Callable[[dict], None] | None = None, names: str = "arguments") -> RunResult:
    """Run (or resume, or skip through) every stage, then write report.md/report.html into `out`.

    `overwrite` reruns every stage from scratch. `progress(event)` gets {"stage", "state"} when a stage
    starts (running) or ends (skipped, done, failed), and {"stage", "state": "running", "done", "total",
    "what"} as it goes. Raises what the failing stage raised, after reporting it as failed. `names`: who called, so
    that a refusal of `out` names it as they did (out, overwrite=True; `headcut run`: --out, --overwrite).
    """
    check_names(names, "run_pipeline names")
    check_callbacks("run_pipeline", progress=progress)
    flag = out_flag(names, out)
    given = as_path(out, "run_pipeline out")
    out = resolved_out(given, flag)
    check_recipe(recipe, PipelineRecipe, "run_pipeline recipe",
                 loader="headcut.pipeline.load_pipeline('recipe.yaml')")
    if recipe.planned is None:  # built or replace()d in Python: read back through the checks a recipe file gets
        recipe = from_mapping(as_dict(recipe), where=recipe.source, origins=dict(recipe.origins))
    check_inputs_kept(recipe, out, overwrite=overwrite, flag=flag, shown=given)
    choice = check_run(recipe, out, overwrite=overwrite, flag=flag)  # the export's, built as checked
    out.mkdir(parents=True, exist_ok=True)
    with locked(out, flag):  # a second run on `out` would redo stages, or rerun a live one beside it
        return _run(recipe, out, overwrite=overwrite, say=progress or (lambda event: None), flag=flag, choice=choice)


def _run(recipe: PipelineRecipe, out: Path, *, overwrite: bool, say: Callable[[dict], None], flag: str,
         choice=None) -> RunResult:
    from headcut.pipeline.report import write_report

    stages_of_run = plan(recipe)
    strangers = {s.name for s in stages_of_run if not_a_folder(out / s.folder, overwrite=overwrite, flag=flag)}
    if overwrite:
        _drop_unplanned(out, {s.folder for s in stages_of_run})
    write_json(out / RUN_FILE, {"recipe": as_dict(recipe), "states": {}})  # marks the folder as a run's from the start
    result, fingerprints, outputs, hashes = RunResult(out), {}, {}, {}
    for stage in stages_of_run:
        folder = out / stage.folder
        inputs = stage_inputs(stage, outputs, hashes)
        fp = fingerprints[stage.name] = _digest(inputs)
        recorded = _read_stage(folder)
        finished = recorded.get("fingerprint") == fp and recorded.get("state") == "done" and not overwrite
        why = outputs_problem(folder, recorded, record_file=STAGE_FILE) if finished else None
        if recorded.get("fingerprint") not in (None, fp) and not overwrite:
            why = what_changed(recorded.get("inputs"), inputs)
        elif not recorded and (folder / STAGE_FILE).exists() and not overwrite:
            why = f"{stage.folder}/{STAGE_FILE} cannot be read (cut short, or not a stage record)"
        if finished and why is None:
            result.states[stage.name], result.records[stage.name] = "skipped", recorded["result"]
            outputs[stage.name] = f"{fp}:{recorded.get('made')}"
            say({"stage": stage.name, "state": "skipped"})
            continue
        if stage.name in strangers:
            folder.unlink()  # a link or file put there: replaced, and what a link points at left alone
        elif folder.exists() and (recorded.get("fingerprint") != fp or overwrite or why):
            shutil.rmtree(folder)  # another recipe's, a stale or a damaged output: nothing in it may be resumed
        say({"stage": stage.name, "state": "running", **({"reason": why} if why else {})})
        outputs[stage.name] = f"{fp}:{_run_stage(stage, recipe, folder, inputs, result, say, choice)}"
    write_json(out / RUN_FILE, {"recipe": as_dict(recipe), "fingerprints": fingerprints, "states": result.states})
    result.report = write_report(out, recipe, result.records)
    return result


def _drop_unplanned(out: Path, planned: set[str]) -> None:
    """--overwrite runs afresh: the folders of stages an earlier recipe had and this one has not (a student
    dropped since, its model and grader) are removed rather than left beside the new run's."""
    for folder in _unplanned(out, planned):
        shutil.rmtree(folder)


def _unplanned(out: Path, planned: set[str]) -> list[Path]:
    """The stage folders in `out` (they hold stage.json) of stages not in `planned`; a user's own folder is none."""
    if not out.is_dir():
        return []
    return [folder for folder in out.iterdir()
            if folder.name not in planned and not folder.is_symlink() and (folder / STAGE_FILE).is_file()]


def check_inputs_kept(recipe: PipelineRecipe, out: Path, *, overwrite: bool, flag: str = "out",
                      shown: Path | None = None) -> None:
    """Nothing the run reads is a file the run writes at the top of `out` (run.json, report.md, ...) or lies in a
    folder the run deletes: a stage's folder, cleared whenever that stage reruns (its settings or inputs changed,
    its folder damaged, --overwrite), and with --overwrite the stage folders the recipe no longer has. `out` itself
    is kept, so a recipe or a pairs file beside its stage folders (runs/demo/recipe.yaml) is safe. `out`:
    resolved; `shown`: as the caller gave it, for the sentence; `flag`: what named `overwrite`."""
    checked_bool(overwrite, "overwrite")  # overwrite='no' is truthy: refused as check_run_dir refuses it
    shown = shown or out
    stages_of_run = plan(recipe)
    deleted = {out / s.folder: f"the {s.name} stage's folder, which the run deletes whenever that stage reruns"
               for s in stages_of_run}
    if overwrite:
        deleted |= {folder: f"the folder of a stage the recipe no longer has, which {overwrite_said(flag)} deletes"
                    for folder in _unplanned(out, {s.folder for s in stages_of_run})}
    written = {out / name for name in (RUN_FILE, *WRITTEN)}
    for key, (value, path) in read_inputs(recipe).items():
        places = {Path(os.path.abspath(path)), Path(path).resolve()} if os.path.lexists(path) else set()
        where = given_as(recipe, *key_path(key))[1] if key else ""
        input_said = said(recipe, key, value, at=where) if key else f"the recipe {value}"
        for file in written & places:
            raise UserError(f"{lead_of(where)}{input_said} names the run's own {file.name}, which the run writes over; "
                            f"rename it or move it out of {shown}, and pass its new path.")
        for folder, what in deleted.items():
            if any(p == folder or folder in p.parents for p in places):
                inside = "is" if folder in places else "is inside"
                raise UserError(f"{lead_of(where)}{input_said} {inside} {shown / folder.name}, {what}; move it out "
                                "of that folder and pass its new path.")


def read_inputs(recipe: PipelineRecipe) -> dict[str, tuple[str, str]]:
    """What the run reads, by its key ('': the recipe file itself): the value as given and the path it names (a
    built-in recipe name: its file); a built-in model name names no path here and is skipped by its caller."""
    parts = run_parts(recipe)
    named = {"": recipe.source}
    if recipe.teacher.recipe is not None:
        named["teacher.recipe"] = recipe.teacher.recipe
    named |= {f"distill.{name}.recipe": student.recipe for name, student in recipe.distill}
    named |= {**pairs_files(parts), **model_folders(parts), "bench.yardstick": recipe.bench.yardstick}
    out = {}
    for key, value in named.items():
        if value is None:
            continue
        kind = {"teacher.recipe": "finetune"}.get(key, "distill" if key.endswith(".recipe") else None)
        out[key] = (value, str(find_recipe(value, kind=kind, flag="")) if kind else str(value))
    return out


def _run_stage(stage: Stage, recipe: PipelineRecipe, folder: Path, inputs: dict, result: RunResult,
               say: Callable[[dict], None], choice=None) -> str:
    """Run one stage into `folder` and record it done, with what it read and its files' checksums; returns its
    `made` token."""
    folder.mkdir(parents=True, exist_ok=True)
    fp = _digest(inputs)
    write_json(folder / STAGE_FILE, {"fingerprint": fp, "state": "running", "inputs": inputs})
    started = time.perf_counter()

    def report(done, total, what, name=stage.name):
        say({"stage": name, "state": "running", "done": done, "total": total, "what": what})

    ctx = stages.Context(recipe, folder, dict(result.records), report, result.out, export_choice=choice)
    try:
        record = stage.run(ctx)
    except BaseException:
        result.states[stage.name] = "failed"
        say({"stage": stage.name, "state": "failed"})
        raise
    seconds = result.seconds[stage.name] = time.perf_counter() - started
    made = uuid.uuid4().hex[:12]
    entry = {"fingerprint": fp, "inputs": inputs, "state": "done", "made": made, "seconds": seconds, "result": record,
             "outputs": files_of(folder, record_file=STAGE_FILE)}
    write_json(folder / STAGE_FILE, entry)
    sealed = _read_stage(folder)  # sealed as a later run reads it back (JSON turns tuples into lists)
    write_json(folder / STAGE_FILE, {**sealed, "seal": seal(sealed)})
    result.states[stage.name], result.records[stage.name] = "done", sealed["result"]
    say({"stage": stage.name, "state": "done", "seconds": seconds})
    return made
