"""Students a recipe can ask for, each with the teacher it learns from and a student->teacher layer map.

- `bottom-k`: the teacher's lower k layers (lower layers carry the features graders use).
- `pruned`: a headcut pruned artifact, trained against the unpruned teacher it was cut from.
- `config`: a smaller config (layers, width, heads, FFN) whose weights start as slices of mapped teacher layers.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass

import torch

from headcut.arch import ARCHITECTURES, attention_implementation, encoder_layers, keep_layers, layer_ids
from headcut.distill.losses import even_layer_map
from headcut.distill.recipe import DistillRecipe
from headcut.distill.sizes import (check_config_student, check_cut_from, check_heads_divide, check_keep_layers,
                                   check_layer_map, check_smaller, recorded_teacher)
from headcut_grader.errors import UserError
from headcut.models import SHAPE_KEY, LoadedModel, load_model
from headcut.model_arguments import check_loaded, check_model


@dataclass
class Student:
    loaded: LoadedModel  # the student model with the teacher's tokenizer, grades and max_length
    layer_map: list[int]  # teacher layer matched to each student layer (hidden/attention losses)
    kind: str


def teacher_source(recipe: DistillRecipe) -> str:
    """The teacher named in the recipe, else (for `pruned`) the one the pruned artifact's headcut.json names."""
    if recipe.teacher is not None:
        return recipe.teacher
    record = recorded_teacher(load_model_meta(recipe.student_model, flag="student_model"))
    if record is None:
        raise UserError(f"{recipe.student_model}/headcut.json names no teacher; pass --set teacher=DIR (the unpruned "
                        "grader).")
    return record["path"]


def check_recorded_teacher(recipe: DistillRecipe, teacher: LoadedModel) -> None:
    """A teacher found through a pruned artifact's record is the model it was cut from: the folder at the recorded
    path may have been replaced since (or, for a path recorded relative, be another folder seen from here)."""
    if recipe.teacher is not None:
        return
    record = recorded_teacher(load_model_meta(recipe.student_model, flag="student_model"))
    check_cut_from(recipe.student_model, record, teacher.path, teacher.weights_hash)


def load_model_meta(source: str, *, flag: str = "load_model_meta source") -> dict:
    from headcut.models import META_FILE, read_json_file, resolve_source

    path = resolve_source(source, flag=flag) / META_FILE
    return read_json_file(path) if path.exists() else {}


def build_student(recipe: DistillRecipe, teacher: LoadedModel, *, attn_implementation: str = "sdpa") -> Student:
    check_loaded(teacher, "build_student teacher")
    teacher_layers = len(encoder_layers(teacher.model))
    meta = {"grades": list(teacher.grades), "max_length": recipe.max_length}
    if teacher.task == "score":  # the student reads its one output as its teacher does
        meta.update(task="score", activation=teacher.activation)
    if recipe.student == "pruned":
        loaded = load_model(recipe.student_model, attn_implementation=attn_implementation, flag="student_model")
        _check_vocab(loaded.model, teacher.model, recipe.student_model)
        check_smaller(loaded, teacher)
        if loaded.task != teacher.task:
            raise UserError(f"student_model {recipe.student_model} is a {_task_words(loaded.task)} but the teacher "
                            f"{teacher.path} is a {_task_words(teacher.task)}; distil a pruned model from the teacher "
                            "it was cut from.")
        layer_map = list(recipe.layer_map or layer_ids(loaded.model))  # each kept layer is still its original
        check_layer_map(layer_map, len(encoder_layers(loaded.model)), teacher_layers)
        loaded.meta = {**loaded.meta, **meta}
        return Student(loaded, layer_map, "pruned")
    if recipe.student == "bottom-k":
        check_keep_layers(recipe.keep_layers, teacher_layers)
        layer_map = list(recipe.layer_map or even_layer_map(recipe.keep_layers, teacher_layers))
        check_layer_map(layer_map, recipe.keep_layers, teacher_layers)
        model = copy.deepcopy(teacher.model)
        keep_layers(model, list(range(recipe.keep_layers)))
        return Student(LoadedModel(model, teacher.tokenizer, meta), layer_map, "bottom-k")
    check_config_student(recipe, teacher.model.config, teacher_layers)
    layer_map = list(recipe.layer_map or even_layer_map(recipe.student_layers, teacher_layers))
    check_layer_map(layer_map, recipe.student_layers, teacher_layers)
    model = config_student(teacher.model, layers=recipe.student_layers, hidden=recipe.student_hidden,
                           heads=recipe.student_heads, intermediate=recipe.student_intermediate, layer_map=layer_map,
                           attn_implementation=attn_implementation)
    return Student(LoadedModel(model, teacher.tokenizer, meta), layer_map, "config")


def config_student(teacher, *, layers: int, hidden: int | None, heads: int | None, intermediate: int | None,
                   layer_map: list[int], attn_implementation: str = "sdpa"):
    """A smaller model of the teacher's type. Each weight starts as the leading slice of the teacher's
    (student layer i from teacher layer layer_map[i]): exact copies where sizes agree, a truncation otherwise."""
    from transformers import AutoModelForSequenceClassification

    check_model(teacher, "config_student teacher")
    check_heads_divide(hidden, heads, teacher.config)
    config = copy.deepcopy(teacher.config)
    if hasattr(config, SHAPE_KEY):
        delattr(config, SHAPE_KEY)  # a pruned teacher's per-layer shape does not describe the student
    config.num_hidden_layers = layers
    for name in ARCHITECTURES[config.model_type].layer_lists:  # per-layer settings follow the layer map
        setattr(config, name, [getattr(config, name)[t] for t in layer_map])
    if hidden is not None:
        config.hidden_size = hidden
        if getattr(config, "embedding_size", None) is not None:
            config.embedding_size = hidden
    if heads is not None:
        config.num_attention_heads = heads
    if intermediate is not None:
        setattr(config, ARCHITECTURES[config.model_type].intermediate, intermediate)
    student = AutoModelForSequenceClassification.from_config(
        config, attn_implementation=attention_implementation(config, attn_implementation))
    source = teacher.state_dict()
    with torch.no_grad():
        for name, param in student.state_dict().items():
            match = re.search(r"\.(layers?)\.(\d+)\.", name)  # ModernBERT's list is `layers`
            tname = name if match is None else name.replace(
                match.group(0), f".{match.group(1)}.{layer_map[int(match.group(2))]}.", 1)
            if tname not in source:
                continue  # buffers the teacher lacks keep their fresh values
            t = source[tname]
            if t.dim() != param.dim():
                continue
            param.copy_(t[tuple(slice(0, n) for n in param.shape)])
    return student.eval()


def _task_words(task: str) -> str:
    return "one-score model (task score)" if task == "score" else "grades model (task grades)"


def _check_vocab(student, teacher, where: str) -> None:
    s, t = student.get_input_embeddings().num_embeddings, teacher.get_input_embeddings().num_embeddings
    if s != t:
        raise UserError(f"{where} has a {s}-token vocabulary but the teacher has {t}; distil from the teacher it was "
                        "cut from.")
