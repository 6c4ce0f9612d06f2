"""One call that grades a model on labelled pairs and returns metrics with bootstrap CIs."""
from __future__ import annotations

from headcut.data import Pairs
from headcut.evaluate.metrics import bootstrap_ci, summarize
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
