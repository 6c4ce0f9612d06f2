"""What a model's output means: `grades` (a softmax over the grades, 1..5 by default) or `score` (one relevance
score per pair: a reranker such as a sentence-transformers CrossEncoder with num_labels=1).

A score model's raw output is its logit; `activation` (recorded with the model) is what its users read:
`sigmoid` for CrossEncoder folders that name it (their default), `identity` for headcut's MSE-trained scores,
`tanh` for CrossEncoder folders that name torch.nn.Tanh. Each is strictly increasing, so rankings, scans and
pruning never depend on it; reported scores do.
"""
from __future__ import annotations

import numpy as np

TASKS = ("grades", "score")
# name -> the function, as torch's module of that name computes it; only strictly increasing ones (see above)
ACTIVATIONS = {"identity": lambda raw: raw, "sigmoid": lambda raw: 1.0 / (1.0 + np.exp(-raw)), "tanh": np.tanh}


def score_values(logits: np.ndarray, activation: str = "identity") -> np.ndarray:
    """Scores `(n,)` float64 of one-score logits `(n, 1)`."""
    raw = np.asarray(logits, dtype=np.float64).reshape(len(logits), -1)[:, 0]
    if activation not in ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; one of {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[activation](raw)
