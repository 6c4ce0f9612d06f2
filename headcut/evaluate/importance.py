"""Head importance scores, and the score file that carries them to `headcut prune`.

Scores are `(num_layers, num_heads)` float32 tensors, higher = more important. Methods:
- `ablation`: increase of the mean loss (NLL) when the head alone is masked (exact, and loss rather than
  accuracy, since accuracy deltas of single heads drown in the noise of a few hundred pairs);
- `kl`: mean KL(unmasked || head masked) of the grade distribution; needs no labels;
- `gradient` (Michel et al. 2019): mean |dL/d mask| over pairs, each layer divided by its L2 norm;
- `fisher` (Kwon et al. 2022): sum over pairs of (dL/d mask)^2;
- `entropy`: minus the mean attention entropy (nats) of the head: sharp heads rank above diffuse ones.
`headcut scan` writes them in that order. `headcut prune` ranks by `fisher` (prune.scores.DEFAULT_METHOD:
one gradient pass): its own scan's method, and a score file's unless `--method` names another; a file
without fisher scores gives its first method.
Scores use the original head numbering also for a pruned model; heads it no longer has score -inf,
so a top-k never keeps them and correlations skip them.
A one-score model (num_labels=1, task score) has a Gaussian output in place of the grade distribution: its
loss is the squared error against the gold score, `kl` is the mean squared change of the score (the KL of two
unit-variance Gaussians, doubled), and without gold the gradients are those of the score itself (the Gaussian's
Fisher information). `pair_loss` and `example_loss` / `example_change` are where the task decides.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from headcut.arch import layer_parts, mask_shape, present_heads
from headcut.batching import Encoded, collate, encode, length_batches
from headcut_grader.data import Pairs, check_regular
from headcut_grader.errors import UserError
from headcut.evaluate.ablation import ablation_logits
from headcut.evaluate.attention import attention_weights
from headcut_grader.files import write_json
from headcut.masking import head_mask

METHODS = ("ablation", "kl", "gradient", "fisher", "entropy")
FORMAT = "headcut-importance/1"


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def example_nll(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per-pair cross-entropy of `(..., pairs, classes)` logits -> `(..., pairs)`."""
    logp = log_softmax(logits.astype(np.float64))
    return -np.take_along_axis(logp, labels.reshape((1,) * (logp.ndim - 2) + (-1, 1)), axis=-1)[..., 0]


def example_kl(base: np.ndarray, masked: np.ndarray) -> np.ndarray:
    """Per-pair KL(base || masked) of the grade distributions."""
    p, q = log_softmax(base.astype(np.float64)), log_softmax(masked.astype(np.float64))
    return (np.exp(p) * (p - q)).sum(axis=-1)


def is_score_model(model) -> bool:
    """One output: a reranker (task score); a grades model has one output per grade (two or more)."""
    return model.config.num_labels == 1


def example_loss(logits: np.ndarray, gold: np.ndarray) -> np.ndarray:
    """Per-pair loss of `(..., pairs, outputs)` logits: cross-entropy of grades, squared error of one score."""
    if logits.shape[-1] == 1:
        return (logits[..., 0].astype(np.float64) - gold) ** 2
    return example_nll(logits, gold)


def example_change(base: np.ndarray, masked: np.ndarray) -> np.ndarray:
    """Per-pair change of the output: KL of the grade distributions, squared change of one score."""
    if base.shape[-1] == 1:
        return (masked[..., 0].astype(np.float64) - base[..., 0]) ** 2
    return example_kl(base, masked)


def pair_loss(logits: torch.Tensor, target: torch.Tensor | None) -> torch.Tensor:
    """The summed loss whose mask gradients score units: cross-entropy of grades; for one score half the squared
    error against gold, or without gold (`target` None) the score itself (its squared gradient is the Fisher
    information of a unit-variance Gaussian output)."""
    if logits.shape[-1] > 1:
        return torch.nn.functional.cross_entropy(logits, target, reduction="sum")
    if target is None:
        return logits[:, 0].sum()
    return 0.5 * ((logits[:, 0] - target.to(logits.dtype)) ** 2).sum()


def absent_heads(model) -> torch.Tensor:
    """True where the (possibly pruned) model no longer has the head (original ids)."""
    return ~present_heads(model)


def check_scores(scores: torch.Tensor, absent: torch.Tensor, what: str, *, unit: str = "head") -> None:
    """A unit the model has must have a finite score: a NaN would otherwise sort as the least important.
    `unit`: "head" (named L<layer>H<id>) or "neuron" (L<layer>N<id>)."""
    bad = torch.nonzero(~torch.isfinite(torch.as_tensor(scores)) & ~absent)
    if len(bad):
        layer, index = (int(x) for x in bad[0])
        value = float(torch.as_tensor(scores)[layer, index])
        kind = "not a number (NaN)" if value != value else f"{value} (not finite)"
        raise UserError(f"{what}: the score of {unit} L{layer}{unit[0].upper()}{index} is {kind}; the model's outputs "
                        "are not finite there: check its weights, or rescan.")


def _finish(model, scores, what: str = "head scores") -> torch.Tensor:
    scores = torch.as_tensor(np.asarray(scores, dtype=np.float32))
    absent = absent_heads(model)
    check_scores(scores, absent, what)
    return scores.masked_fill(absent, float("-inf"))


def ablation_scores(model, labels, base: np.ndarray, masked: np.ndarray, *, method: str) -> torch.Tensor:
    """`ablation` or `kl` scores from the logits of `ablation_logits` (so one scan serves both).

    Heads a pruned layer no longer has are NaN in `masked` (never run) and score -inf."""
    if method == "ablation":
        score = example_loss(masked, labels).mean(-1) - example_loss(base, labels).mean()
    else:
        score = example_change(base[None, None], masked).mean(-1)
    return _finish(model, score, f"{method} scan")


def mask_gradients(model, encoded: Encoded, labels: np.ndarray | None, *, batch_size: int = 64,
                   progress: Callable[[int], None] | None = None) -> np.ndarray:
    """Per-pair gradients of the pair's loss w.r.t. the head mask at 1: `(pairs, layers, heads)`.

    One backward per batch: with a per-example mask the gradient of the summed loss w.r.t. mask[:, b]
    is pair b's own gradient. Parameters get no gradients (autograd.grad on the mask only).
    """
    model.eval()
    device = next(model.parameters()).device
    layers, width = mask_shape(model)
    out = np.zeros((len(encoded), layers, width), dtype=np.float64)
    for rows in length_batches(encoded, batch_size):
        batch = {k: v.to(device) for k, v in collate(encoded, rows).items()}
        mask = torch.ones(layers, len(rows), width, device=device, requires_grad=True)
        target = None if labels is None else torch.as_tensor(labels[rows], device=device)
        with torch.enable_grad(), head_mask(model, mask):
            loss = pair_loss(model(**batch).logits.float(), target)
            (grad,) = torch.autograd.grad(loss, mask)
        out[rows] = grad.permute(1, 0, 2).double().cpu().numpy()
        if progress:
            progress(len(rows))
    return out


def gradient_scores(model, grads: np.ndarray, *, method: str) -> torch.Tensor:
    if method == "fisher":
        return _finish(model, (grads ** 2).sum(0))
    score = np.abs(grads).mean(0)
    norm = np.linalg.norm(score, axis=1, keepdims=True)  # absent heads have zero gradient: no effect
    return _finish(model, score / np.where(norm > 0, norm, 1.0))


@torch.inference_mode()
def entropy_scores(model, encoded: Encoded, *, batch_size: int = 64, progress=None) -> torch.Tensor:
    """Minus the mean entropy of each head's attention rows over real (non-padding) query tokens."""
    device = next(model.parameters()).device
    total = torch.zeros(mask_shape(model), dtype=torch.float64)
    ids = [p.head_ids for p in layer_parts(model)]
    tokens = 0
    for rows in length_batches(encoded, batch_size):
        batch = {k: v.to(device) for k, v in collate(encoded, rows).items()}
        maps, _ = attention_weights(model, batch)
        real = batch["attention_mask"].bool()
        for layer, a in enumerate(maps):
            if a is None:
                continue
            ent = -(a * torch.log(a.clamp_min(1e-12))).sum(-1)  # (batch, heads, queries)
            total[layer, ids[layer]] += ent.permute(1, 0, 2)[:, real].double().sum(-1).cpu()
        tokens += int(real.sum())
        if progress:
            progress(len(rows))
    return _finish(model, -(total / max(tokens, 1)).numpy())


def gold(pairs: Pairs) -> np.ndarray | None:
    """The pairs' gold: 0-based grades, or scores; None when unlabelled."""
    return {"grades": pairs.label_array, "score": pairs.score_array}.get(pairs.task, lambda: None)()


def loss_labels(model, encoded: Encoded, pairs: Pairs, *, batch_size: int) -> np.ndarray | None:
    """The gold when the data has it, else the model's own predicted grades (label-free gradients); None for a
    score model without gold (see `pair_loss`)."""
    if pairs.task is not None:
        return gold(pairs)
    if is_score_model(model):
        return None
    from headcut.evaluate.predict import predict_logits

    return predict_logits(model, None, None, batch_size=batch_size, encoded=encoded).argmax(1)


def head_importance(model, tokenizer, pairs: Pairs, *, method: str, batch_size: int = 64,
                    max_length: int | None = None, progress: Callable[[int], None] | None = None,
                    seed: int = 0) -> torch.Tensor:
    """Score every head of `model` on `pairs`: `(num_layers, num_heads)` float32, higher = more important.

    `progress(n)` is called as pairs finish (one pass over the data in all). Deterministic: no method
    samples and the model runs in eval mode, so `seed` changes nothing (it is kept for callers that record
    it) and the caller's random state is left alone. See the module docstring for the methods.
    """
    if method not in METHODS:
        raise UserError(f"--method {method}: unknown; choose from {', '.join(METHODS)}.")
    if method == "ablation" and pairs.task is None:
        raise UserError(f"{pairs.source} has no grades, which --method ablation needs; use --method kl.")
    model.eval()
    encoded = encode(tokenizer, pairs, max_length=max_length, model=model)
    if method in ("ablation", "kl"):
        base, masked = ablation_logits(model, encoded, batch_size=batch_size, progress=progress)
        return ablation_scores(model, gold(pairs), base, masked, method=method)
    if method in ("gradient", "fisher"):
        labels = loss_labels(model, encoded, pairs, batch_size=batch_size)
        grads = mask_gradients(model, encoded, labels, batch_size=batch_size, progress=progress)
        return gradient_scores(model, grads, method=method)
    return entropy_scores(model, encoded, batch_size=batch_size, progress=progress)


# --- score files -------------------------------------------------------------------------------


def _to_json(scores: torch.Tensor) -> list[list[float | None]]:
    return [[float(v) if np.isfinite(v) else None for v in row] for row in scores.tolist()]


def write_scores(path, scores_by_method: dict[str, torch.Tensor], *, model_info: dict, data_info: dict,
                 extra: dict | None = None) -> None:
    """Write importance.json: per method its `(layers, heads)` scores (null = head absent) and provenance.

    model_info: {"path", "weights_hash", ...}; data_info: {"source", "fingerprint", "samples", "seed", ...}.
    The first method is what `read_scores(path)` returns when it names no method (or an absent default).
    """
    if not scores_by_method:
        raise ValueError("no scores to write")
    methods = {}
    for name, scores in scores_by_method.items():
        scores = torch.as_tensor(scores, dtype=torch.float32)
        methods[name] = {"method": name, "higher_is_more_important": True, "shape": list(scores.shape),
                         "scores": _to_json(scores)}
    write_json(path, {"format": FORMAT, "model": model_info, "data": data_info, "methods": methods,
                      "extra": extra or {}})


def _score_value(value, layer: int, head: int) -> float:
    """A score from the file: a number, or null for a head the model lacks (-inf)."""
    if value is None:
        return float("-inf")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"head L{layer}H{head} is {json.dumps(value)}, not a number")
    return float(value)


def read_scores(path, *, method: str | None = None, default: str | None = None) -> tuple[torch.Tensor, dict]:
    """Scores of one method as `(layers, heads)` float32 (-inf = absent head): `method`, else `default` when
    the file has it, else the file's first; and meta: method, weights_hash, fingerprint, samples, seed,
    model, data, methods, file."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such score file; run `headcut scan --out DIR` and pass DIR/importance.json.")
    check_regular(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"{path}: not a readable JSON score file ({e}); rerun `headcut scan`.") from None
    methods = doc.get("methods") if isinstance(doc, dict) else None
    if not isinstance(methods, dict) or not methods or doc.get("format") != FORMAT:
        raise UserError(f"{path}: not a headcut importance file (format {FORMAT}); rerun `headcut scan`.")
    name = method or (default if default in methods else next(iter(methods)))
    if name not in methods:
        raise UserError(f"{path} has no '{name}' scores (it has {', '.join(methods)}); "
                        f"pass one of those or rerun `headcut scan --method {name}`.")
    try:
        rows = methods[name]["scores"]
        scores = torch.tensor([[_score_value(v, layer, head) for head, v in enumerate(row)]
                               for layer, row in enumerate(rows)], dtype=torch.float32)
        if scores.dim() != 2 or scores.shape[0] == 0:
            raise ValueError("scores must be a non-empty layers x heads table")
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path}: the '{name}' scores are malformed ({e}); rerun `headcut scan`.") from None
    nulls = torch.tensor([[v is None for v in row] for row in rows])  # only null marks an absent head
    check_scores(scores, nulls, f"{path} ('{name}')")
    model_info, data_info = doc.get("model") or {}, doc.get("data") or {}
    meta = {
        "method": name, "methods": list(methods), "file": str(path),
        "weights_hash": model_info.get("weights_hash"), "fingerprint": data_info.get("fingerprint"),
        "samples": data_info.get("samples"), "seed": data_info.get("seed"),
        "model": model_info, "data": data_info, "extra": doc.get("extra") or {},
    }
    return scores, meta
