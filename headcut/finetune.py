"""Make a grader (the teacher) from a base model and graded pairs, driven by a recipe."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from headcut.batching import encode
from headcut.data_spec import read_spec
from headcut_grader.data import FILE_KEYS, Pairs, file_keys
from headcut.synthetic import is_synthetic
from headcut_grader.errors import UserError
from headcut.evaluate.predict import predict_logits
from headcut.evaluate.tasks import summary
from headcut_grader.files import check_out_dir
from headcut.models import load_model, save_model
from headcut_grader.ranges import check_ranges, ranged
from headcut.recipes import to_dict
from headcut.run_folder import RunFolder
from headcut.splits import split_by_query
from headcut.training import GRADES_FIX, TrainingRecipe, file_options, is_finished, settings_from, train


@dataclass(frozen=True)
class FinetuneRecipe(TrainingRecipe):
    model: str = "minilm-l6"
    task: Literal["grades", "score"] = "grades"  # score: one output trained with MSE on the data's score column
    class_weighting: Literal["none", "sqrt", "balanced"] = "none"
    ordinal_weight: float = ranged(0.0, 0.0, 100.0)
    label_smoothing: float = ranged(0.0, 0.0, 1.0, high_open=True)

    def input_paths(self) -> list:
        return [self.model, *super().input_paths()]

    def check(self, where: str) -> None:
        if self.train_data is None:
            raise UserError(f"{where}: no train_data; pass --train FILE (or --set train_data=FILE).")
        super().check(where)
        if self.task == "score":
            self._check_score(where)

    def _check_score(self, where: str) -> None:
        """Keys that only mean something for a softmax over grades are refused for a one-score model."""
        if self.select_metric in ("accuracy", "macro_f1"):
            raise UserError(f"{where}: select_metric={self.select_metric} needs grades, and task=score has one "
                            "output; use spearman or loss.")
        for key, default in (("class_weighting", "none"), ("ordinal_weight", 0.0), ("label_smoothing", 0.0)):
            if getattr(self, key) != default:
                raise UserError(f"{where}: key '{key}' applies to task=grades only; remove it from the score recipe.")


def _read(recipe: TrainingRecipe, spec: str, rows: int | None, seed: int) -> Pairs:
    return read_spec(spec, rows=rows, seed=seed, task=getattr(recipe, "task", "grades"), **file_options(recipe),
                     grades_fix=GRADES_FIX)


def load_data(recipe: TrainingRecipe) -> tuple[Pairs, Pairs]:
    train_pairs = _read(recipe, recipe.train_data, recipe.train_rows, recipe.seed)
    if recipe.dev_data is None:
        train_pairs, dev = split_by_query(train_pairs, 1 - recipe.dev_fraction, seed=recipe.seed)
    else:
        dev = _read(recipe, recipe.dev_data, recipe.dev_rows, recipe.seed + 1)
    return train_pairs, dev.sample(recipe.dev_rows, seed=recipe.seed)


def selection_pairs(recipe: TrainingRecipe) -> Pairs | None:
    """The pairs of a file that a training recipe picks its best checkpoint on (load_data's dev pairs);
    None when they are a synthetic draw or a query split of the training pairs."""
    if recipe.dev_data is None or is_synthetic(recipe.dev_data):
        return None
    return _read(recipe, recipe.dev_data, recipe.dev_rows, recipe.seed + 1).sample(recipe.dev_rows, seed=recipe.seed)


def recorded_selection_pairs(meta: dict) -> tuple[str | None, Pairs | None]:
    """(dev spec, selection pairs) of an artifact finetune wrote, from the recipe its headcut.json records: the
    pairs its best checkpoint was chosen on (selection_pairs), so a caller need not rebuild a recipe for it."""
    recorded = meta.get("recipe") if isinstance(meta, dict) else None
    if not isinstance(recorded, dict) or not recorded.get("dev_data"):
        return None, None
    keys = ("dev_data", "dev_rows", "seed", "task", *FILE_KEYS)
    recipe = replace(FinetuneRecipe(), **{k: recorded[k] for k in keys if k in recorded},
                     **({"grades": tuple(recorded["grades"])} if recorded.get("grades") else {}))
    return recipe.dev_data, selection_pairs(recipe)


def dev_record(recipe: TrainingRecipe, dev: Pairs) -> dict:
    """What an artifact records of its dev pairs: a resolved path only for a file, none for a synthetic
    draw ('synthetic:SEED') or a split held out of the training pairs."""
    path = None if recipe.dev_data is None or is_synthetic(recipe.dev_data) else str(Path(recipe.dev_data).resolve())
    return {**dev.provenance(), "path": path, **file_keys(recipe)}


def class_weights(labels: np.ndarray, num_labels: int, how: str) -> torch.Tensor | None:
    if how == "none":
        return None
    counts = np.bincount(labels, minlength=num_labels).astype(np.float64) + 1
    w = (counts.sum() / counts) ** (0.5 if how == "sqrt" else 1.0)
    return torch.tensor(w / (w * counts / counts.sum()).sum(), dtype=torch.float32)  # mean weight 1 over data


def grade_loss(logits, labels, *, weights=None, ordinal_weight=0.0, label_smoothing=0.0):
    """Cross-entropy, plus `ordinal_weight` x squared error of the expected label (rank-aware)."""
    loss = F.cross_entropy(logits, labels, weight=None if weights is None else weights.to(logits.device),
                           label_smoothing=label_smoothing)
    if ordinal_weight:
        values = torch.arange(logits.shape[1], device=logits.device, dtype=logits.dtype)
        expected = logits.softmax(-1) @ values
        loss = loss + ordinal_weight * ((expected - labels.to(logits.dtype)) ** 2).mean()
    return loss


def score_loss(logits, scores):
    """Mean squared error of a one-score model's output `(batch, 1)` against gold scores `(batch,)`."""
    return F.mse_loss(logits[:, 0], scores.to(logits.dtype))


def recipe_hash(recipe) -> str:
    return hashlib.sha256(json.dumps(to_dict(recipe), sort_keys=True).encode()).hexdigest()[:12]


def _loss_fn(recipe: FinetuneRecipe, train_pairs: Pairs):
    """loss(model, batch, rows) of the recipe's task: grade_loss, or score_loss on the gold scores."""
    if recipe.task == "score":
        scores = torch.tensor(train_pairs.score_array(), dtype=torch.float32)
        return lambda m, batch, rows: score_loss(m(**batch).logits, scores[rows].to(m.device))
    labels = torch.tensor(train_pairs.label_array())
    weights = class_weights(train_pairs.label_array(), len(recipe.grades), recipe.class_weighting)

    def loss_fn(m, batch, rows):
        logits = m(**batch).logits
        return grade_loss(logits, labels[rows].to(logits.device), weights=weights,
                          ordinal_weight=recipe.ordinal_weight, label_smoothing=recipe.label_smoothing)

    return loss_fn


def finetune(recipe: FinetuneRecipe, out: str | Path, *, overwrite: bool = False, progress=None,
             stop_after_steps: int | None = None) -> dict:
    """Train, keep the best dev checkpoint, write it to `out` as an artifact. Resumable: rerun the same
    call after an interruption and it continues from `out`.partial/checkpoint."""
    out = Path(out)
    check_ranges(recipe, "recipe")  # also when built in Python rather than read by load_recipe
    check_out_dir(out, overwrite=overwrite, inputs=recipe.input_paths())
    train_pairs, dev = load_data(recipe)
    score = recipe.task == "score"
    loaded = load_model(recipe.model, num_labels=1 if score else len(recipe.grades), seed=recipe.seed, flag="model")
    model, tokenizer = loaded.model, loaded.tokenizer
    encoded = encode(tokenizer, train_pairs, max_length=recipe.max_length, model=model)
    dev_encoded = encode(tokenizer, dev, max_length=recipe.max_length, model=model)
    # opened only once data and model load, so a bad file or model leaves no half-made run folder behind
    folder = RunFolder.open(out, recipe_hash(recipe), {"recipe": to_dict(recipe)}, overwrite=overwrite)
    loss_fn = _loss_fn(recipe, train_pairs)

    def evaluate_fn(m):
        logits = predict_logits(m, tokenizer, dev, encoded=dev_encoded, batch_size=128)
        return summary(logits, dev, task=recipe.task)

    meta = {
        "kind": "finetune",
        "task": recipe.task,
        **({"activation": "identity"} if score else {}),
        "grades": list(recipe.grades),
        "max_length": recipe.max_length,
        "base_model": str(recipe.model),
        "recipe": to_dict(recipe),
        "train_data": train_pairs.provenance(),
        "dev_data": dev_record(recipe, dev),
    }

    def save_best(m, metrics):
        loaded.model = m
        save_model(loaded, folder.best, meta={**meta, "dev_metrics": metrics}, overwrite=True)

    settings = settings_from(recipe)
    state = train(model, encoded, settings=settings, loss_fn=loss_fn, evaluate_fn=evaluate_fn, work_dir=folder.path,
                  save_best=save_best, progress=progress, stop_after_steps=stop_after_steps)
    result = {"state": state.__dict__, "finished": is_finished(state, len(encoded), settings), "work_dir": str(folder.path),
              "examples_per_second": state.examples / max(state.train_seconds, 1e-9),
              "cpu_per_wall": state.cpu_seconds / max(state.train_seconds, 1e-9)}
    if result["finished"]:
        training = {k: result[k] for k in ("examples_per_second", "cpu_per_wall")} | {
            "steps": state.step, "best_step": state.best_step, "history": state.history,
            "train_seconds": state.train_seconds}
        best_meta = folder.publish({"training": training})
        result["out"] = str(out)
        result["dev_metrics"] = best_meta["dev_metrics"]
    return result
