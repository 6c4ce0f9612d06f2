"""The distillation recipe: a frozen dataclass that recipes/distill/*.yaml mirror one to one.

Fields with `tune` metadata are the ones `--tune N` may search (optuna), with their ranges.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Literal

from headcut.distill.sizes import check_layer_map, check_recipe_student
from headcut.finetune import FinetuneRecipe
from headcut_grader.errors import UserError, quoted
from headcut_grader.ranges import Range, range_field, ranged, same_as
from headcut.synthetic import is_synthetic
from headcut.training import LOSS_WEIGHT, TrainingRecipe, check_task_keys, is_set


def tunable(default: float, low: float, high: float, *, log: bool = False, valid: Range = Range(0.0)):
    """A recipe field `--tune` may search in [low, high] (log scale for rates); `valid` is what a recipe may set
    it to."""
    return field(default=default, metadata={"range": valid, "tune": (low, high, log)})


@dataclass(frozen=True)
class DistillRecipe(TrainingRecipe):
    task: Literal["grades", "score"] = "grades"  # the teacher's task; score: a one-score reranker teacher
    teacher: str | None = None  # the unpruned teacher artifact; `pruned` students may name it in their headcut.json
    student: Literal["bottom-k", "pruned", "config"] = "bottom-k"
    student_model: str | None = None  # `pruned`: the pruned artifact to train
    keep_layers: int = ranged(3, 1, 256)  # `bottom-k`: the teacher's lower k layers
    student_layers: int = ranged(3, 1, 256)  # `config`: a smaller config ...
    student_hidden: int | None = ranged(None, 1, 65536)  # ... None: the teacher's width
    student_heads: int | None = ranged(None, 1, 1024)
    student_intermediate: int | None = ranged(None, 1, 262144)
    # teacher layer (0-based) per student layer; None: spread evenly (a pruned student: each layer's original)
    layer_map: tuple[int, ...] | None = ranged(None, 0, 255)

    unlabeled_data: str | None = None  # extra pairs without grades; the teacher labels them
    unlabeled_rows: int | None = ranged(None, 1)

    # below 0.05 the softened grades are one-hot wherever two logits differ by ~1 (KD is hard-label CE: use
    # ce_weight), and far below it logits / T overflow to a NaN loss
    temperature: float = tunable(2.0, 1.0, 8.0, log=True, valid=Range(0.05, 100.0))
    kd_weight: float = tunable(1.0, 0.0, 1.0, valid=LOSS_WEIGHT)
    ce_weight: float = tunable(0.5, 0.0, 1.0, valid=LOSS_WEIGHT)
    hidden_weight: float = tunable(0.0, 0.0, 1.0, valid=LOSS_WEIGHT)
    attention_weight: float = range_field(0.0, LOSS_WEIGHT)
    ordinal_weight: float = same_as(FinetuneRecipe, "ordinal_weight")  # finetune.grade_loss's, as objective uses it
    # task=score teaches with these in place of kd_weight / ce_weight / temperature / ordinal_weight:
    mse_weight: float = tunable(1.0, 0.0, 1.0, valid=LOSS_WEIGHT)  # MSE on the teacher's score
    margin_weight: float = tunable(0.0, 0.0, 1.0, valid=LOSS_WEIGHT)  # margin-MSE on score differences within a query
    gold_weight: float = tunable(0.0, 0.0, 1.0, valid=LOSS_WEIGHT)  # MSE on the gold score (the data's score column)
    cache_teacher: bool = True

    learning_rate: float = tunable(1e-4, 1e-5, 5e-4, log=True, valid=Range(0.0, 1.0, low_open=True))
    tune_fields: tuple[str, ...] | None = None  # what --tune searches; None: the task's (TUNED)
    measure_speed: bool = True  # teacher vs student CPU latency at batch 1 and 32 when done (a few seconds)

    @property
    def searched_fields(self) -> tuple[str, ...]:
        """The fields `--tune` searches: tune_fields, else the task's own (TUNED)."""
        return TUNED[self.task] if self.tune_fields is None else tuple(self.tune_fields)

    def input_paths(self) -> list:
        return [self.teacher, self.student_model, self.unlabeled_data, *super().input_paths()]

    def most_pairs(self) -> tuple[int, Callable] | None:
        """TrainingRecipe.most_pairs, with the unlabeled pairs trained on beside them."""
        most = super().most_pairs()
        if self.unlabeled_data is None or most is None:
            return most
        if self.unlabeled_rows is None:
            return None
        rows = self.unlabeled_rows
        return most[0] + rows, lambda name: f"{most[1](name)} + {name('unlabeled_rows')}={rows}"

    def check(self, where: str, *, named: frozenset = frozenset()) -> None:
        super().check(where, named=named)
        if self.student == "pruned" and self.student_model is None:
            raise UserError(f"{where}: student 'pruned' needs student_model (a pruned artifact); pass "
                            "--set student_model=DIR.", about=("student",))
        if self.student != "pruned" and self.teacher is None:
            raise UserError(f"{where}: no teacher; pass --set teacher=DIR (a fine-tuned grader).", about=("teacher",))
        self._check_task_keys(where, named)
        self._check_student_keys(where, named)
        if self.task == "grades" and not (self.kd_weight or self.ce_weight or self.hidden_weight
                                          or self.attention_weight):
            raise UserError(f"{where}: every loss weight is 0; set kd_weight or ce_weight above 0.",
                            about=("kd_weight", "ce_weight"))
        if self.task == "score" and not (self.mse_weight or self.margin_weight or self.gold_weight or self.hidden_weight
                                         or self.attention_weight):
            raise UserError(f"{where}: every loss weight of task=score is 0; set mse_weight, margin_weight or "
                            "gold_weight above 0.", about=("mse_weight", "margin_weight", "gold_weight"))
        if is_set(self, "layer_map", named) and self.student != "config" and not (self.hidden_weight
                                                                                  or self.attention_weight):
            raise UserError(f"{where}: key 'layer_map' matches layers for the hidden-state and attention losses, which "
                            "are off; set hidden_weight or attention_weight above 0, or remove layer_map.",
                            about=("layer_map",))
        if self.student == "config":  # the teacher's layers, where its outline is there: check_recipe_student
            check_layer_map(self.layer_map, self.student_layers, None, where=where, layers_key="student_layers")
        ranges, fields = tune_ranges(), self.searched_fields
        repeated = sorted({f for f in fields if fields.count(f) > 1})
        if repeated:
            raise UserError(f"{where}: tune_fields names {quoted(repeated[0])} twice; name each field once.",
                            about=("tune_fields",))
        bad = [f for f in fields if f not in ranges]
        if bad:
            raise UserError(f"{where}: tune_fields names {quoted(bad[0])}, which is not tunable; choose from "
                            f"{', '.join(ranges)}.", about=("tune_fields",))
        check_recipe_student(self, where)

    def _check_student_keys(self, where: str, named: frozenset) -> None:
        """A key that only another kind of student reads, or unlabeled_rows without unlabeled_data, is refused."""
        for student, keys in STUDENT_KEYS.items():
            for key in keys:
                if student != self.student and is_set(self, key, named):
                    raise UserError(f"{where}: key '{key}' applies to student={student} only, and this recipe's "
                                    f"student is {self.student}; remove it (or set student={student}).", about=(key,))
        if self.unlabeled_data is not None and is_synthetic(self.unlabeled_data):
            raise UserError(f"{where}: key 'unlabeled_data' takes a file of pairs without grades (query logs), and "
                            "synthetic pairs are graded; train on them with train_data, or pass a file.",
                            about=("unlabeled_data",))
        if self.unlabeled_rows is not None and self.unlabeled_data is None:
            raise UserError(f"{where}: key 'unlabeled_rows' is set but unlabeled_data is not; pass "
                            "--set unlabeled_data=FILE, or remove unlabeled_rows.",
                            about=("unlabeled_rows",))

    def _check_task_keys(self, where: str, named: frozenset) -> None:
        """The other task's keys (training.check_task_keys), and tune_fields that name them."""
        check_task_keys(self, TASK_KEYS, where, verb="distils", named=named)
        other = "score" if self.task == "grades" else "grades"
        bad = [f for f in self.searched_fields if f in TASK_KEYS[other]]
        if bad:
            raise UserError(f"{where}: tune_fields names {quoted(bad[0])}, which task={self.task} does not use; list "
                            f"fields of its losses, e.g. --set tune_fields=[{', '.join(TUNED[self.task])}].",
                            about=("tune_fields",))


# The recipe keys only one kind of student reads (headcut.distill.students).
STUDENT_KEYS = {"bottom-k": ("keep_layers",), "pruned": ("student_model",),
                "config": ("student_layers", "student_hidden", "student_heads", "student_intermediate")}
# The recipe keys only one task's losses read (headcut.distill.objective.LOSSES), and what --tune searches there.
TASK_KEYS = {"grades": ("grades", "temperature", "kd_weight", "ce_weight", "ordinal_weight"),
             "score": ("mse_weight", "margin_weight", "gold_weight")}
TUNED = {"grades": ("temperature", "kd_weight", "learning_rate"),
         "score": ("mse_weight", "margin_weight", "learning_rate")}


def tune_ranges() -> dict[str, tuple[float, float, bool]]:
    """{field: (low, high, log)} for every field marked tunable."""
    return {f.name: f.metadata["tune"] for f in fields(DistillRecipe) if "tune" in f.metadata}
