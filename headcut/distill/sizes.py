"""What a student recipe asks of its teacher: a bottom-k student keeps fewer layers than the teacher has, a config
student is no larger than it in any size, a pruned student is smaller than it, and no student reads more tokens than
the models have positions for. Checked on the models' outlines when a recipe is read (check_recipe_student), by
build_student on the loaded models, and by `headcut run` on its teacher before any stage."""
from __future__ import annotations

from pathlib import Path

from headcut.arch import ARCHITECTURES, encoder_layers, heads_per_layer, neurons_per_layer
from headcut.batching import check_max_length
from headcut_grader.errors import UserError, fix_verb, lead_of, setting


# Keys under which a pruned artifact's headcut.json may name the model it was cut from.
TEACHER_KEYS = ("teacher", "source_model", "parent", "source")


def check_recipe_student(recipe, where: str) -> None:
    """What build_student checks against the teacher, checked when the recipe is read, on the models' outlines
    (their configs and shapes, no weights), so a refusal names the recipe file and the --set values (`where`) and
    comes before any model loads; a model not there yet (a run's teacher) is checked by build_student. A pruned
    student's teacher may be the one its headcut.json names (what distill loads where the recipe names none)."""
    from headcut.models import outline_if_present  # it reads models: imported when a recipe is checked

    teacher = outline_if_present(recipe.teacher, "teacher")
    student = outline_if_present(recipe.student_model, "student_model") if recipe.student == "pruned" else None
    if teacher is None and student is not None and recipe.teacher is None:
        teacher = recorded_teacher_outline(recipe.student_model, student.meta, where=where)
    for key, model in (("teacher", teacher), ("student_model", student)):
        if model is not None:
            check_max_length(model.model, recipe.max_length, flag="max_length", where=where, whose=f"the {key}'s")
    if teacher is None:
        return
    check_teacher_task(teacher, recipe, where=where)
    layers = len(encoder_layers(teacher.model))
    if recipe.student == "bottom-k":
        check_keep_layers(recipe.keep_layers, layers, where=where)
        check_layer_map(recipe.layer_map, recipe.keep_layers, layers, where=where)
    elif recipe.student == "config":
        check_config_student(recipe, teacher.model.config, layers, where=where)
    elif student is not None:
        check_smaller(student, teacher, where=where)
        check_layer_map(recipe.layer_map, len(encoder_layers(student.model)), layers, where=where)


def check_teacher_task(teacher, recipe, *, where: str = "", section: str = "") -> None:
    """The recipe distils the teacher's task, and a grades teacher's very grades (its headcut.json's record):
    one sentence naming the recipe (`where`) and the key to change; `section`: where a run holds the recipe's keys
    ('distill.NAME.'), which the keys are named with."""
    lead, path = lead_of(where), teacher.path
    if teacher.task != recipe.task and teacher.task == "score":
        raise UserError(f"{lead}the teacher {path} is a one-score reranker (task score), but the recipe distils "
                        f"task=grades; pass --set {section}task=score (recipe distill/minilm_score_bottom3_cpu), or a "
                        "grades teacher.")
    if teacher.task != recipe.task:
        raise UserError(f"{lead}the teacher {path} grades (task grades), but the recipe distils task=score; pass "
                        f"--set {section}task=grades, or a one-score teacher.")
    if recipe.task == "grades" and tuple(teacher.grades) != tuple(recipe.grades):
        grades = ",".join(map(str, teacher.grades))
        raise UserError(f"{lead}key '{section}grades' is {list(recipe.grades)}, but the teacher {path} grades "
                        f"{list(teacher.grades)}; set grades to the teacher's (--set {section}grades=[{grades}]), or "
                        "pass a teacher of these grades.")


def check_layer_map(layer_map, student_layers: int, teacher_layers: int | None, *, key: str = "layer_map",
                    where: str = "", layers_key: str | None = None) -> None:
    """One teacher layer, which the teacher has, per student layer (None: the even map, which always fits; a
    `teacher_layers` of None, a teacher not known yet: the count alone). `key`: how the user set it (a run names its
    student's section); `where`: the recipe (file and --set values) it was read from; `layers_key`: the recipe key
    that counts the student's layers (student_layers), which a refusal of the count is about too (UserError.about)."""
    if layer_map is None:
        return
    layer_map = list(layer_map)
    if len(layer_map) != student_layers:
        raise UserError(f"{lead_of(where)}{setting(key, layer_map)} has {len(layer_map)} entries for {student_layers} "
                        "student layers; give one teacher layer per student layer.",
                        about=("layer_map", *([layers_key] if layers_key else [])))
    if teacher_layers is None:
        return
    if max(layer_map) >= teacher_layers or min(layer_map) < 0:
        raise UserError(f"{lead_of(where)}{setting(key, layer_map)} names a layer the {teacher_layers}-layer teacher "
                        f"lacks; use 0..{teacher_layers - 1}.")


def recorded_teacher(meta: dict) -> dict | None:
    """{"path", "weights_hash" (where recorded)} of the model a pruned artifact's headcut.json says it was cut from."""
    for key in TEACHER_KEYS:
        value = meta.get(key)
        record = value if isinstance(value, dict) else {"path": value}
        if isinstance(record.get("path"), str) and record["path"]:
            return record
    return None


def check_cut_from(student_model: str, record: dict, path: str, weights_hash: str, *, where: str = "") -> None:
    """The teacher at `path` (of `weights_hash`) holds the weights the student's `record` says it was cut from,
    where the record has their hash; `where`: the recipe it was read from."""
    recorded = record.get("weights_hash")
    if recorded and recorded != weights_hash:
        raise UserError(f"{lead_of(where)}student_model {student_model} was cut from a model of weights "
                        f"{recorded}, but {path}, the teacher its headcut.json names, holds weights {weights_hash}; "
                        "pass --set teacher=DIR naming the model it was cut from.")


def recorded_teacher_outline(student_model: str, meta: dict, *, where: str):
    """The teacher a pruned student's headcut.json (`meta`) names, outlined as distill will load it, once its weights
    are the ones the student was cut from (else the checks against it would judge another model); None where
    none is named or it is not there."""
    from headcut.models import outline_if_present
    from headcut.weight_files import weights_file, weights_hash

    record = recorded_teacher(meta)
    teacher = outline_if_present(record["path"], "teacher") if record else None
    if teacher is None or not record.get("weights_hash"):
        return teacher
    weights = weights_file(teacher.path)
    if weights is None:  # load_model names what is missing
        return None
    check_cut_from(student_model, record, teacher.path, weights_hash(weights), where=where)
    return teacher


def check_keep_layers(keep_layers: int, teacher_layers: int, *, key: str = "keep_layers", where: str = "") -> None:
    """A bottom-k student keeps fewer layers than its teacher has; `key`: how the user set it (a run names its
    student's section); `where`: the recipe (file and --set values) it was read from."""
    if keep_layers < teacher_layers:
        return
    than = "is more than" if keep_layers > teacher_layers else "keeps all of"
    fix = (_at_most(key, teacher_layers - 1) if teacher_layers > 1 else
           "a 1-layer teacher has no smaller bottom-k student: use student=config or a deeper teacher")
    raise UserError(f"{lead_of(where)}{setting(key, keep_layers)} {than} the teacher's {teacher_layers} layers, and a "
                    f"bottom-k student keeps fewer; {fix}.")


def _at_most(key: str, most: int) -> str:
    """The fix of a value over `most`: 'set KEY to N or less', or where a command line gave it (a flag, a --set), what
    to pass (errors.fix_verb)."""
    return f"pass {setting(key, most)} or less" if fix_verb(key) == "pass" else f"set {key} to {most} or less"


def check_config_student(recipe, teacher_config, teacher_layers: int, *, where: str = "", named=None) -> None:
    """A config student is a smaller model of its teacher: none of its sizes above the teacher's. Its weights start
    as slices of the teacher's, and a larger student (the ranges allow 65,536 wide) would exhaust memory before
    its first step. `where`: the recipe it was read from; `named(key)` -> (name, where) in its place where each
    key may come from elsewhere (a run's student: its --set, the run recipe or the student's recipe)."""
    limits = {"student_layers": teacher_layers, "student_hidden": teacher_config.hidden_size,
              "student_heads": teacher_config.num_attention_heads,
              "student_intermediate": getattr(teacher_config, ARCHITECTURES[teacher_config.model_type].intermediate)}
    def name_of(key):
        return named(key) if named else (key, where)

    for key, most in limits.items():
        value = getattr(recipe, key)
        if value is not None and value > most:
            name, place = name_of(key)
            raise UserError(f"{lead_of(place)}{setting(name, value)} is larger than the teacher's {most}; a config "
                            f"student is a smaller model of its teacher: {_at_most(name, most)}.")
    check_heads_divide(recipe.student_hidden, recipe.student_heads, teacher_config, name_of)
    name, place = name_of("layer_map")
    check_layer_map(recipe.layer_map, recipe.student_layers, teacher_layers, key=name, where=place)


def check_heads_divide(hidden: int | None, heads: int | None, teacher_config, name_of=None) -> None:
    """A config student's width (`hidden`) splits evenly among its `heads`; an unset size (None) is the teacher's, and
    is said to be. `name_of(key)` -> (name, where) of student_hidden and student_heads (None: the keys, nowhere)."""
    name_of = name_of or (lambda key: (key, ""))
    sizes = {"student_hidden": (hidden, teacher_config.hidden_size, "width"),
             "student_heads": (heads, teacher_config.num_attention_heads, "heads")}
    (hidden, *_), (heads, *_) = [(value or default,) for value, default, _ in sizes.values()]
    if hidden % heads == 0:
        return
    said, place = [], ""
    for key, (value, default, what) in sizes.items():
        if value is None:
            said.append(f"the teacher's {what} {default} ({key} unset)")
        else:
            name, where = name_of(key)
            place = place or where  # a file that gives one size leads, where a --set gives the other
            said.append(setting(name, value))
    raise UserError(f"{lead_of(place)}{said[0]} is not divisible by {said[1]}, and each head takes an equal share of "
                    "the width; pick student_hidden and student_heads that divide.")


def check_smaller(student, teacher, *, where: str = "") -> None:
    """A pruned student is smaller than its teacher: the teacher's own folder, or a model of its very shape (its
    layers, heads and FFN neurons per layer, and width), would be distilled into a copy of itself, gaining nothing."""
    if Path(student.path).resolve() == Path(teacher.path).resolve():
        what = "is the teacher's own folder"
    elif _shape(student.model) == _shape(teacher.model):
        what = f"has the same layers, heads and FFN neurons as the teacher {teacher.path}"
    else:
        return
    raise UserError(f"{lead_of(where)}student_model {student.path} {what}, so the student would be no smaller than its "
                    "teacher; pass a model pruned from the teacher (headcut prune), or use student=bottom-k or config.")


def _shape(model) -> tuple:
    return model.config.hidden_size, heads_per_layer(model), neurons_per_layer(model)
