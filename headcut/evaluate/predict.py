"""Running a grader over pairs: tokenise once (headcut.batching), batch pairs of similar length, return logits
in input order."""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from headcut.batching import Encoded, collate, encode
from headcut_grader.data import Pairs
from headcut.evaluate.attention import scoring_batches
from headcut_grader.ranges import check_callbacks
from headcut.evaluate_arguments import checked_arguments
from headcut.model_arguments import check_model, check_tokenizer


@torch.inference_mode()
def predict_logits(
    model,
    tokenizer,
    pairs: Pairs,
    *,
    batch_size: int = 64,
    max_length: int | None = None,
    progress: Callable[[int], None] | None = None,
    encoded: Encoded | None = None,
) -> np.ndarray:
    """Logits `(len(pairs), num_labels)` as float32, in the order of `pairs` (`tokenizer`, `pairs`: unused where
    `encoded` is given)."""
    check_callbacks("predict_logits", progress=progress)
    check_model(model, "predict_logits model")
    if encoded is None:
        check_tokenizer(tokenizer, "predict_logits tokenizer")
    batch_size, max_length = checked_arguments("predict_logits", batch_size=batch_size, max_length=max_length)
    model.eval()
    encoded = encoded or encode(tokenizer, pairs, max_length=max_length, model=model)
    device = next(model.parameters()).device
    out = np.zeros((len(encoded), model.config.num_labels), dtype=np.float32)
    for rows in scoring_batches(model, encoded, batch_size, layers_held=False):
        batch = {k: v.to(device) for k, v in collate(encoded, rows).items()}
        out[rows] = model(**batch).logits.float().cpu().numpy()
        if progress:
            progress(len(rows))
    return out
