"""One call that grades a model on labelled pairs and returns metrics with bootstrap CIs."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from headcut.data import Pairs
from headcut.evaluate.metrics import bootstrap_ci, paired_bootstrap, summarize
from headcut.evaluate.predict import predict_logits


def evaluate_model(loaded, pairs: Pairs, *, batch_size: int = 64, max_length: int | None = None,
                   iters: int = 1000, seed: int = 0, progress=None) -> dict:
    """Accuracy, macro-F1, Spearman, loss and NDCG@10 with 95% bootstrap CIs; also returns the logits."""
    max_length = max_length or loaded.max_length
    logits = predict_logits(loaded.model, loaded.tokenizer, pairs, batch_size=batch_size,
                            max_length=max_length, progress=progress)
    return {"metrics": metrics_with_ci(logits, pairs, iters=iters, seed=seed), "logits": logits}


def metrics_with_ci(logits, pairs: Pairs, *, iters: int = 1000, seed: int = 0) -> dict:
    """The metrics of `logits` on labelled `pairs`, their 95% bootstrap CIs, and which data they describe."""
    labels = pairs.label_array()
    groups = pairs.query_groups()
    metrics = summarize(logits, labels, pairs.grades, groups)
    metrics["ci95"] = bootstrap_ci(logits, labels, pairs.grades, groups=groups, iters=iters, seed=seed)
    metrics["data"] = {"source": pairs.source, "fingerprint": pairs.fingerprint, "rows": len(pairs)}
    return metrics


@dataclass
class Scorer:
    """What `headcut evaluate` grades: a PyTorch model, or an exported ONNX grader run in ONNX Runtime."""

    about: dict  # recorded with the metrics: which model or grader this was
    logits: Callable[..., np.ndarray]  # logits(pairs, progress=None) -> (len(pairs), num_labels)


def open_scorer(name: str, *, batch_size: int = 64, max_length: int | None = None,
                allow_pickle: bool = False) -> Scorer:
    """A model folder or built-in name, or an exported ONNX grader folder (one with grader.json).

    Graders run in ONNX Runtime with the max length they were exported with, so a deployed INT8 grader
    is judged exactly as it will serve.
    """
    if (Path(name) / "grader.json").is_file():
        from headcut_grader import Grader

        grader = Grader(name, threads=os.cpu_count() or 1, batch_size=batch_size)
        about = {"path": name, "kind": "onnx grader", "precision": grader.record.get("precision"),
                 "model_sha256": grader.record.get("model_file", {}).get("sha256")}
        return Scorer(about, lambda pairs, progress=None: grader.logits(pairs, progress=progress))
    from headcut.models import load_model

    loaded = load_model(name, allow_pickle=allow_pickle)
    about = {"path": loaded.path, "weights_hash": loaded.weights_hash}
    return Scorer(about, lambda pairs, progress=None: predict_logits(
        loaded.model, loaded.tokenizer, pairs, batch_size=batch_size, max_length=max_length or loaded.max_length,
        progress=progress))


def against_reference(logits, reference_logits, pairs: Pairs, *, reference: dict, iters: int = 1000) -> dict:
    """The reference's metrics on the same pairs, and model - reference with paired bootstrap CIs."""
    labels = pairs.label_array()
    return {"model": reference, "metrics": summarize(reference_logits, labels, pairs.grades, pairs.query_groups()),
            "model_minus_against": paired_bootstrap(logits, reference_logits, labels, pairs.grades, iters=iters)}
