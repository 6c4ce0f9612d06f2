"""Distil a student from its teacher as a recipe says, on the shared resumable accelerate loop.

Rerunning the same call after an interruption resumes from `out`.partial (checkpoints, the cached
teacher logits, the best student so far); the finished artifact carries the recipe, the teacher's
weights hash and teacher / before / after dev metrics with paired-bootstrap CIs against the teacher (grades
metrics, or ranking metrics with CIs by query for a one-score teacher's student).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from headcut.arch import count_parameters, heads_per_layer
from headcut.batching import check_max_length, encode
from headcut_grader.data import Pairs, read_pairs
from headcut.distill.cache import teacher_logits
from headcut.distill.objective import LOSSES, Fixed, StepInputs, active_losses, total_loss
from headcut.distill.recipe import DistillRecipe
from headcut.distill.sizes import check_teacher_task
from headcut.distill.students import build_student, check_recorded_teacher, teacher_source
from headcut.distill.teacher import online_teacher
from headcut_grader.errors import check_names
from headcut.evaluate.ablation import process_state
from headcut.evaluate.metrics import paired_bootstrap, summarize
from headcut.evaluate.predict import predict_logits
from headcut_grader.files import as_path
from headcut.evaluate.tasks import paired, summary
from headcut.finetune import check_dev_apart, dev_record, load_data, run_hash
from headcut.models import LoadedModel, load_model, save_model
from headcut_grader.ranges import check_callbacks
from headcut.prune.measure import speed_summary, timed_length
from headcut.recipes import check_recipe, to_dict
from headcut.run_folder import RunFolder, check_headcut_cache, check_run_out, headcut_cache, out_flag
from headcut.training import (check_data_files, check_fits, check_process_batch, check_steps, file_options, grades_fix,
                              is_finished, query_index, settings_from, train, trained_on)

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


def with_unlabeled(recipe: DistillRecipe, train_pairs: Pairs, dev: Pairs) -> tuple[Pairs, np.ndarray]:
    """Training pairs plus the recipe's unlabeled pairs, and their gold: grade ids (UNLABELED for the extra ones),
    or for a score recipe gold scores (NaN for the extra ones). The `dev` pairs must not all be among them."""
    labels, none = _gold(recipe, train_pairs)
    if recipe.unlabeled_data is None:
        return train_pairs, labels
    options = dict(file_options(recipe), label_col=None)  # the extra pairs have no gold: no column to name
    extra = read_pairs(recipe.unlabeled_data, **options, grades_fix=grades_fix, texts_only=True)  # any gold unread
    extra = extra.sample(recipe.unlabeled_rows, seed=recipe.seed)
    merged = Pairs(train_pairs.queries + extra.queries, train_pairs.titles + extra.titles, None, recipe.grades,
                   f"{train_pairs.source} + {extra.source} (unlabeled)")
    check_dev_apart(recipe, dev, merged, "train_data unlabeled_data")
    return merged, np.concatenate([labels, np.full(len(extra), none, dtype=labels.dtype)])


def _gold(recipe: DistillRecipe, train_pairs: Pairs) -> tuple[np.ndarray, float]:
    """The train pairs' gold as the task's losses read it, and the value that marks a pair without."""
    if recipe.task == "grades":
        return train_pairs.label_array(), UNLABELED
    if not recipe.gold_weight:  # no score loss reads gold: the pairs need no score column
        return np.full(len(train_pairs), np.nan, dtype=np.float32), np.nan
    return train_pairs.score_array().astype(np.float32), np.nan


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
            stop_after_steps: int | None = None, cache_dir: str | Path | None = None,
            names: str = "arguments") -> DistillResult:
    """Train the recipe's student, keep the best dev checkpoint, write it to `out` as an artifact.

    `cache_dir` holds teacher logits (default: teacher-logits/ in headcut's cache folder, so every run and
    tuning trial of the same teacher on the same pairs reads one copy; the key is in cache.py).
    `stop_after_steps` stops early, as a kill would (tests use it to check resuming).
    `names`: who called, so that a refusal of `out` names it as they did (run_folder.out_flag: out, overwrite=True;
    `headcut distill`: --out, --overwrite).
    """
    check_names(names, "distill names")
    check_callbacks("distill", progress=progress)
    if cache_dir is not None:
        as_path(cache_dir, "distill cache_dir")
    run = Distillation(recipe, as_path(out, "distill out"), overwrite=overwrite, progress=progress, cache_dir=cache_dir,
                       flag=out_flag(names, out))
    run.setup()
    return run.train(stop_after_steps=stop_after_steps)


class Distillation:
    """One distillation run in torchtune's recipe shape: `setup` (teacher, student, data, run folder, teacher
    targets, losses), `_loss_step` (one batch's weighted losses, objective.LOSSES of the teacher's task) and
    `train` (the shared loop, then the dev metrics and the published artifact)."""

    def __init__(self, recipe: DistillRecipe, out: Path, *, overwrite: bool, progress, cache_dir, flag: str = "out"):
        self.recipe, self.out, self.overwrite = recipe, out, overwrite
        self.progress, self.cache_dir = progress, cache_dir
        self.flag = flag  # what the caller named `out` by (run_folder.out_flag)

    # --- setup ------------------------------------------------------------------------------------------

    def setup(self) -> None:
        recipe = self.recipe
        check_recipe(recipe, DistillRecipe, "distill recipe")
        check_run_out(self.out, overwrite=self.overwrite, inputs=recipe.input_paths(), flag=self.flag)
        check_process_batch(recipe.batch_size, process_state().num_processes)  # known before any model loads
        check_data_files(recipe)  # by their keys, before any model loads (p.tsv/, a missing file)
        check_fits(recipe, trained_on(recipe))  # the pairs counted before any model loads (a recipe built in Python)
        self._setup_teacher()
        self._setup_student()
        self._setup_data()
        # opened only once models and data load, so a mistyped teacher or a bad file leaves no half-made run folder
        check_steps(len(self.encoded), settings_from(recipe), trained_on(recipe))
        read = (self.teacher.weights_hash, self.student.loaded.weights_hash, self.pairs.fingerprint,
                self.dev.fingerprint)
        self.folder = RunFolder.open(self.out, run_hash(recipe, *read), {"recipe": to_dict(recipe)},
                                     overwrite=self.overwrite, flag=self.flag)
        self._setup_targets()
        self.before = self.folder.remember("before.json", lambda: self._dev_metrics(self.model))  # untrained, once
        self._setup_losses()

    def _setup_teacher(self) -> None:
        recipe = self.recipe
        self.attn = "eager" if recipe.attention_weight else "sdpa"  # attention maps need eager attention
        teacher = self.teacher = load_model(teacher_source(recipe), attn_implementation=self.attn, flag="teacher")
        teacher.model.to(process_state().device)  # this process's accelerator (CPU, or its GPU under accelerate launch)
        check_recorded_teacher(recipe, teacher)
        check_teacher_task(teacher, recipe)  # as the recipe was read, where the teacher was there to outline

    def _setup_student(self) -> None:
        self.student = build_student(self.recipe, self.teacher, attn_implementation=self.attn)
        self.model, self.tokenizer = self.student.loaded.model, self.student.loaded.tokenizer

    def _setup_data(self) -> None:
        recipe = self.recipe
        train_pairs, self.dev = load_data(recipe)
        self.pairs, self.labels = with_unlabeled(recipe, train_pairs, self.dev)
        check_max_length(self.model, recipe.max_length, flag="max_length")  # the recipe's key, not --max-length
        self.encoded = encode(self.tokenizer, self.pairs, max_length=recipe.max_length, model=self.model)
        self.dev_encoded = encode(self.tokenizer, self.dev, max_length=recipe.max_length, model=self.model)
        # margin-MSE compares titles of one query: its batches keep each query's pairs together
        self.query_ids = query_index(self.pairs) if recipe.task == "score" and recipe.margin_weight else None

    def _setup_targets(self) -> None:
        """The teacher's dev logits, and its train logits cached once when a loss reads them (cache.py)."""
        recipe, teacher, progress = self.recipe, self.teacher, self.progress
        cache = Path(self.cache_dir) if self.cache_dir else headcut_cache() / "teacher-logits"
        check = None if self.cache_dir else check_headcut_cache  # on a miss: the variable that set it, if unwritable
        started = time.perf_counter()
        self.teacher_dev, _ = teacher_logits(teacher, self.dev, encoded=self.dev_encoded, max_length=recipe.max_length,
                                             cache_dir=cache, before_write=check,
                                             progress=_stage(progress, "teacher logits (dev)", len(self.dev)))
        losses = LOSSES[recipe.task]
        active = active_losses(recipe, recipe.task)
        needs_targets = any(losses[name].targets for name in active) or recipe.unlabeled_data is not None
        runs_teacher = any(losses[name].online for name in active)  # each step's teacher pass gives its logits too
        self.cached, self.hit = None, False
        if needs_targets and recipe.cache_teacher and not runs_teacher:
            self.cached, self.hit = teacher_logits(
                teacher, self.pairs, encoded=self.encoded, max_length=recipe.max_length, cache_dir=cache,
                before_write=check, progress=_stage(progress, "teacher logits (train, cached)", len(self.pairs)))
        self.teacher_seconds = time.perf_counter() - started
        self.online = runs_teacher or (needs_targets and self.cached is None)

    def _setup_losses(self) -> None:
        recipe, model = self.recipe, self.model
        projections = _projections(model, self.teacher.model, len(self.student.layer_map), seed=recipe.seed) \
            if recipe.hidden_weight > 0 else None
        self.fixed = Fixed(recipe, self.student.layer_map, projections, heads_per_layer(model),
                           heads_per_layer(self.teacher.model))
        self.gold = torch.as_tensor(self.labels)
        self.query_tensor = None if self.query_ids is None else torch.as_tensor(self.query_ids)

    # --- one step ---------------------------------------------------------------------------------------

    def _loss_step(self, m, batch, rows) -> torch.Tensor:
        recipe, device = self.recipe, batch["input_ids"].device
        result = m(**batch, output_hidden_states=recipe.hidden_weight > 0,
                   output_attentions=recipe.attention_weight > 0)
        target = None
        if self.online:
            matched = set(self.student.layer_map) if recipe.attention_weight > 0 else None
            target = online_teacher(self.teacher.model.to(device), batch, hidden=recipe.hidden_weight > 0,
                                    attention_layers=matched)
        t_logits = torch.as_tensor(self.cached[rows], device=device) if self.cached is not None else (
            target.logits if target is not None else None)
        gold = self.gold[rows].to(device)
        if recipe.task == "grades":
            if t_logits is not None:
                gold = torch.where(gold == UNLABELED, t_logits.argmax(-1), gold)  # the teacher grades unlabeled pairs
        queries = None if self.query_tensor is None else self.query_tensor[rows].to(device)
        inputs = StepInputs(result, target, t_logits, gold, queries, batch["attention_mask"])
        return total_loss(inputs, self.fixed, recipe.task)

    # --- the loop and what it publishes -----------------------------------------------------------------

    def _dev_metrics(self, m) -> dict:
        logits = predict_logits(m, self.tokenizer, self.dev, encoded=self.dev_encoded)
        return self._summary(logits)

    def _summary(self, logits) -> dict:
        if self.recipe.task == "score":
            return summary(logits, self.dev, task="score", activation=self.teacher.activation)
        return summarize(logits, self.dev.label_array(), self.recipe.grades, self.dev.query_groups())

    def _meta(self) -> dict:
        recipe, teacher, student = self.recipe, self.teacher, self.student
        return {
            "kind": "distill",
            "grades": list(recipe.grades),
            **task_record(teacher),
            "max_length": recipe.max_length,
            "recipe": to_dict(recipe),
            "teacher": {"path": str(Path(teacher.path).resolve()), "weights_hash": teacher.weights_hash},
            "student": {"kind": student.kind, "layer_map": student.layer_map,
                        "parameters": count_parameters(self.model)},
            "train_data": self.pairs.provenance(),
            "dev_data": dev_record(recipe, self.dev),
        }

    def train(self, *, stop_after_steps: int | None = None) -> DistillResult:
        recipe, folder, meta = self.recipe, self.folder, self._meta()

        def save_best(m, metrics):
            save_model(LoadedModel(m, self.tokenizer, self.student.loaded.meta), folder.best,
                       meta={**meta, "dev_metrics": metrics}, overwrite=True)

        settings = settings_from(recipe)
        projections = self.fixed.projections
        state = train(self.model, self.encoded, settings=settings, loss_fn=self._loss_step,
                      evaluate_fn=self._dev_metrics, work_dir=folder.path, save_best=save_best,
                      extra_modules=[projections] if projections is not None else [],
                      progress=self.progress, stop_after_steps=stop_after_steps, query_ids=self.query_ids)
        training = {"steps": state.step, "best_step": state.best_step, "history": state.history,
                    "train_seconds": state.train_seconds,
                    "examples_per_second": state.examples / max(state.train_seconds, 1e-9),
                    # per CPU-second as well: wall-clock rates swing with other jobs on a shared machine
                    "examples_per_cpu_second": state.examples / max(state.cpu_seconds, 1e-9),
                    "teacher_seconds": self.teacher_seconds,
                    "teacher_cache": "hit" if self.hit else "written" if self.cached is not None
                    else "online" if self.online else "off"}
        result = DistillResult(is_finished(state, len(self.encoded), settings), str(folder.path), training)
        if not result.finished:
            return result
        best = load_model(folder.best, flag="")  # the run's own best checkpoint: named by its path alone
        metrics = self._final_metrics(best)
        speed = None
        if recipe.measure_speed and folder.is_main:  # at the median dev length: what a deployed grader mostly sees
            seq_len = timed_length(np.median(self.dev_encoded.lengths()))
            speed = speed_summary(self.teacher.model.to("cpu"), best.model, seq_len=seq_len, batch_sizes=(1, 32))
        folder.publish({"training": training, "metrics": metrics, "speed": speed})
        result.out, result.metrics, result.speed = str(self.out), metrics, speed
        return result

    def _final_metrics(self, best: LoadedModel) -> dict:
        """Teacher / before / after on dev, and after - teacher with paired CIs (by query for a score model)."""
        after = predict_logits(best.model, best.tokenizer, self.dev, encoded=self.dev_encoded)
        if self.recipe.task == "score":
            compared = paired(after, self.teacher_dev, self.dev, task="score", activation=self.teacher.activation,
                              seed=self.recipe.seed)
        else:
            compared = paired_bootstrap(after, self.teacher_dev, self.dev.label_array(), self.recipe.grades,
                                        seed=self.recipe.seed)
        return {"teacher": self._summary(self.teacher_dev), "before": self.before, "after": self._summary(after),
                "after_minus_teacher": compared}


def task_record(teacher: LoadedModel) -> dict:
    """What a student records of its task: a score student reads its scores as its teacher does."""
    return {"task": "score", "activation": teacher.activation} if teacher.task == "score" else {}


def _projections(student, teacher, n: int, *, seed: int):
    """One Linear student-width -> teacher-width per mapped layer, or None when the widths agree."""
    s, t = student.config.hidden_size, teacher.config.hidden_size
    if s == t:
        return None
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # the same projections on every (resumed) run
        return torch.nn.ModuleList([torch.nn.Linear(s, t) for _ in range(n)])
