"""The pipeline recipe: recipes/run/*.yaml, one section per stage, each a frozen dataclass.

`teacher` and each `distill` student name a finetune/distill recipe; their other keys override that
recipe's keys, so `--set distill.bottom3.epochs=2` reaches the student's distill recipe. Every section is
checked when the recipe is read, sub-recipes included, and every problem is reported in one error.
"""
from __future__ import annotations

import dataclasses
import re
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from headcut.data_spec import check_file_keys
from headcut_grader.data import FILE_KEYS, file_keys
from headcut_grader.errors import Given, Typed, UserError, WordedError, concerning, cut, quoted, shown
from headcut.export.bench_settings import SEQ_LEN, BenchSettings
from headcut.export.gate import ACCURACY_LOSS, MIN_GATE_PAIRS, SPEARMAN_LOSS, Int8Gate
from headcut_grader.ranges import BATCH, check_timed_batch, range_field, ranged, same_as
from headcut_grader.validation import absent
from headcut.synthetic import MAX_SYNTHETIC
from headcut.evaluate_arguments import argument_field, argument_range as scan_range
from headcut.prune_arguments import argument_range
from headcut.recipes import (Placed, SetError, at_line, at_lines, check_kind, find_recipe, from_dict, key_said,
                             led_again, lines_said, mistyped_text, nearest, parse_override, read_recipe_file,
                             refuse_repeat, text_fix, to_dict)

SECTIONS = ("data", "teacher", "scan", "prune", "distill", "export", "bench", "floor")


@dataclass(frozen=True)
class DataSection:
    train: str | None = None  # a file or "synthetic": what the teacher and the students train on, prune scores on
    dev: str | None = None  # checkpoint selection; None: finetune/distill hold out a query split of train
    test: str | None = None  # the report's pairs; = dev: less every query that chose a checkpoint (pairs.py)
    preset: str | None = None  # a data preset (column names, format), e.g. homedepot
    query_col: str | None = None  # the files' columns, where they differ from the preset's
    title_col: str | None = None
    label_col: str | None = None  # the grade column (grades teacher) or the score column (one-score teacher)
    test_rows: int | None = ranged(1000, 1, MAX_SYNTHETIC)  # None: all; at most what a synthetic draw can make
    seed: int = argument_field("seed")

    def file_options(self) -> dict:
        """How the files are read (headcut_grader.readers.read_pairs); messages name this section's keys."""
        return dict(file_keys(self), keys="data.")

    def check(self, where: str, *, named: frozenset = frozenset()) -> None:
        given = {key for key, value in file_keys(self).items() if value is not None or key in named}
        check_file_keys(self, where, {"train": self.train, "dev": self.dev, "test": self.test}, given)


@dataclass(frozen=True)
class TeacherSection:
    recipe: str | None = None  # a finetune recipe (name or path) to train the teacher ...
    path: str | None = None  # ... or an existing grader folder to use as it is
    overrides: tuple[tuple[str, Any], ...] = ()  # the section's other keys: the finetune recipe's
    lines: tuple[tuple[str, int], ...] = field(default=(), compare=False)  # where they stand in the run's file


@dataclass(frozen=True)
class ScanSection:
    data: str | None = None  # None: data.dev, else data.test
    rows: int = ranged(500, 1, MAX_SYNTHETIC)
    methods: tuple[str, ...] = ("ablation", "kl", "fisher")
    # all, none, or numbers 1-5 (random, halves, layers, heads, term); experiments: 3 is the text "3"
    experiments: str = field(default="all", metadata={"numbers_are_text": True})
    probes: bool = True
    # fewer than a scan's default 5: the run's scan is a quick look before pruning (the shipped recipes draw 2-3)
    draws: int = range_field(3, scan_range("draws"))
    bootstrap: int = argument_field("iters")  # the scan's iters


@dataclass(frozen=True)
class PruneSection:
    # heads only, ranked by the scan's `method`
    keep_ratio: float | None = range_field(None, argument_range("keep_ratio"))
    flops: float | None = range_field(None, argument_range("flops"))  # heads and FFN neurons to this share of the FLOPs
    # the criterion (evaluate/criteria.py); keep_ratio: one the scan computes; flops: one that scores neurons
    method: str = "fisher"
    layer_prior: float = range_field(0.0, argument_range("layer_prior"))
    # flops: train pairs scored, at most what a synthetic draw can make
    score_rows: int = range_field(512, dataclasses.replace(argument_range("score_rows"), high=MAX_SYNTHETIC))
    # flops: train pairs for mask tuning (0.2 held out)
    calibrate: int = range_field(512, argument_range("calibrate_rows"))
    tune: bool = True
    tune_fit: Literal["scales", "weights", "best"] = "best"  # flops: what tuning re-fits (prune.tune.MODES; --tune-fit)
    # flops: reach the budget in this many steps, re-scored and re-tuned (0, 1: one shot)
    iterative: int = range_field(0, argument_range("iterative"))
    drop_layers: bool = False  # flops: also try removing whole layers (one shot); a ModernBERT CrossEncoder needs false


@dataclass(frozen=True)
class StudentSection:
    recipe: str = "distill/minilm_bottom3_cpu"
    overrides: tuple[tuple[str, Any], ...] = ()  # the section's other keys: the distill recipe's
    lines: tuple[tuple[str, int], ...] = field(default=(), compare=False)  # where they stand in the run's file


@dataclass(frozen=True)
class ExportSection:
    # auto: each runtime's fastest graph that passes the gate on this CPU (bf16 only where it runs natively), fp32
    # where none does; fp32, int8, bf16: that one (int8 and bf16 fall back to fp32 when no graph passes)
    precision: Literal["fp32", "int8", "bf16", "auto"] = "auto"
    # auto: an ONNX Runtime and an OpenVINO graph, graded with the one timed fastest on this CPU (ONNX Runtime's
    # alone where headcut[openvino] is not installed); onnxruntime: one ONNX graph; openvino: an OpenVINO graph
    # beside an fp32 ONNX one (needs headcut[openvino])
    backend: Literal["onnxruntime", "openvino", "auto"] = "auto"
    rows: int = ranged(1000, MIN_GATE_PAIRS, MAX_SYNTHETIC)  # test pairs for the parity and INT8 gates
    min_agreement: float = same_as(Int8Gate, "min_agreement")
    max_spearman_drift: float = same_as(Int8Gate, "max_spearman_drift")
    max_drop: float = same_as(Int8Gate, "max_drop")
    threads: int = same_as(BenchSettings, "threads")


@dataclass(frozen=True)
class BenchSection:
    batch: int = range_field(32, BATCH)  # headcut bench --batch-sizes' range: the stage times as it does
    seq_len: int = range_field(64, SEQ_LEN)  # as headcut bench --seq-lens and --repeats: declared with BenchSettings
    repeats: int = same_as(BenchSettings, "repeats")
    threads: int = same_as(BenchSettings, "threads")
    bootstrap: int = argument_field("bootstrap")
    # another grader folder (e.g. a teacher trained on every train pair): each grader is also compared with it
    yardstick: str | None = None

    def __post_init__(self):
        if isinstance(self.batch, int) and isinstance(self.seq_len, int) and self.batch > 0 and self.seq_len > 0:
            check_timed_batch(self.batch, self.seq_len, flags="bench.batch, bench.seq_len")


@dataclass(frozen=True)
class FloorSection:
    """The grader to deploy: the fastest whose point estimates stay within these of the teacher."""
    accuracy_points: float = range_field(1.0, ACCURACY_LOSS)
    spearman: float = range_field(0.01, SPEARMAN_LOSS)


@dataclass(frozen=True)
class PipelineRecipe:
    data: DataSection
    teacher: TeacherSection
    scan: ScanSection | None
    prune: PruneSection | None
    distill: tuple[tuple[str, StudentSection], ...]
    export: ExportSection
    bench: BenchSection
    floor: FloorSection
    source: str = "recipe"  # where it was read from, for messages
    origins: tuple[tuple[tuple[str, ...], str], ...] = ()  # (key path, '--set ITEM') of each --set, for messages
    # its sub-recipes as planned_subs builds them: once, when the recipe is read, for its checks, plan and stages
    planned: dict | None = field(default=None, init=False, repr=False, compare=False)


CLASSES = {"data": DataSection, "scan": ScanSection, "prune": PruneSection, "export": ExportSection,
           "bench": BenchSection, "floor": FloorSection}


SET_EXAMPLE = "teacher.epochs=1 or --set distill.bottom3.epochs=2"


def load_pipeline(name_or_path: str | Path, *, overrides: list[str] = (),
                  flag: str = "load_pipeline name_or_path") -> PipelineRecipe:
    """Read a pipeline recipe and its `section.key=value` overrides; every problem is reported at once. `flag`: what
    named `name_or_path` (find_recipe's)."""
    path = find_recipe(name_or_path, kind="run", flag=flag)
    data = read_recipe_file(path, what=f"a pipeline recipe is a mapping of sections ({', '.join(SECTIONS)})")
    check_kind(path, data, "run", name_or_path, flag, fields=SECTIONS)
    origins: dict[tuple, str] = {}
    for item in overrides:
        key, value = parse_override(item, form="section.key=value", example=SET_EXAMPLE)
        parts = key.split(".")
        if len(parts) < 2 or not all(parts):
            raise UserError(f"--set {quoted(item)} is not section.key=value; write e.g. --set {SET_EXAMPLE}.")
        students = data.get("distill") if isinstance(data.get("distill"), dict) else {}
        if parts[0] == "distill" and len(parts) > 2 and parts[1] not in students and parts[2] != "recipe":
            raise UserError(f"--set {quoted(item)}: the recipe has no student {quoted(parts[1])} (students: "
                            f"{', '.join(students) or 'none'}); add one with --set distill.{parts[1]}.recipe=NAME.")
        node = data
        for depth, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                node[part] = {}
            if not isinstance(node[part], dict):
                raise UserError(_not_a_section(item, parts[:depth + 1], node[part], path))
            node = node[part]
        refuse_repeat(origins.get(tuple(parts)), item)
        node[parts[-1]] = value
        origins[tuple(parts)] = f"--set {cut(item)}"
    return from_mapping(data, where=str(path), origins=origins)


def _not_a_section(item: str, keys: list[str], value, path: Path) -> str:
    """Why --set ITEM cannot reach into `keys`, whose `value` is no mapping: a section the recipe file `path` wrote
    otherwise, or a key, which --set sets whole (a list too: scan.methods.0=kl does not set one item). Was: "'methods'
    is not a section; write e.g. --set teacher.epochs=1", whatever the key."""
    key = ".".join(keys)
    if len(keys) == 1:
        return (f"--set {quoted(item)}: section {quoted(key)} of {path} is {shown(value)}, but a section must be a "
                "mapping of keys to values; fix the file.")
    if isinstance(value, list):
        return (f"--set {quoted(item)}: {key} is a key holding a list, not a section, and --set gives a list whole; "
                f"write e.g. --set '{key}=[A, B]'.")
    return f"--set {quoted(item)}: {key} is a key, not a section; set its value, e.g. --set {key}=VALUE."


def from_mapping(data: dict, *, where: str = "recipe", origins: dict | None = None) -> PipelineRecipe:
    origins = origins or {}
    problems: list[str] = []
    unknown = [k for k in data if k not in SECTIONS]
    by_set = [k for k in unknown if _set_alone(data[k], (k,), origins)]  # led by their --sets, not the file
    if len(by_set) < len(unknown):
        problems.append(_unknown_sections([k for k in unknown if k not in by_set], origins))
    for name in by_set:
        items = " ".join(item for path, item in origins.items() if path[0] == name)
        problems.append(_problem(f"{items}: ", _unknown_sections([name], {})))

    def section(name, cls, value, optional=False):
        if value is None and optional:
            return None
        if not isinstance(value if value is not None else {}, dict):
            problems.append(f"section '{name}' must be a mapping of keys to values")
            return None
        return _checked(lambda: from_dict(cls, value or {}, where=f"[{name}]",
                                          origins={k[-1]: v for k, v in origins.items() if k[0] == name}), problems)

    parts = {name: section(name, cls, data.get(name), optional=name in ("scan", "prune"))
             for name, cls in CLASSES.items()}
    teacher = _teacher(data.get("teacher") or {}, problems, origins, on=lambda *paths: _on(data, origins, *paths))
    students = []
    distill = data.get("distill") or {}
    if not isinstance(distill, dict):
        problems.append("section 'distill' maps student names to their settings, e.g. bottom3: {recipe: ...}")
        distill = {}
    for name, value in distill.items():
        lead = _student_lead(name, value, origins)  # a student --set values alone gave: led by them
        problem = _student_name_problem(name, [n for n, _ in students])
        if problem:
            problems.append(_problem(lead, problem))
            continue
        if not isinstance(value, dict):
            problems.append(_problem(lead, f"student '{name}' must be a mapping (recipe: and the distill recipe's "
                                           "keys to change)"))
            continue
        recipe = value.get("recipe", StudentSection.recipe)
        if not isinstance(recipe, str) or not recipe.strip():
            said = "is empty" if recipe is None or not str(recipe).strip() else f"is {recipe!r:.60}, not text"
            fix = _as_text(recipe, origins.get(("distill", name, "recipe")))
            problems.append(_problem(_by(origins, ("distill", name, "recipe")), f"[distill] {name}.recipe {said}; "
                                     f"name a distill recipe (e.g. {StudentSection.recipe}), or leave the key out for "
                                     f"that one{fix}"))
            continue
        if "teacher" in value:
            problems.append(_own_teacher_problem(str(name), value["teacher"], origins))
            continue
        if "tune_fields" in value:
            problems.append(_problem(_by(origins, ("distill", name, "tune_fields")), f"[distill.{name}] key "
                                     "'tune_fields' says what headcut distill --tune searches, and a run trains each "
                                     "student once, so it would be ignored; drop it, or search with headcut distill "
                                     "RECIPE --tune N"))
            continue
        rest = tuple((k, v) for k, v in value.items() if k != "recipe")
        students.append((str(name), StudentSection(recipe, rest, _lines(value, rest))))
    prune, data_part = parts["prune"], parts["data"]
    if data_part is not None and data_part.test is None:
        problems.append(_problem(_by(origins, ("data", "test")), "[data] test is not set; pass --set data.test=FILE "
                                 "(labelled pairs kept apart from training, which the report grades every grader on), "
                                 "or synthetic:2 offline"))
    if data_part is not None and prune is not None and prune.flops is not None and data_part.train is None:
        problems.append(_train_for_flops(origins, where, getattr(data.get("prune"), "lines", {}).get("flops")))
    yardstick = parts["bench"].yardstick if parts["bench"] is not None else None
    if yardstick is not None and not (Path(yardstick) / "config.json").is_file():
        problems.append(_problem(_by(origins, ("bench", "yardstick")), f"[bench] yardstick {yardstick}"
                                 f"{_not_a_model_folder(Path(yardstick))}; pass --set bench.yardstick=DIR (a model "
                                 "folder written by headcut finetune) or null"))
    from headcut.prune.targets import one_target_problem  # headcut.prune loads torch: only when a recipe is read

    target = prune and one_target_problem({"keep_ratio": prune.keep_ratio, "flops": prune.flops}, flags=False)
    def on(*paths) -> str:
        return _on(data, origins, *paths)

    if target:
        problems.append(on(("prune", "keep_ratio"), ("prune", "flops")) + f"[prune] give {target}")
    if prune is not None and prune.keep_ratio is not None:
        problems += _ignored_prune_keys(prune, origins, on)
    elif prune is not None:
        problems += _switched_off_prune_keys(prune, origins, on) + _one_plan_prune_keys(prune, origins, on)
    if prune is not None and prune.keep_ratio is not None and parts["scan"] is None and not problems:
        problems.append(on(("prune", "keep_ratio")) + "[prune] keep_ratio ranks heads by the scan's scores; add a scan "
                        "section or use flops")
    _check_scan(parts["scan"], prune, problems, set_keys={k[-1] for k in origins if k[0] == "scan"}, on=on)
    _check_prune_method(prune, problems)
    recipe = PipelineRecipe(parts["data"] or DataSection(), teacher, parts["scan"], prune, tuple(students),
                            parts["export"], parts["bench"], parts["floor"], where, tuple(origins.items()))
    if data_part is not None:  # every sub-recipe built once here, with placeholder paths; a [data] section that
        # did not read would have them all report its keys as missing
        _checked(lambda: planned_subs(recipe), problems)
    if problems:
        raise _refused(problems, where)
    return recipe


def _not_a_model_folder(path: Path) -> str:
    """Why `path`, named before it, is not a model folder: a file, nothing there (validation.absent), or a folder
    without config.json."""
    if path.is_file():
        return " is a file, not a model folder"
    if not path.exists():
        return f": {absent(path, 'no such folder')}"
    return " is not a model folder (no config.json)"


def _train_for_flops(origins: dict, where: str, line: int | None) -> str:
    """[prune] flops with no data.train, led as a problem of --set values is (_by): by the --sets that gave both
    keys, else by data.train's --set (naming the file that holds flops, and its `line` there), else by the file
    (naming flops' --set, or its line)."""
    train, flops = ("data", "train"), ("prune", "flops")
    both = _by(origins, train, flops)
    lead = both or _by(origins, train)
    line = None if flops in origins else line
    said = "" if both else _from(origins, flops) or (f" (in {at_line(where, line)})" if lead else "")
    on = f"on line {line}, " if line and not lead else ""
    return _problem(lead, f"{on}[prune] flops{said} scores units on data.train, which is not set; pass --set "
                          "data.train=FILE")


def _set_alone(value, path: tuple, origins: dict) -> bool:
    """Whether --set values gave all of `value`, the run recipe's part at key `path`."""
    if path in origins:
        return True
    return isinstance(value, dict) and bool(value) and all(_set_alone(v, (*path, k), origins) for k, v in value.items())


def _unknown_sections(unknown: list, origins: dict) -> str:
    return f"unknown section {', '.join(map(key_said, unknown))}{_nearest(unknown, origins)}; the sections are " \
           f"{', '.join(SECTIONS)}"


def _nearest(unknown: list, origins: dict) -> str:
    """For a misspelt section: the --set that gave it, if one did, and the section it is nearest to."""
    said = [f"from {item}" for path, item in origins.items() if path[0] == unknown[0]][:1]
    close = nearest(unknown[0], SECTIONS)
    said += [f"did you mean '{close}'?"] if close else []
    return f" ({'; '.join(said)})" if said else ""


# Names the run's other graders take in its stages and report (export.teacher, export.pruned).
RESERVED_STUDENT_NAMES = ("teacher", "pruned")


def _student_name_problem(name, earlier: list[str]) -> str | None:
    """A student's name becomes its stages' names, its folders and its report row: letters, digits, _ and -,
    none of the other graders' names, and no two that differ only in case (one folder on some file systems).
    YAML reads a key such as null or true as no text at all, and 010 as the number 8: refused, not named 'None',
    'True' or '8'."""
    if name is None or isinstance(name, bool):
        return (f"student name {shown(name)} is not text; write the name, quoted if YAML reads it otherwise "
                f"('{shown(name)}':)")
    if isinstance(name, (int, float)):  # YAML reads a key 010 as 8 and 1.50 as 1.5: the name as written is lost
        return (f"student name {shown(name)} is a number to YAML; quote the name as written, e.g. '010': (not 010:)")
    name = str(name)
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
        return (f"student name {name!r} must be 1-64 letters, digits, '_' or '-' (it names the student's folders "
                "and report row); rename it")
    if name.lower() in RESERVED_STUDENT_NAMES:
        return f"student name '{name}' is the run's {name.lower()} grader's name; rename the student"
    twin = next((n for n in earlier if n.lower() == name.lower()), None)
    if twin is not None:
        return f"students '{twin}' and '{name}' would share one folder; give them names that differ in more than case"
    return None


def _student_lead(name, value, origins: dict) -> str:
    """The lead of a problem with student `name` as a whole (its name, its section `value`): the --sets that gave all
    of it, if they did ('--set distill.NAME.recipe=...: '); else nothing (the run recipe's file leads)."""
    if not isinstance(name, str) or not _set_alone(value, ("distill", name), origins):
        return ""
    return " ".join(item for path, item in origins.items() if path[:2] == ("distill", name)) + ": "


def _own_teacher_problem(name: str, teacher, origins: dict) -> str:
    """A run's students learn from the run's teacher (the model its report compares them with), which the run puts
    in each distill recipe: a student's own `teacher` key would silently replace it. Led by its --set, if one gave
    it."""
    return _problem(_by(origins, ("distill", name, "teacher")),
                    f"[distill.{name}] key 'teacher' ({str(teacher):.80}) would replace the run's teacher, which every "
                    "student of a run learns from; drop it to use the run's teacher, or distill from another teacher "
                    "with headcut distill RECIPE --set teacher=DIR")


# sample sizes the shipped recipes set: switching one to keep_ratio need not unset them
SAMPLE_SIZES = ("score_rows", "calibrate")


def _ignored_prune_keys(prune: PruneSection, origins: dict, on) -> list[str]:
    """The [prune] keys set away from their defaults that a keep_ratio prune ranked by the scan's scores would
    ignore (`prune.targets.ignored_settings`), each as a problem (led by the --sets that gave both keys)."""
    from headcut.prune.targets import ignored_settings
    from headcut.training import is_set

    changed = [f.name for f in fields(PruneSection)
               if f.name not in SAMPLE_SIZES and is_set(prune, f.name, frozenset())]
    return [_problem(_by(origins, ("prune", key), ("prune", "keep_ratio")),
                     on(("prune", key), ("prune", "keep_ratio")) + f"[prune] {key} works with flops; keep_ratio ranks "
                     f"heads by the scan's scores once and tunes nothing, so it would be ignored (drop {key}, or use "
                     "flops)")
            for key, _ in ignored_settings("keep_ratio", changed, from_scores=True)]


def _switched_off_prune_keys(prune: PruneSection, origins: dict, on) -> list[str]:
    """The [prune] keys set away from their defaults whose switches are off (`prune.targets.SWITCHED`: tune_fit
    with tune false, calibrate with tune and drop_layers false), each as a problem worded as the CLI words their
    flags. A recipe file's own key is let be where a --set turns its switch off (quickstart's calibrate under --set
    prune.tune=false), as training.is_given lets a file's key be."""
    from headcut.prune.targets import SWITCHED, switched_off_problem
    from headcut.training import is_given

    def off(key, switches) -> bool:
        named = frozenset(name for section, name, *_ in origins if section == "prune")
        return (hasattr(prune, key) and is_given(prune, key, named, over=switches)
                and all(getattr(prune, switch) is False for switch in switches))

    return [_problem(_by(origins, ("prune", key), ("prune", switches[0])),
                     on(("prune", key), ("prune", switches[0]))
                     + switched_off_problem(key, name=f"[prune] {key}", off=f"[prune] {switches[0]}: false"))
            for key, (switches, _, _) in SWITCHED.items() if off(key, switches)]


def _one_plan_prune_keys(prune: PruneSection, origins: dict, on) -> list[str]:
    """drop_layers with iterative > 1, refused before any stage runs as the prune would refuse it."""
    from headcut.prune.targets import one_plan_problem

    if prune.drop_layers and prune.iterative > 1:
        return [_problem(_by(origins, ("prune", "drop_layers"), ("prune", "iterative")),
                         on(("prune", "drop_layers"), ("prune", "iterative"))
                         + one_plan_problem("[prune] drop_layers", "[prune] iterative", prune.iterative))]
    return []


def _check_scan(scan: ScanSection | None, prune: PruneSection | None, problems: list[str], *,
                set_keys: set = frozenset(), on=lambda *paths: "") -> None:
    """The scan's methods and experiments, the settings only experiments it does not run read, and the prune's
    method among its methods, before any stage runs: the CLI's checks, naming the [scan] keys (`on`: their lines)."""
    from headcut.evaluate.scan import EXPERIMENT_SETTINGS, check_experiment_settings, parse_experiments, parse_methods
    from headcut.training import is_given

    if scan is None:
        return
    _checked(lambda: parse_methods(list(scan.methods), name="[scan] methods"), problems)
    chosen = _checked(lambda: parse_experiments(scan.experiments, name="[scan] experiments"), problems)
    # a recipe file's own draws are let be where --set changes its experiments (quickstart with
    # `--set scan.experiments=none`, as a one-score teacher is told to)
    changed = {key: f"[scan] {key}" for key in EXPERIMENT_SETTINGS
               if hasattr(scan, key) and is_given(scan, key, set_keys, over=("experiments",))}
    if chosen is not None:
        for key, name in changed.items():  # the first setting refused, as one call with them all refuses it
            said = []
            _checked(lambda key=key, name=name: check_experiment_settings({key: name}, chosen,
                                                                          experiments="[scan] experiments"), said)
            if said:
                problems.append(on(("scan", key), ("scan", "experiments")) + said[0])
                break
    if prune is not None and prune.keep_ratio is not None and prune.method not in scan.methods:
        problems.append(on(("prune", "method"), ("scan", "methods"))
                        + f"[prune] method {quoted(prune.method)} ranks heads by scores the scan does not compute "
                        f"(scan.methods: {', '.join(scan.methods)}); add it there or pick one of those")


def _check_prune_method(prune: PruneSection | None, problems: list[str]) -> None:
    """A FLOPs prune's criterion must score FFN neurons as well as heads."""
    from headcut.evaluate.criteria import criterion

    if prune is not None and prune.flops is not None:
        _checked(lambda: criterion(prune.method, flag="[prune] method", neurons=True), problems)


def _checked(make, problems: list[str]):
    try:
        return make()
    except UserError as e:
        problems.append(_problem_of(e))
        return None


def _problem_of(error: UserError) -> str:
    """A refusal as one of the recipe's problems, marked as --set values' alone where it is a SetError."""
    return SetProblem(str(error)) if isinstance(error, SetError) else str(error)


def _teacher(value: dict, problems: list[str], origins: dict, *, on=lambda *paths: "") -> TeacherSection | None:
    """The run's [teacher] (`value`), or None where its problems (each placed on its keys' lines: `on`) are added."""
    if not isinstance(value, dict):
        problems.append("section 'teacher' must be a mapping (recipe: NAME or path: DIR)")
        return None
    recipe, path = value.get("recipe"), value.get("path")
    given = {key: origins[("teacher", key)] for key in value if ("teacher", key) in origins}  # key -> its --set
    for key, text, what in (("recipe", recipe, "a finetune recipe"), ("path", path, "a grader folder")):
        if text is not None and (not isinstance(text, str) or not text.strip()):  # 010: 10, not the folder 010
            problems.append(_problem(_by(given, key), f"[teacher] {key} is {shown(text)}, not text; name {what}"
                                                       f"{_as_text(text, given.get(key))}"))
            return None
    if recipe is None and path is None:
        problems.append(_problem(_by(given, "recipe") or _by(given, "path"), "[teacher] names no teacher; pass "
                                 "--set teacher.path=DIR (an existing grader) or --set teacher.recipe=NAME (a finetune "
                                 "recipe to train)"))
        return None
    if recipe is not None and path is not None:
        lead = _by(given, "recipe", "path")
        problems.append(_problem(lead, on(("teacher", "recipe"), ("teacher", "path"))
                                 + f"[teacher] gives both recipe {recipe}{'' if lead else _from(given, 'recipe')} "
                                       f"and path {path}{'' if lead else _from(given, 'path')}; keep one (--set "
                                       "teacher.recipe=null or --set teacher.path=null)"))
        return None
    rest = tuple((k, v) for k, v in value.items() if k not in ("recipe", "path"))
    if path is not None and rest:
        lead = _by(given, "path", *(k for k, _ in rest))  # all from --set: they lead, not the run recipe's file
        keys = " and ".join(k + ("" if lead else _from(given, k)) for k, _ in rest)
        problems.append(_problem(lead, on(*(("teacher", k) for k in ("path", *dict(rest))))
                                 + f"[teacher] path {path}{'' if lead else _from(given, 'path')} is used as it "
                                       f"is; drop {keys}, or train a teacher with {'it' if len(rest) == 1 else 'them'} "
                                       "instead (--set teacher.recipe=NAME --set teacher.path=null)"))
        return None
    return TeacherSection(None if recipe is None else str(recipe), None if path is None else str(path), rest,
                          _lines(value, rest))


def _on(data: dict, origins: dict, *paths: tuple[str, ...]) -> str:
    """Where a problem of the run recipe's keys at `paths` (('prune', 'flops')) begins among its others: 'on lines 20
    and 23, ' for those the file holds (Placed.lines), as recipes._problems_said places a section's; none a --set
    gave."""
    lines = []
    for path in paths:
        node = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if path not in origins and isinstance(node, dict):
            lines.append(getattr(node, "lines", {}).get(path[-1]))
    said = lines_said(lines)
    return f"on {said}, " if said else ""


def _lines(value: dict, rest: tuple) -> tuple:
    """The lines of the run recipe file that a section's keys `rest` stand on (Placed.lines), for its refusals."""
    lines = getattr(value, "lines", {})
    return tuple((key, lines[key]) for key, _ in rest if key in lines)


def _by(given: dict, *keys) -> str:
    """The lead of a problem with `keys`, where --set gave them all (`given`: key -> '--set ITEM'): those --sets."""
    return " ".join(given[key] for key in keys) + ": " if all(key in given for key in keys) else ""


class SetProblem(str):
    """A recipe problem with values --set gave alone, led by those --sets (not the run recipe's file)."""


def _problem(lead: str, text: str) -> str:
    """A problem worded `text`, led by `lead` (_by: the --sets that gave all it names), if any."""
    return SetProblem(lead + text) if lead else text


def _refused(problems: list[str], where: str = "") -> UserError:
    """The recipe's problems in one sentence, led by its file `where` (none: each names its own) unless --set values
    alone made each (a SetProblem, decided where it was found): then a SetError those --sets lead."""
    said = "; ".join(p.rstrip(".") for p in problems) + "."
    if all(isinstance(p, SetProblem) for p in problems):
        return SetError(said)
    return UserError(f"{where}: {said}" if where else said)


def _from(given: dict, key) -> str:
    """For a key's value named inside a problem: the --set that gave it, if one did."""
    return f" (from {given[key]})" if key in given else ""


def _as_text(value, given: str | None) -> str:
    """For a name YAML read as another type (a number, a list, true), how to give it as text; `given`: the
    '--set ITEM' it came from, if it did."""
    if value is None or not mistyped_text(value, given):  # null: the key is empty, not text mistyped
        return ""
    return f" (quote it as written to give text: {text_fix(given)})"


RECIPE_FILE_READ = "recipe file"  # UserError.about of a refusal of what a sub-recipe's file holds (read_sub_recipe)


def read_sub_recipe(cls, name: str, kind: str, *, injected: dict, overrides: dict, where: str,
                    adjust=None, origins: dict | None = None, key: str = "recipe", lines: tuple = ()):
    """A finetune/distill recipe file, then what the pipeline injects (data, upstream models), then the
    section's own keys, checked as that recipe. `adjust(merged)` may add injected values that depend on
    the merged keys (a pruned student's model). The run's data files are named keys (is_set): given over the
    recipe file, as --train and --dev are. `key`: the run's key that named the file, as given (given_as). `lines`:
    where the section's keys stand in the run's file (a refusal names the line of each key: the file's or the run's)."""
    from headcut.training import DATA_KEYS

    with concerning("recipe"):  # names the recipe: key as given (its --set, if any)
        path = find_recipe(name, kind=kind, flag=key)
    with concerning(RECIPE_FILE_READ):  # a refusal of what the file holds, led by that key's --set, if any
        base = read_recipe_file(path)
    with concerning("recipe"):
        check_kind(path, base, kind, name, key, fields={f.name for f in fields(cls)})
    put = {**{k: v for k, v in injected.items() if v is not None}, **overrides}  # over the file's keys
    merged = {**base, **put}
    if adjust:
        added = {k: v for k, v in adjust(merged).items() if k not in overrides}
        merged, put = {**merged, **added}, {**put, **added}
    if merged.get("train_data") is None:
        raise UserError(f"{where}: no training pairs; pass --set data.train=FILE.")
    ours = {k: line for k, line in getattr(base, "lines", {}).items() if k not in put}
    merged = Placed(merged, lines={**ours, **dict(lines)})
    given = {key for key in DATA_KEYS if injected.get(key) is not None}
    section = {"finetune": TeacherSection, "distill": StudentSection}[kind]  # its keys beside the recipe's
    return from_dict(cls, merged, where=where, file=path.name, named=frozenset(overrides) | given, origins=origins,
                     beside=tuple(f.name for f in fields(section) if f.name not in ("overrides", "lines")))


def as_dict(recipe: PipelineRecipe) -> dict:
    """The recipe as JSON-ready data (what run.json records)."""
    out = {}
    for name in SECTIONS:
        value = getattr(recipe, name)
        if name == "distill":
            out[name] = {n: {"recipe": s.recipe, **dict(s.overrides)} for n, s in value}
        elif name == "teacher":
            out[name] = {"recipe": value.recipe, "path": value.path, **dict(value.overrides)}
        else:
            out[name] = None if value is None else to_dict(value)
    return out


def teacher_recipe(recipe: PipelineRecipe):
    """The finetune recipe of the teacher, with the run's data put in; None for an existing grader. It needs
    nothing the run makes, so the teacher stage reads it before any student can be."""
    from headcut.finetune import FinetuneRecipe

    if recipe.teacher is None or recipe.teacher.recipe is None:
        return None
    return read_sub_recipe(FinetuneRecipe, recipe.teacher.recipe, "finetune", injected=_common(recipe.data),
                           overrides=dict(recipe.teacher.overrides), where="[teacher]", lines=recipe.teacher.lines,
                           origins=_set_in(recipe, ("teacher",)), key=given_as(recipe, "teacher", "recipe")[0])


def _set_in(recipe: PipelineRecipe, section: tuple[str, ...]) -> dict:
    """The keys of `section` (a path: ('teacher',), ('distill', NAME)) that a --set gave -> that '--set ITEM'."""
    return {path[-1]: item for path, item in recipe.origins if path[:-1] == section}


def given_as(recipe: PipelineRecipe, *path: str) -> tuple[str, str]:
    """How a message names the run's key at `path` (('prune', 'keep_ratio'), ('distill', NAME, KEY)) as the user gave
    it, and where: its --set ('--set distill.NAME.KEY', nowhere else), else the key in the run recipe's file, or in
    the teacher's finetune or the student's distill recipe where the run's section leaves the key to it."""
    dotted, origins = ".".join(path), dict(recipe.origins)
    if path in origins:  # with the value as typed, which setting() shows for it (1e-9, not 1e-09)
        return Typed(f"--set {dotted}", origins[path].partition("=")[2].strip()), ""
    teacher = recipe.teacher
    if path[0] == "teacher" and path[1:] and path[1] not in ("recipe", "path") and teacher.recipe is not None \
            and path[1] not in dict(teacher.overrides):
        return dotted, f"[teacher] ({find_recipe(teacher.recipe, kind='finetune')})"
    student = dict(recipe.distill).get(path[1]) if path[0] == "distill" and len(path) > 2 else None
    if student is not None and path[2] != "recipe" and path[2] not in dict(student.overrides):
        return dotted, f"[distill.{path[1]}] ({find_recipe(student.recipe, kind='distill')})"
    return dotted, recipe.source


def key_names(recipe: PipelineRecipe, section: str, **elsewhere: tuple[str, ...]) -> Given:
    """`names` for a library check of the run's [section] keys: "keys", each one a --set gave named by that --set
    ('--set prune.flops'); `elsewhere`: an argument another key holds (model=('teacher', 'path'))."""
    paths = {path[-1]: path for path, _ in recipe.origins if path[:-1] == (section,)} | elsewhere
    return Given("keys", {name: given_as(recipe, *path)[0] for name, path in paths.items()
                          if path in dict(recipe.origins)})


# a sub-recipe's keys that the run's [data] gives it -> its key there
DATA_INTO_SUBS = {"train_data": "train", "dev_data": "dev", **{key: key for key in FILE_KEYS}}


def _common(data: DataSection) -> dict:
    return {key: getattr(data, name) for key, name in DATA_INTO_SUBS.items()}


UPSTREAM = ("<teacher>", "<pruned>")  # what planned sub-recipes name in place of the models the run makes


def planned_subs(recipe: PipelineRecipe) -> dict:
    """`sub_recipes` with UPSTREAM's placeholders, as the run's checks and plan read them: built on first use and
    kept with `recipe` (each build reads the recipe files and checks them, a teacher's outlining its base model)."""
    if recipe.planned is None:
        object.__setattr__(recipe, "planned", sub_recipes(recipe, teacher_dir=UPSTREAM[0], pruned_dir=UPSTREAM[1]))
    return recipe.planned


def sub_recipes(recipe: PipelineRecipe, *, teacher_dir: str, pruned_dir: str | None) -> dict:
    """The finetune recipe of the teacher (None for an existing grader) and the distill recipe of each
    student ('distill.NAME'), with the run's data and upstream models put in; every problem in one sentence."""
    from headcut.distill.recipe import DistillRecipe

    common = _common(recipe.data)
    out = {"teacher": None}
    problems = []
    try:
        out["teacher"] = teacher_recipe(recipe)
    except UserError as e:
        problems.append(_sub_problem(e, recipe, ("teacher",)))
    for name, student in recipe.distill:
        def adjust(merged, name=name):
            if merged.get("student") != "pruned":
                return {}
            if recipe.prune is None:
                raise UserError(f"[distill.{name}] a 'pruned' student trains the prune stage's model; add a prune "
                                "section or set student_model")
            return {"student_model": pruned_dir}

        try:
            # bench times every grader on the deployment runtime, so the PyTorch timing after training is skipped
            out[f"distill.{name}"] = read_sub_recipe(
                DistillRecipe, student.recipe, "distill", where=f"[distill.{name}]",
                injected={**common, "teacher": teacher_dir, "measure_speed": False},
                overrides=dict(student.overrides), adjust=adjust, origins=_set_in(recipe, ("distill", name)),
                lines=student.lines,
                key=given_as(recipe, "distill", name, "recipe")[0])
        except UserError as e:
            problems.append(_sub_problem(e, recipe, ("distill", name)))
    if problems:  # one refusal of the run's [data], led by [data], is said once, not once per sub-recipe
        raise _refused(list(dict.fromkeys(problems)))
    return out


def _sub_problem(error: UserError, recipe: PipelineRecipe, section: tuple[str, ...]) -> str:
    """A sub-recipe's refusal as one of the run's problems: one about its recipe: key (a name no recipe has), which
    names that key as given (read_sub_recipe), is the --set's alone where a --set gave it, as is one about the file
    it names (invalid YAML), led by that --set; one about keys the run's [data] gave it is led by where [data] got
    them."""
    given = _set_in(recipe, section).get("recipe")
    if given and "recipe" in error.about:
        return SetProblem(str(error))
    if given and RECIPE_FILE_READ in error.about:
        return SetProblem(f"{given}: {error}")
    error = _in_run_words(error, recipe, section)
    return _data_problem(error, recipe, section) or _problem_of(error)


def _in_run_words(error: UserError, recipe: PipelineRecipe, section: tuple[str, ...]) -> UserError:
    """A sub-recipe's refusal worded again (a WordedError: training.worded) with the run's names of its keys: data.dev
    for the dev_data the run's [data] gave it (DATA_INTO_SUBS), teacher.train_data for one its section or recipe file
    holds, and where to change them. `error` itself where it cannot be worded again."""
    if not isinstance(error, WordedError):
        return error
    overrides = _overrides(recipe, section)

    def name(key: str) -> str:
        return f"data.{DATA_INTO_SUBS[key]}" if _from_data(recipe, key, overrides) else ".".join((*section, key))

    return error.reworded(name=name, how=lambda key: " in the run file or by --set")


@contextmanager
def worded_in_run(recipe: PipelineRecipe, section: tuple[str, ...]):
    """A sub-recipe's refusal raised as its stage runs (a WordedError: finetune.check_dev_apart, training.check_steps)
    worded with the run's names of its keys, as its checks' are when the run is read (_in_run_words)."""
    try:
        yield
    except WordedError as e:
        raise _in_run_words(e, recipe, section) from None


def _data_problem(error: UserError, recipe: PipelineRecipe, section: tuple[str, ...]) -> str | None:
    """A sub-recipe's refusal about keys (UserError.about) one or more of which the run's [data] gave it
    (DATA_INTO_SUBS), the others its section, led by where the run got each: the --sets that gave them all, else [data]
    and the section with those --sets that gave some (the run recipe's file leads, _refused); None for any other. The
    sub-recipe's check led it by the section and its --sets (recipes._checked_together), which hold no [data] key."""
    keys, overrides, origins = error.about, _overrides(recipe, section), dict(recipe.origins)
    if not any(_from_data(recipe, key, overrides) for key in keys) or not all(
            _from_data(recipe, key, overrides) or key in overrides for key in keys):
        return None
    paths = [("data", DATA_INTO_SUBS[key]) if _from_data(recipe, key, overrides) else (*section, key) for key in keys]
    sets, by_sets = list(dict.fromkeys(origins[p] for p in paths if p in origins)), all(p in origins for p in paths)
    places = " and ".join(dict.fromkeys(f"[{'.'.join(path[:-1])}]" for path in paths))
    lead = " ".join(sets) if by_sets else places + (f" with {', '.join(sets)}" if sets else "")
    text = str(led_again(error, _checked_lead(recipe, section, keys), lead))
    return SetProblem(text) if by_sets else text


def _checked_lead(recipe: PipelineRecipe, section: tuple[str, ...], keys: tuple[str, ...]) -> str:
    """The lead recipes._checked_together gave a sub-recipe's refusal of `keys` the run's section set over its file:
    the section, on the lines of the keys it holds in the run's file, with the --sets among them."""
    given, lines = _set_in(recipe, section), dict(_part(recipe, section).lines)
    sets = [given[key] for key in keys if key in given]
    return at_lines(f"[{'.'.join(section)}]", [lines.get(key) for key in keys if key not in given]) + (
        f" with {', '.join(sets)}" if sets else "")


def _from_data(recipe: PipelineRecipe, key: str, overrides: dict) -> bool:
    """Whether a sub-recipe's `key` holds what the run's [data] gave it (DATA_INTO_SUBS), its section's `overrides`
    leaving it alone."""
    return key in DATA_INTO_SUBS and key not in overrides and getattr(recipe.data, DATA_INTO_SUBS[key]) is not None


def _overrides(recipe: PipelineRecipe, section: tuple[str, ...]) -> dict:
    """The keys the run's `section` (('teacher',), ('distill', NAME)) sets over its recipe file."""
    return dict(_part(recipe, section).overrides)


def _part(recipe: PipelineRecipe, section: tuple[str, ...]):
    """The run's TeacherSection or StudentSection at `section` (('teacher',), ('distill', NAME))."""
    return recipe.teacher if section == ("teacher",) else dict(recipe.distill)[section[1]]


def scan_settings(recipe: PipelineRecipe):
    """The ScanSettings of the run's [scan] section."""
    from headcut.evaluate.scan import ScanSettings, parse_experiments, parse_methods

    s = recipe.scan
    return ScanSettings(methods=parse_methods(",".join(s.methods)), experiments=parse_experiments(s.experiments),
                        probes=s.probes, draws=s.draws, iters=s.bootstrap, seed=recipe.data.seed)


def scan_gold_of(settings) -> dict:
    """How the run reads the scan's pairs' gold: as `headcut scan` does (evaluate.scan.scan_gold), required wherever
    the scan reads it, so that the checks before any stage refuse a file without it."""
    from headcut.evaluate.scan import needs_gold, scan_gold

    return scan_gold(settings, required=needs_gold(settings))
