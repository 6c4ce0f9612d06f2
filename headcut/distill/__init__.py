"""Distillation: students (bottom-k, pruned, smaller config) trained against their teacher from recipes."""
from headcut.distill.cache import teacher_logits
from headcut.distill.losses import attention_kl, even_layer_map, hidden_mse, kd_loss, margin_mse, score_mse
from headcut.distill.recipe import DistillRecipe, tune_ranges
from headcut.distill.run import DistillResult, distill
from headcut.distill.students import Student, build_student, config_student, teacher_source
from headcut.distill.tune import read_tune

__all__ = [
    "teacher_logits", "attention_kl", "even_layer_map", "hidden_mse", "kd_loss", "margin_mse", "score_mse",
    "DistillRecipe", "tune_ranges",
    "distill", "DistillResult", "Student", "build_student", "config_student", "teacher_source",
    "read_tune",
]
