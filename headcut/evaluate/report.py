"""One call that grades a model on labelled pairs and returns metrics with bootstrap CIs."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from headcut_grader.data import DEFAULT_GRADES, Pairs
from headcut_grader.errors import UserError, caller, named, setting
from headcut_grader.files import as_path
from headcut_grader.ranges import check_callbacks
from headcut.batching import check_max_length
from headcut.evaluate.metrics import check_resampling
from headcut.evaluate.predict import predict_logits
from headcut.evaluate.tasks import check_logits, check_task, paired, summary, summary_ci
from headcut.evaluate_arguments import checked_arguments
from headcut.model_arguments import check_loaded


def evaluate_model(loaded, pairs: Pairs, *, batch_size: int = 64, max_length: int | None = None,
                   iters: int = 1000, seed: int = 0, progress=None) -> dict:
    """Accuracy, macro-F1, Spearman, loss and NDCG@10 with 95% bootstrap CIs; also returns the logits. `loaded`:
    what headcut.load_model returns."""
    check_callbacks("evaluate_model", progress=progress)
    check_loaded(loaded, "evaluate_model loaded")
    batch_size, max_length = checked_arguments("evaluate_model", batch_size=batch_size, max_length=max_length)
    iters, seed = check_resampling(iters, seed, "evaluate_model")  # before the pairs are graded, not after
    max_length = max_length or loaded.max_length
    logits = predict_logits(loaded.model, loaded.tokenizer, pairs, batch_size=batch_size,
                            max_length=max_length, progress=progress)
    return {"metrics": metrics_with_ci(logits, pairs, iters=iters, seed=seed, task=loaded.task,
                                      activation=loaded.activation), "logits": logits}


def metrics_with_ci(logits, pairs: Pairs, *, iters: int = 1000, seed: int = 0, task: str = "grades",
                    activation: str = "identity") -> dict:
    """The metrics of `logits` on labelled `pairs`, their 95% bootstrap CIs, and which data they describe."""
    iters, seed = check_resampling(iters, seed, "metrics_with_ci")
    check_logits(logits, pairs, "metrics_with_ci logits")
    if pairs.task is None:
        pairs.label_array()  # no gold: the sentence that says so
    check_task(task, pairs, "the model")
    metrics = summary(logits, pairs, task=task, activation=activation)
    metrics["ci95"] = summary_ci(logits, pairs, task=task, activation=activation, iters=iters, seed=seed)
    metrics["data"] = pairs.provenance()
    return metrics


@dataclass
class Scorer:
    """What `headcut evaluate` grades: a PyTorch model, or an exported ONNX grader run in ONNX Runtime."""

    about: dict  # recorded with the metrics: which model or grader this was
    logits: Callable[..., np.ndarray]  # logits(pairs, progress=None) -> (len(pairs), num_labels)
    task: str = "grades"
    activation: str = "identity"
    grades: tuple | None = None  # what its outputs index (None: 1..5)
    runtime: str = ""  # an exported grader's runtime, version and precision ('openvino 2026.4.1 bf16'); "": PyTorch


OPEN_SCORER_SPELLED = {"arguments": {"max_length": "open_scorer max_length"}}  # a Python call's, by its function


def open_scorer(name: str, *, batch_size: int = 64, max_length: int | None = None,
                allow_pickle: bool = False, flag: str = "open_scorer name") -> Scorer:
    """A model folder or built-in name, or an exported ONNX grader folder (one with grader.json).

    Graders run in ONNX Runtime with the max length they were exported with, so a deployed INT8 grader
    is judged exactly as it will serve. `flag`: the flag that named `name` (a Python caller's: this argument).
    """
    as_path(name, flag, what="a model folder's path, a built-in name or a grader folder's path")
    batch_size, max_length = checked_arguments("open_scorer", batch_size=batch_size, max_length=max_length)
    check_scorer_length(name, max_length, flag=flag)
    if (Path(name) / "grader.json").is_file():
        from headcut_grader import Grader

        grader = Grader(name, threads=os.cpu_count() or 1, batch_size=batch_size)
        about = {"path": name, "kind": f"{grader.backend.name} grader", "task": grader.task,
                 "precision": grader.record.get("precision"),
                 "model_sha256": grader.record.get("model_file", {}).get("sha256"), "runtime": grader.runtime}
        # a score grader's logits are judged as its PyTorch model's are: its task and activation (was: as grades)
        return Scorer(about, lambda pairs, progress=None: grader.logits(pairs, progress=progress), grader.task,
                      grader.record.get("activation", "identity"),
                      tuple(grader.record["grades"]) if "grades" in grader.record else None, runtime=grader.runtime)
    from headcut.models import load_model

    loaded = load_model(name, allow_pickle=allow_pickle, flag=flag)
    about = {"path": loaded.path, "weights_hash": loaded.weights_hash, "task": loaded.task}
    return Scorer(about, lambda pairs, progress=None: predict_logits(
        loaded.model, loaded.tokenizer, pairs, batch_size=batch_size, max_length=max_length or loaded.max_length,
        progress=progress), loaded.task, loaded.activation, loaded.grades)


def check_scorer_length(name: str, max_length: int | None, *, flag: str) -> None:
    """`max_length` (checked: a whole number or None) suits what open_scorer(name) opens, said before it opens:
    an exported grader reads the tokens it was exported with, and a model has as many positions as its config
    gives it (read from its outline, so no weights are read; was: after the model loaded). `flag`: the flag that
    named `name`, and so how the message names max_length (--max-length for a command's flag)."""
    if max_length is None:
        return
    length = named("max_length", caller(flag), section="", spelled=OPEN_SCORER_SPELLED)  # as its caller named `name`
    if (Path(name) / "grader.json").is_file():
        raise UserError(f"{length} applies to PyTorch models, and {setting(flag, name)} is an exported grader, "
                        f"which reads as many tokens as it was exported with; drop {length} (or re-export it).")
    from headcut.models import outline

    # as the caller named it, and whose positions (--model or --against)
    check_max_length(outline(name, flag=flag).model, max_length, flag=length, whose=f"{setting(flag, name)}'s")


def comparison_problem(reference: tuple[str, tuple | None], model: tuple[str, tuple | None], *,
                       names: tuple[str, str]) -> str | None:
    """Why a model of (task, grades) `model` cannot be compared with `reference`, one sentence naming them by
    `names` (reference first), or None: a [0..4] grader's grade 0 is not a [1..5] grader's grade 1, so their
    agreement would mean nothing."""
    (ref_task, ref_grades), (task, grades) = reference, model
    if ref_task != task:
        return (f"{names[0]} is a {ref_task} model and {names[1]} a {task} one; compare a grades model with a "
                "grades model, a score model with a score one.")
    ref_grades, grades = tuple(ref_grades or DEFAULT_GRADES), tuple(grades or DEFAULT_GRADES)
    if task == "grades" and ref_grades != grades:
        return f"{names[0]} grades {list(ref_grades)} and {names[1]} {list(grades)}; compare models of the same grades."
    return None


def check_comparable(scorer: Scorer, reference: Scorer, *, flag: str = "check_comparable reference") -> None:
    """A model is compared only with one of its task and grades, said before either grades a pair; `flag`: what
    named the reference."""
    problem = comparison_problem((reference.task, reference.grades), (scorer.task, scorer.grades),
                                 names=(setting(flag, reference.about.get('path')), "the model"))
    if problem:
        raise UserError(problem)


def against_reference(logits, reference_logits, pairs: Pairs, *, reference: dict, iters: int = 1000,
                      task: str = "grades", activation: str = "identity",
                      flag: str = "against_reference reference") -> dict:
    """The reference's metrics on the same pairs, and model - reference with paired bootstrap CIs; `flag`: what
    named the reference (as check_comparable's)."""
    iters, _ = check_resampling(iters, 0, "against_reference")
    for name, given in (("logits", logits), ("reference_logits", reference_logits)):
        check_logits(given, pairs, f"against_reference {name}")
    if reference_logits.shape[1] != logits.shape[1]:
        raise UserError(f"{setting(flag, reference.get('path'))} has {reference_logits.shape[1]} outputs and the model "
                        f"{logits.shape[1]}; compare a grades model with a grades model, "
                        "a score model with a score one.")
    return {"model": reference, "metrics": summary(reference_logits, pairs, task=task, activation=activation),
            "model_minus_against": paired(logits, reference_logits, pairs, task=task, activation=activation,
                                          iters=iters)}
