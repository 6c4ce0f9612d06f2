"""What a student recipe asks of its teacher: no student reads more tokens than the models have positions for.
Checked on the models' outlines when a recipe is read (check_recipe_student), and by `headcut run` on its teacher
before any stage."""
from __future__ import annotations

from headcut.batching import check_max_length


def check_recipe_student(recipe, where: str) -> None:
    """What distill checks against the teacher, checked when the recipe is read, on the models' outlines (their
    configs and shapes, no weights), so a refusal names the recipe file and the --set values (`where`) and comes
    before any model loads; a model not there yet (a run's teacher) is checked when it loads."""
    from headcut.finetune import outline_if_present  # it reads models: imported when a recipe is checked

    teacher = outline_if_present(recipe.teacher, "teacher")
    student = outline_if_present(recipe.student_model, "student_model") if recipe.student == "pruned" else None
    for key, model in (("teacher", teacher), ("student_model", student)):
        if model is not None:
            check_max_length(model.model, recipe.max_length, flag="max_length", where=where, whose=f"the {key}'s")
