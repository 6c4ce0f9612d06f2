"""Two graders on the same pairs: both sets of metrics, the difference with paired bootstrap CIs, and agreement."""
from __future__ import annotations

import numpy as np

from headcut.batching import encode
from headcut_grader.data import Pairs
from headcut_grader.ranges import check_callbacks
from headcut.evaluate.predict import predict_logits
from headcut.evaluate.tasks import check_logits, check_task, paired, summary
from headcut.evaluate.metrics import check_resampling
from headcut.evaluate_arguments import checked_arguments
from headcut.model_arguments import check_model, check_tokenizer


def compare_models(
    before,
    after,
    tokenizer,
    pairs: Pairs,
    *,
    batch_size: int = 64,
    max_length: int | None = None,
    iters: int = 1000,
    seed: int = 0,
    progress=None,
    activation: str = "identity",
) -> dict:
    """Metrics of both models, and after - before with paired 95% CIs plus grade agreement.

    Pairs without labels give agreement only (the share of pairs graded the same by both).
    """
    check_callbacks("compare_models", progress=progress)
    check_model(before, "compare_models before")
    check_model(after, "compare_models after")
    check_tokenizer(tokenizer, "compare_models tokenizer")
    batch_size, max_length = checked_arguments("compare_models", batch_size=batch_size, max_length=max_length)
    iters, seed = check_resampling(iters, seed, "compare_models")  # before both models grade the pairs
    encoded = encode(tokenizer, pairs, max_length=max_length, model=before)
    logits_before = predict_logits(before, tokenizer, pairs, batch_size=batch_size, encoded=encoded, progress=progress)
    logits_after = predict_logits(after, tokenizer, pairs, batch_size=batch_size, encoded=encoded, progress=progress)
    out = compare_logits(logits_before, logits_after, pairs, iters=iters, seed=seed, activation=activation)
    out["seq_len"] = max(1, int(round(float(encoded.lengths().mean()))))
    return out


def compare_logits(logits_before: np.ndarray, logits_after: np.ndarray, pairs: Pairs, *, iters: int = 1000,
                   seed: int = 0, activation: str = "identity") -> dict:
    """`compare_models` from logits already computed on `pairs` (one reference, several variants). One-output
    logits are a score model's (`activation`: its recorded one): ranking metrics, agreement = pair order."""
    iters, seed = check_resampling(iters, seed, "compare_logits")  # unlabelled pairs skip the bootstrap's own check
    for name, given in (("logits_before", logits_before), ("logits_after", logits_after)):
        check_logits(given, pairs, f"compare_logits {name}")
    task = "score" if logits_before.shape[1] == 1 else "grades"
    out = {"data": pairs.provenance(), "task": task}
    if pairs.task is not None:
        check_task(task, pairs, "the model")
        out["before"] = summary(logits_before, pairs, task=task, activation=activation)
        out["after"] = summary(logits_after, pairs, task=task, activation=activation)
    out["paired"] = paired(logits_after, logits_before, pairs, task=task, activation=activation, iters=iters, seed=seed)
    out["logits"] = {"before": logits_before, "after": logits_after}
    return out
