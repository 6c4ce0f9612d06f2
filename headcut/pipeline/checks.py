"""What `headcut run` checks before its first stage, so that nothing a stage would refuse surfaces hours
later, after the teacher has trained: the run folder, every file and model the recipe names, and the values
a stage checks against the teacher (the FLOPs budget). Messages name the recipe key as the user gave it (its
--set: `--set prune.flops=...`; else the key led by the file that holds it: `run.yaml: teacher.path=...`), not
the flag of the command the stage calls."""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, fields
from functools import cached_property
from pathlib import Path

from headcut_grader.data import DEFAULT_GRADES
from headcut_grader.errors import UserError, lead_of, led, quoted, setting
from headcut_grader.files import (PAIRS_FILE, check_folder_name, check_place, folder_spelled, overwrite_said,
                                  refuse_inputs, resolved_out)
from headcut_grader.ranges import checked_bool
from headcut_grader.validation import absent, irregular
from headcut.pipeline.recipe import (CLASSES, UPSTREAM, DataSection, PipelineRecipe, given_as, key_names,
                                     planned_subs, scan_gold_of, scan_settings)
from headcut.run_folder import LOCK_FILE
from headcut.training import DATA_KEYS, same_data

RUN_FILE = "run.json"  # marks a folder as a run's


@dataclass
class RunParts:
    """A run recipe and what its checks read of it, each made once and passed down: its sub-recipes (`sub_recipes`,
    with placeholders for the models the run makes) and its teacher's outline, read when a check first needs it (a
    recipe with no prune or student may need none)."""

    recipe: PipelineRecipe
    subs: dict  # 'teacher': its finetune recipe, or absent for an existing teacher; 'distill.NAME': a distill recipe

    @cached_property
    def teacher(self):
        """The run's teacher without its weights: the given one, or the base model the run trains it from."""
        return teacher_outline(self.recipe, self.subs)


def run_parts(recipe: PipelineRecipe) -> RunParts:
    """`recipe` with its sub-recipes built, for the checks below."""
    return RunParts(recipe, {name: sub for name, sub in planned_subs(recipe).items() if sub is not None})


def check_run(recipe: PipelineRecipe, out: Path, *, overwrite: bool, flag: str = "out"):
    """Everything `headcut run` checks before it writes anything; raises the first problem as a UserError. `flag`:
    what the caller named `out` by (run_folder.out_flag: out, --out). Returns the export's ExportChoice, which the
    export stage builds (the backend decided once per run)."""
    parts = run_parts(recipe)  # the sub-recipes the recipe was read with (planned_subs), passed to each check
    check_run_dir(out, parts, overwrite=overwrite, flag=flag)
    check_inputs(parts)
    check_models(parts)
    check_gold(parts, **run_gold(parts))
    check_prune_budget(parts)
    check_students(parts)
    check_bench_length(parts)
    check_choice_data(parts)
    return check_export(recipe)


def check_run_dir(out: Path, parts: RunParts, *, overwrite: bool, flag: str = "out") -> None:
    """A run directory is new, empty, or a run's own (run.json); anything else needs --overwrite. It is not, and
    does not lie inside, what the recipe reads. An input inside it is run.check_inputs_kept's: refused only where
    the run deletes or writes over it (a pairs file beside the stage folders is kept)."""
    checked_bool(overwrite, "overwrite")
    inputs = [*pairs_files(parts).values(), *model_folders(parts).values(), parts.recipe.bench.yardstick]
    target = resolved_out(out, flag)
    refuse_inputs(out, [i for i in inputs if i is None or target not in Path(os.path.realpath(i)).parents], flag=flag)
    check_folder_name(out, flag, "every stage's outputs and report.md")
    if out.exists() and not out.is_dir():
        raise UserError(f"{setting(flag, out)} is a file; name a folder.")
    check_place(out, flag)
    content = [p for p in out.iterdir() if p.name != LOCK_FILE] if out.is_dir() else []
    if content and not (out / RUN_FILE).exists() and not overwrite:
        raise UserError(f"{setting(flag, out)} is not empty and holds no headcut run; choose a new folder or pass "
                        f"{overwrite_said(flag)}.")


def pairs_files(parts: RunParts) -> dict[str, str]:
    """The pairs files the run reads, by recipe key (a student's own data too, where its section sets some)."""
    from headcut.synthetic import is_synthetic

    return {key: value for key, value in data_specs(parts).items() if not is_synthetic(value)}


def data_specs(parts: RunParts) -> dict[str, str]:
    """The pairs the run reads, files and synthetic draws, by recipe key."""
    recipe = parts.recipe
    named = {"data.train": recipe.data.train, "data.dev": recipe.data.dev, "data.test": recipe.data.test,
             "scan.data": recipe.scan.data if recipe.scan is not None else None}
    for name, sub in parts.subs.items():
        for key in DATA_KEYS:
            value = getattr(sub, key, None)
            if value not in named.values():
                named[f"{name}.{key}"] = value
    return {key: value for key, value in named.items() if value}


def model_folders(parts: RunParts) -> dict[str, str]:
    """The models the run reads, by recipe key: an existing teacher, a base model to train one from."""
    named = {"teacher.path": parts.recipe.teacher.path}
    for name, sub in parts.subs.items():
        for key in ("model", "teacher", "student_model"):
            named[f"{name}.{key}"] = getattr(sub, key, None)
    return {key: value for key, value in named.items() if value and value not in UPSTREAM}


def check_inputs(parts: RunParts) -> None:
    """Every pairs file the recipe names exists (a missing test file would otherwise surface at a later stage,
    after the teacher and the students have trained)."""
    from headcut.synthetic import is_synthetic, synthetic_seed

    recipe = parts.recipe
    for key, value in data_specs(parts).items():
        if is_synthetic(value):  # synthetic:abc, said by its key and led by the file that holds it
            name, where = given_as(recipe, *key_path(key))
            try:
                synthetic_seed(value, name=name)
            except UserError as e:
                raise UserError(f"{lead_of(where)}{e}", about=e.about) from None
    for key, value in pairs_files(parts).items():  # p.tsv/ names a folder, where Path() would drop the / and read p.tsv
        name, where = given_as(recipe, *key_path(key))
        if problem := folder_spelled(value, name, reading=True, what=PAIRS_FILE):
            raise UserError(f"{lead_of(where)}{problem}")
    missing = {key: value for key, value in pairs_files(parts).items() if not Path(value).is_file()}
    for key, value in missing.items():  # a link loop or a broken link, a folder or a device is there to see: say which
        why, where = absent(value, ""), given_as(recipe, *key_path(key))[1]
        if why:
            raise UserError(f"{lead_of(where)}{said(recipe, key, value, at=where)}: {why}.")
        if irregular(Path(value)):  # was "no such file"
            raise UserError(f"{lead_of(where)}{said(recipe, key, value, at=where)} is {irregular(Path(value))}; "
                            "pass a pairs file.")
    if missing:
        wheres = {given_as(recipe, *key_path(key))[1] for key in missing}
        where = wheres.pop() if len(wheres) == 1 else ""  # the file that holds them all leads; else each says its own
        listed = " and ".join(said(recipe, key, value, at=where) for key, value in missing.items())
        raise UserError(f"{lead_of(where)}{listed}: no such file{'s' if len(missing) > 1 else ''}; pass an existing "
                        "pairs file with --set (or synthetic).")
    check_test_apart(parts)


def key_path(key: str) -> tuple[str, ...]:
    """A run key as given_as takes it: 'data.test' -> ('data', 'test'), 'distill.NAME.KEY' -> ('distill', NAME, KEY)."""
    section, rest = key.split(".", 1)
    return (section, *rest.rsplit(".", 1)) if section == "distill" else (section, rest)


def said(recipe: PipelineRecipe, key: str, value, *, at: str = "") -> str:
    """Run key `key` and its value as the user gave them (a --set, or the key in its file), with the file that holds
    it where that is not `at`, the file the message leads with."""
    name, where = given_as(recipe, *key_path(key))
    return setting(name, value) + (f" (in {where})" if where and where != at else "")


def check_test_apart(parts: RunParts) -> None:
    """The report's pairs are not pairs a model of the run trains on: a test file that is a train file (the same
    path, a copy, or the same synthetic draw) would report how well the run learned its own training pairs."""
    recipe = parts.recipe
    test = recipe.data.test
    trains = {"data.train": recipe.data.train}
    for name, sub in parts.subs.items():
        trains[f"{name}.train_data"] = getattr(sub, "train_data", None)
    for key, train in trains.items():
        if test and train and same_data(test, train):
            where = given_as(recipe, "data", "test")[1]
            raise UserError(f"{lead_of(where)}{said(recipe, 'data.test', test, at=where)} holds the pairs of "
                            f"{said(recipe, key, train, at=where)}, so the report would grade training pairs; pass "
                            "held-out pairs with --set data.test=FILE (the dev file will do: the run leaves out its "
                            "queries that chose checkpoints).")


def check_gold(parts: RunParts, task: str, grades: tuple) -> None:
    """Every named file reads as the stages will read it, with the gold of the teacher's task (its grades, or the
    score column) wherever a stage needs gold, before any stage runs. A file named by several keys is read as the
    first that requires gold reads it, else as the first key."""
    named = pairs_files(parts)
    for value in set(named.values()):
        ways = [gold_read(parts.recipe, key) for key, path in named.items() if path == value]
        way = next((w for w in ways if w.get("require_labels", True) and not w.get("texts_only")), ways[0])
        gold = check_readable(value, parts.recipe.data, task=task, grades=grades, **way)
        if value == named.get("data.test"):
            check_test_gold(parts.recipe, gold, task=task)


def check_test_gold(recipe: PipelineRecipe, gold: tuple[int, set], *, task: str) -> None:
    """The report compares graders by Spearman (and NDCG@10), undefined against one gold value: test pairs that all
    share one grade or score are refused before the teacher trains, as finetune.check_dev_gold refuses dev pairs."""
    rows, values = gold
    if len(values) != 1:
        return
    from headcut.finetune import spearman_undefined

    what = "score" if task == "score" else "grade"
    where = given_as(recipe, "data", "test")[1]
    raise spearman_undefined(f"{lead_of(where)}{said(recipe, 'data.test', recipe.data.test, at=where)}", rows, what,
                             next(iter(values)), pairs="test", so="the report could not compare the graders on them",
                             fix="with --set data.test=FILE")


def gold_read(recipe: PipelineRecipe, key: str) -> dict:
    """How the stage that reads the file at run key `key` reads its gold (read_pairs' options; {}: required):
    unlabeled_data not at all, scan.data as the scan decides (recipe.scan_gold_of)."""
    if key.endswith("unlabeled_data"):
        return {"texts_only": True}
    return scan_gold_of(scan_settings(recipe)) if key == "scan.data" else {}


def check_readable(path: str, data: DataSection, *, task: str = "grades", grades: tuple = DEFAULT_GRADES,
                   **gold) -> tuple[int, set]:
    """Read every row of a file as the stages will: a NUL byte, a bad encoding, an empty text or a missing gold
    column is the reader's one sentence naming its line or the `data.` key to set; `gold`: read_pairs' texts_only (a
    file whose gold no stage reads: unlabeled_data), require_labels and wants_gold, where the stage decides (default:
    gold required). In chunks, so memory stays bounded on any file. Returns the rows and up to two of their gold
    values (grades as the file spells them, or scores), enough to tell one gold value from several."""
    from headcut_grader.data import iter_pairs

    rows, values = 0, set()
    for chunk in iter_pairs(path, chunk_rows=10_000, task=task, grades=grades, **gold, **data.file_options()):
        pairs = chunk.pairs
        rows += len(pairs)
        if len(values) < 2:
            values.update(pairs.scores if task == "score" and pairs.scores is not None else
                          [grades[label] for label in pairs.labels or () if label is not None])
    return rows, values


def run_gold(parts: RunParts) -> dict:
    """The teacher's task (grades or score) and grades: the gold every stage of the run reads."""
    if parts.recipe.teacher.path is not None:
        return {"task": parts.teacher.task, "grades": parts.teacher.grades}
    sub = parts.subs["teacher"]
    return {"task": sub.task, "grades": tuple(sub.grades)}


def check_models(parts: RunParts) -> None:
    """Every model the recipe names is a model folder (or a built-in name whose package is installed), and every
    student distils the teacher's task (grades, or one score)."""
    from headcut.models import resolve_source

    recipe = parts.recipe
    for key, value in model_folders(parts).items():
        with named_in(recipe, *key_path(key)) as name:
            resolve_source(value, flag=name)
    teacher_task = run_gold(parts)["task"]
    for name, sub in parts.subs.items():
        if name.startswith("distill.") and teacher_task is not None and sub.task != teacher_task:
            raise UserError(f"[{name}] distils task={sub.task}, but the run's teacher is "
                            f"{'a one-score reranker (task score)' if teacher_task == 'score' else 'a grades model'}; "
                            f"pass --set {name}.recipe={STUDENT_RECIPES[teacher_task]} (or a recipe of task "
                            f"{teacher_task}).")

    if teacher_task == "score" and recipe.scan is not None and recipe.scan.experiments != "none":
        raise UserError(f"[scan] experiments {quoted(recipe.scan.experiments)} do not support the run's one-score "
                        "teacher (task score) yet; pass --set scan.experiments=none (the head scores and probes do).")


STUDENT_RECIPES = {"grades": "distill/minilm_bottom3_cpu", "score": "distill/minilm_score_bottom3_cpu"}


def check_prune_budget(parts: RunParts) -> None:
    """prune.flops leaves room for the pooler and classifier of this teacher, which is unpruned, and prune.keep_ratio
    keeps a head of it, as the prune stage will check; and where a pruned student trains the prune's model, neither
    keeps every unit (the distill stage refuses a student of the teacher's shape, after the teacher, scan and prune
    stages). Counted on the teacher's shape (the base model's, for one the run trains)."""
    from headcut.arch import flops_per_pair, mask_shape, unit_flops
    from headcut.prune.budget import check_budget
    from headcut.prune.plan import check_head_counts
    from headcut.prune.scores import check_unpruned
    from headcut.prune_arguments import named

    recipe = parts.recipe
    if recipe.prune is None:
        return
    teacher = parts.teacher
    names = key_names(recipe, "prune", model=("teacher", "path"))
    if recipe.teacher.path is not None:
        with named_in(recipe, "teacher", "path"):
            check_unpruned(teacher, flag=named("model", names))
    if recipe.prune.flops is not None:
        seq_len = teacher.max_length  # what the prune stage counts at: the teacher's recorded max_length
        full = flops_per_pair(teacher.model, seq_len)
        with named_in(recipe, "prune", "flops") as name:
            budget = check_budget(recipe.prune.flops, unit_flops(teacher.model, seq_len), full, flag=name)
            if budget >= full:  # every head and neuron fits: the plan cuts nothing
                refuse_uncut(parts, name, recipe.prune.flops, "keeps every head and FFN neuron")
    if recipe.prune.keep_ratio is not None:
        ratio, (layers, heads) = recipe.prune.keep_ratio, mask_shape(teacher.model)
        with named_in(recipe, "prune", "keep_ratio") as name:
            if check_head_counts(ratio, 0, layers, heads, names=names) == layers * heads:
                rounded = "" if ratio == 1 else f"round({ratio} x {layers * heads}) = {layers * heads} heads, "
                refuse_uncut(parts, name, ratio, f"keeps {rounded}every head")


def refuse_uncut(parts: RunParts, name: str, share: float, keeps: str) -> None:
    """Refuses a prune whose `share` (prune.flops or prune.keep_ratio, `name`d as the user gave it) `keeps` every unit
    of the teacher, where a pruned student trains the prune stage's model, which would have the teacher's shape."""
    students = [student for student, sub in parts.subs.items()
                if student.startswith("distill.") and sub.student_model == UPSTREAM[1]]
    if students:
        key = name.rpartition(".")[2]
        other = " (or prune by prune.flops in its place)" if key == "keep_ratio" else ""
        raise UserError(f"{setting(name, 1 if share == 1 else share)} {keeps}, so [{students[0]}]'s pruned student "
                        "would have the teacher's shape, no smaller than its teacher; lower "
                        f"prune.{key}{other}, or make the student bottom-k or config.")  # 1 as typed, not 1.0


@contextmanager
def named_in(recipe: PipelineRecipe, *path: str, keys: dict[str, tuple[str, ...]] | None = None):
    """A library check's refusal of the run's key at `path`, led by the file that holds the key (the run recipe, or
    a teacher's or student's recipe it leaves the key to); a key a --set gave is named by that --set alone. Gives
    the key's name as the user gave it (given_as). `keys` (section_keys): the run keys of a call that checks several,
    by the names the library takes them by: a refusal is led by where the first of them it is about
    (UserError.about) came from, and one about none of them (a parity failure) is not led."""
    name, where = given_as(recipe, *path)
    try:
        yield name
    except UserError as e:
        where = _where_about(recipe, e, keys) if keys else where
        if not where:
            raise
        raise led(e, f"{where}: ") from None


def _where_about(recipe: PipelineRecipe, error: UserError, keys: dict[str, tuple[str, ...]]) -> str:
    """Where (given_as) the first run key of `keys` that `error` is about came from; "" where it is about none, or
    does not say (a parity failure, a pairs file's reader: its sentence names what it refuses). Never read from
    the sentence's text: a stage's checks say what they are about (UserError.about, concerning())."""
    about = [keys[name] for name in error.about if name in keys]
    return given_as(recipe, *about[0])[1] if about else ""


def section_keys(section: str, **elsewhere: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """Every key of run recipe section `section` (prune, export, ...) by its name, as named_in's `keys` takes them;
    `elsewhere`: an argument another key holds (model=('teacher', 'path')), as key_names takes them."""
    return {f.name: (section, f.name) for f in fields(CLASSES[section])} | elsewhere


def teacher_outline(recipe: PipelineRecipe, subs: dict):
    """The run's teacher without its weights: the given one, or the base model the run trains it from (`subs`:
    the run's sub-recipes, its finetune recipe among them)."""
    from headcut.models import outline

    if recipe.teacher.path is not None:
        with named_in(recipe, "teacher", "path") as name:
            return outline(recipe.teacher.path, flag=name)
    sub = subs["teacher"]
    meta = {"grades": list(sub.grades), "max_length": sub.max_length}
    if sub.task == "score":  # one output, as the teacher will have
        meta["task"] = "score"
    with named_in(recipe, "teacher", "model") as name:
        return outline(sub.model, flag=name, meta=meta)


def check_export(recipe: PipelineRecipe):
    """export.backend and export.precision as the export stage will check them (bf16: OpenVINO, on a CPU that
    computes it; backend auto: the runtimes usable here, runtimes.export_backend), named by their keys; returns
    choose_export's ExportChoice, for the export stage to build."""
    from headcut.export.build import choose_export
    from headcut.export.build_openvino import check_request

    e, names = recipe.export, key_names(recipe, "export")
    with named_in(recipe, "export", "precision"):
        choice = choose_export(e.backend, e.precision, names=names)
        if choice.openvino is not None:
            check_request(choice.openvino, labelled=True, names=names)
    return choice


def check_bench_length(parts: RunParts) -> None:
    """bench.seq_len is within the teacher's positions, as `headcut bench` checks --seq-lens: the bench stage, the
    run's last, pads each grader's timed batch to it, and its students embed no more positions than the teacher."""
    from headcut.batching import check_max_length

    flag, where = given_as(parts.recipe, "bench", "seq_len")
    check_max_length(parts.teacher.model, parts.recipe.bench.seq_len, flag=flag, where=where, whose="the teacher's")


def check_choice_data(parts: RunParts) -> None:
    """The export stage checks each grader on pairs apart from the report's (pairs.choice_pairs): the test file's
    pairs whose queries chose a checkpoint, else data.dev (when it is not data.test), else data.train. A recipe
    that names none of them (an existing teacher, no train file) would fail there, after the teacher stage."""
    from headcut.pipeline.pairs import same_spec, selections

    recipe, data = parts.recipe, parts.recipe.data
    if data.train or (data.dev and not same_spec(data.dev, data.test)):
        return
    meta = parts.teacher.meta if recipe.teacher.path is not None else None
    if any(same_spec(spec, data.test) for spec, _ in selections(recipe, meta)):
        return
    raise UserError("[export] checks each grader on pairs apart from the report's data.test, and the recipe names "
                    "none: pass --set data.train=FILE or --set data.dev=FILE (pairs other than data.test's).")


def check_students(parts: RunParts) -> None:
    """A student reads no more tokens than the teacher has positions for, a bottom-k student keeps fewer layers than
    the teacher has (its layer_map naming the teacher's layers), and a config student is no larger than the teacher in
    any size, as the distill stage will check
    (after the teacher stage, which may train for an hour); a pruned student's prune: check_prune_budget."""
    from headcut.arch import encoder_layers
    from headcut.batching import check_max_length
    from headcut.distill.sizes import check_config_student, check_keep_layers, check_layer_map, check_teacher_task

    recipe = parts.recipe
    students = {name: sub for name, sub in parts.subs.items() if name.startswith("distill.")}
    if not students:
        return
    teacher = parts.teacher
    layers = len(encoder_layers(teacher.model))
    for name, sub in students.items():
        def named(key, name=name):  # as the user gave it: a --set, or the key in the file that holds it
            return given_as(recipe, *name.split(".", 1), key)

        flag, where = named("max_length")
        check_max_length(teacher.model, sub.max_length, flag=flag, where=where, whose="the teacher's")
        if "teacher" not in parts.subs:  # an existing teacher (teacher.path), whose task and grades are recorded
            check_teacher_task(teacher, sub, where=named("task" if sub.task != teacher.task else "grades")[1],
                               section=f"{name}.")
        if sub.student == "bottom-k":
            key, where = named("keep_layers")
            check_keep_layers(sub.keep_layers, layers, key=key, where=where)
            key, where = named("layer_map")
            check_layer_map(sub.layer_map, sub.keep_layers, layers, key=key, where=where)
        elif sub.student == "config":
            check_config_student(sub, teacher.model.config, layers, named=named)
