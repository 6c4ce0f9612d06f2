"""Distil a student from its teacher as a recipe says, on the shared resumable accelerate loop.

Rerunning the same call after an interruption resumes from `out`.partial (checkpoints, the cached
teacher logits, the best student so far); the finished artifact carries the recipe, the teacher's
weights hash and teacher / before / after dev metrics with paired-bootstrap CIs against the teacher.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from headcut.arch import count_parameters, heads_per_layer
from headcut.batching import encode
from headcut_grader.data import Pairs, read_pairs
from headcut.distill.cache import teacher_logits
from headcut.distill.losses import attention_kl, hidden_mse, kd_loss, per_layer
from headcut.distill.recipe import DistillRecipe
from headcut.distill.students import build_student, teacher_source
from headcut_grader.errors import UserError
from headcut.evaluate.ablation import process_state
from headcut.evaluate.metrics import paired_bootstrap, summarize
from headcut.evaluate.predict import predict_logits
from headcut_grader.files import check_out_dir
from headcut.finetune import dev_record, grade_loss, load_data, recipe_hash
from headcut.models import LoadedModel, check_stage, load_model, save_model
from headcut_grader.ranges import check_ranges
from headcut.prune.measure import speed_summary
from headcut.recipes import to_dict
from headcut.run_folder import RunFolder
from headcut.training import GRADES_FIX, is_finished, settings_from, train

UNLABELED = -1  # label of a pair without a gold grade: the teacher's grade is used instead


@dataclass
class DistillResult:
    """What a distillation run did; `out`, `metrics` and `speed` are set once it finished and published."""

    finished: bool  # False: interrupted (stop_after_steps); rerun the same call to resume from work_dir
    work_dir: str
    training: dict  # steps, best step, history, throughput, teacher-logit cache
    out: str | None = None
    metrics: dict | None = None  # teacher / before / after on dev, after - teacher with paired CIs
    speed: dict | None = None  # teacher vs student parameters, FLOPs and latency (recipe.measure_speed)


def with_unlabeled(recipe: DistillRecipe, train_pairs: Pairs) -> tuple[Pairs, np.ndarray]:
    """Training pairs plus the recipe's unlabeled pairs, and their labels (UNLABELED for the extra ones)."""
    labels = train_pairs.label_array()
    if recipe.unlabeled_data is None:
        return train_pairs, labels
    extra = read_pairs(recipe.unlabeled_data, preset=recipe.preset, grades=recipe.grades, grades_fix=GRADES_FIX,
                       require_labels=False)
    extra = extra.sample(recipe.unlabeled_rows, seed=recipe.seed)
    merged = Pairs(train_pairs.queries + extra.queries, train_pairs.titles + extra.titles, None, recipe.grades,
                   f"{train_pairs.source} + {extra.source} (unlabeled)")
    return merged, np.concatenate([labels, np.full(len(extra), UNLABELED)])


def _stage(progress, name: str, total: int):
    """A pair-count callback that reports a preparatory stage to the training `progress` callback."""
    if progress is None:
        return None
    done = 0

    def update(n: int) -> None:
        nonlocal done
        done += n
        progress({"stage": name, "step": done, "total": total})

    return update


def distill(recipe: DistillRecipe, out: str | Path, *, overwrite: bool = False, progress=None,
            stop_after_steps: int | None = None, cache_dir: str | Path | None = None) -> DistillResult:
    """Train the recipe's student, keep the best dev checkpoint, write it to `out` as an artifact.

    `cache_dir` holds teacher logits (default: inside `out`.partial); tuning trials share one.
    `stop_after_steps` stops early, as a kill would (tests use it to check resuming).
    """
    out = Path(out)
    check_ranges(recipe, "recipe")  # also when built in Python rather than read by load_recipe
    check_out_dir(out, overwrite=overwrite, inputs=recipe.input_paths())
    attn = "eager" if recipe.attention_weight else "sdpa"  # attention maps need eager attention
    teacher = load_model(teacher_source(recipe), attn_implementation=attn)
    check_stage(teacher, "distill")
    teacher.model.to(process_state().device)  # this process's accelerator (CPU, or its GPU under accelerate launch)
    if tuple(teacher.grades) != tuple(recipe.grades):
        raise UserError(f"the teacher grades {list(teacher.grades)}, the recipe says grades={list(recipe.grades)}; "
                        "make them agree (--set grades=[...]).")
    student = build_student(recipe, teacher, attn_implementation=attn)
    model, tokenizer = student.loaded.model, student.loaded.tokenizer
    train_pairs, dev = load_data(recipe)
    pairs, labels = with_unlabeled(recipe, train_pairs)
    encoded = encode(tokenizer, pairs, max_length=recipe.max_length, model=model)
    dev_encoded = encode(tokenizer, dev, max_length=recipe.max_length, model=model)
    # opened only once models and data load, so a mistyped teacher or a bad file leaves no half-made run folder
    folder = RunFolder.open(out, recipe_hash(recipe), {"recipe": to_dict(recipe)}, overwrite=overwrite)
    dev_labels, dev_groups = dev.label_array(), dev.query_groups()
    cache = Path(cache_dir) if cache_dir else folder.path / "teacher"

    started = time.perf_counter()
    teacher_dev, _ = teacher_logits(teacher, dev, encoded=dev_encoded, max_length=recipe.max_length, cache_dir=cache,
                                    progress=_stage(progress, "teacher logits (dev)", len(dev)))
    needs_targets = recipe.kd_weight > 0 or recipe.unlabeled_data is not None
    cached, hit = None, False
    if needs_targets and recipe.cache_teacher:
        cached, hit = teacher_logits(teacher, pairs, encoded=encoded, max_length=recipe.max_length, cache_dir=cache,
                                     progress=_stage(progress, "teacher logits (train, cached)", len(pairs)))
    teacher_seconds = time.perf_counter() - started
    online = recipe.hidden_weight > 0 or recipe.attention_weight > 0 or (needs_targets and cached is None)

    def evaluate_fn(m):
        logits = predict_logits(m, tokenizer, dev, encoded=dev_encoded, batch_size=128)
        return summarize(logits, dev_labels, recipe.grades, dev_groups)

    before = folder.remember("before.json", lambda: evaluate_fn(model))  # the untrained student, once per run

    projections = _projections(model, teacher.model, len(student.layer_map), seed=recipe.seed) \
        if recipe.hidden_weight > 0 else None
    gold = torch.as_tensor(labels)
    student_heads, teacher_heads = heads_per_layer(model), heads_per_layer(teacher.model)

    def loss_fn(m, batch, rows):
        device = batch["input_ids"].device
        result = m(**batch, output_hidden_states=recipe.hidden_weight > 0, output_attentions=recipe.attention_weight > 0)
        target = None
        if online:
            with torch.no_grad():
                target = teacher.model.to(device)(**batch, output_hidden_states=recipe.hidden_weight > 0,
                                                  output_attentions=recipe.attention_weight > 0)
        t_logits = torch.as_tensor(cached[rows], device=device) if cached is not None else (
            target.logits if target is not None else None)
        y = gold[rows].to(device)
        if t_logits is not None:
            y = torch.where(y == UNLABELED, t_logits.argmax(-1), y)  # the teacher grades unlabeled pairs
        loss = result.logits.new_zeros((), dtype=torch.float32)
        if recipe.ce_weight:
            loss = loss + recipe.ce_weight * grade_loss(result.logits.float(), y, ordinal_weight=recipe.ordinal_weight)
        if recipe.kd_weight:
            loss = loss + recipe.kd_weight * kd_loss(result.logits, t_logits, temperature=recipe.temperature)
        if recipe.hidden_weight:
            loss = loss + recipe.hidden_weight * hidden_mse(result.hidden_states, target.hidden_states,
                                                            batch["attention_mask"], layer_map=student.layer_map,
                                                            projections=projections)
        if recipe.attention_weight:
            loss = loss + recipe.attention_weight * attention_kl(
                per_layer(result.attentions, student_heads), per_layer(target.attentions, teacher_heads),
                batch["attention_mask"], layer_map=student.layer_map)
        return loss

    meta = {
        "kind": "distill",
        "grades": list(recipe.grades),
        "max_length": recipe.max_length,
        "recipe": to_dict(recipe),
        "teacher": {"path": teacher.path, "weights_hash": teacher.weights_hash},
        "student": {"kind": student.kind, "layer_map": student.layer_map, "parameters": count_parameters(model)},
        "train_data": pairs.provenance(),
        "dev_data": dev_record(recipe, dev),
    }

    def save_best(m, metrics):
        save_model(LoadedModel(m, tokenizer, student.loaded.meta), folder.best,
                   meta={**meta, "dev_metrics": metrics}, overwrite=True)

    settings = settings_from(recipe)
    state = train(model, encoded, settings=settings, loss_fn=loss_fn, evaluate_fn=evaluate_fn, work_dir=folder.path,
                  save_best=save_best, extra_modules=[projections] if projections is not None else [],
                  progress=progress, stop_after_steps=stop_after_steps)
    training = {"steps": state.step, "best_step": state.best_step, "history": state.history,
                "train_seconds": state.train_seconds, "examples_per_second": state.examples / max(state.train_seconds, 1e-9),
                # per CPU-second as well: wall-clock rates swing with other jobs on a shared machine
                "examples_per_cpu_second": state.examples / max(state.cpu_seconds, 1e-9),
                "teacher_seconds": teacher_seconds, "teacher_cache": "hit" if hit else ("written" if cached is not None else "off")}
    result = DistillResult(is_finished(state, len(encoded), settings), str(folder.path), training)
    if not result.finished:
        return result
    best = load_model(folder.best)
    after_logits = predict_logits(best.model, best.tokenizer, dev, encoded=dev_encoded, batch_size=128)
    metrics = {
        "teacher": summarize(teacher_dev, dev_labels, recipe.grades, dev_groups),
        "before": before,
        "after": summarize(after_logits, dev_labels, recipe.grades, dev_groups),
        "after_minus_teacher": paired_bootstrap(after_logits, teacher_dev, dev_labels, recipe.grades, seed=recipe.seed),
    }
    speed = None
    if recipe.measure_speed and folder.is_main:  # at the median dev length: what a deployed grader mostly sees
        seq_len = int(np.median(dev_encoded.lengths()))
        speed = speed_summary(teacher.model.to("cpu"), best.model, seq_len=seq_len, batch_sizes=(1, 32))
    folder.publish({"training": training, "metrics": metrics, "speed": speed})
    result.out, result.metrics, result.speed = str(out), metrics, speed
    return result


def _projections(student, teacher, n: int, *, seed: int):
    """One Linear student-width -> teacher-width per mapped layer, or None when the widths agree."""
    s, t = student.config.hidden_size, teacher.config.hidden_size
    if s == t:
        return None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the same projections on every (resumed) run
        return torch.nn.ModuleList([torch.nn.Linear(s, t) for _ in range(n)])
