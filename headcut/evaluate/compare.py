"""Two graders on the same pairs: both sets of metrics, the difference with paired bootstrap CIs, and agreement."""
from __future__ import annotations

import numpy as np

from headcut.batching import encode
from headcut.data import Pairs
from headcut.evaluate.metrics import paired_bootstrap, summarize
from headcut.evaluate.predict import predict_logits


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
) -> dict:
    """Metrics of both models, and after - before with paired 95% CIs plus grade agreement.

    Pairs without labels give agreement only (the share of pairs graded the same by both).
    """
    encoded = encode(tokenizer, pairs, max_length=max_length, model=before)
    logits_before = predict_logits(before, tokenizer, pairs, batch_size=batch_size, encoded=encoded, progress=progress)
    logits_after = predict_logits(after, tokenizer, pairs, batch_size=batch_size, encoded=encoded, progress=progress)
    out = compare_logits(logits_before, logits_after, pairs, iters=iters, seed=seed)
    out["seq_len"] = max(1, int(round(float(encoded.lengths().mean()))))
    return out


def compare_logits(logits_before: np.ndarray, logits_after: np.ndarray, pairs: Pairs, *, iters: int = 1000,
                   seed: int = 0) -> dict:
    """`compare_models` from logits already computed on `pairs` (one reference, several variants)."""
    out = {"data": {"source": pairs.source, "fingerprint": pairs.fingerprint, "rows": len(pairs)}}
    if pairs.has_labels:
        labels = pairs.label_array()
        groups = pairs.query_groups()
        out["before"] = summarize(logits_before, labels, pairs.grades, groups)
        out["after"] = summarize(logits_after, labels, pairs.grades, groups)
        out["paired"] = paired_bootstrap(logits_after, logits_before, labels, pairs.grades, iters=iters, seed=seed)
    else:
        out["paired"] = {"agreement": {"value": float(np.mean(logits_after.argmax(1) == logits_before.argmax(1)))}}
    out["logits"] = {"before": logits_before, "after": logits_after}
    return out
