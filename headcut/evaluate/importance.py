"""What head scores are made of, and the score file that carries them to `headcut prune`.

The per-pair losses and output changes the criteria (`evaluate.criteria`) rank heads by, the loss whose mask
gradients the Fisher pass takes (`pair_loss`), the finite check, and importance.json (`write_scores`,
`read_scores`): per criterion a `(layers, heads)` table, null for a head the model lacks (read back as -inf,
so a top-k never keeps it and correlations skip it). Scores use the original head numbering also for a
pruned model.
A one-score model (num_labels=1, task score) has a Gaussian output in place of the grade distribution: its
loss is the squared error against the gold score, its output change the squared change of the score (the KL
of two unit-variance Gaussians, doubled), and without gold the gradients are those of the score itself (the
Gaussian's Fisher information). `pair_loss` and `example_loss` / `example_change` are where the task decides.
"""
from __future__ import annotations

import json

import numpy as np
import torch

from headcut.arch import present_heads
from headcut_grader.data import Pairs, check_regular
from headcut_grader.errors import UserError, quoted
from headcut_grader.files import as_file_to_read, check_out_file, write_json
from headcut_grader.readers import bounded_int
from headcut_grader.validation import absent, read_small_text
from headcut.evaluate_arguments import SCORES_FILE

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


def gold(pairs: Pairs) -> np.ndarray | None:
    """The pairs' gold: 0-based grades, or scores; None when unlabelled."""
    return {"grades": pairs.label_array, "score": pairs.score_array}.get(pairs.task, lambda: None)()


# --- score files -------------------------------------------------------------------------------


def _to_json(scores: torch.Tensor) -> list[list[float | None]]:
    return [[float(v) if np.isfinite(v) else None for v in row] for row in scores.tolist()]


def write_scores(path, scores_by_method: dict[str, torch.Tensor], *, model_info: dict, data_info: dict,
                 extra: dict | None = None) -> None:
    """Write importance.json: per method its `(layers, heads)` scores (null = head absent) and provenance.

    model_info: {"path", "weights_hash", ...}; data_info: {"source", "fingerprint", "samples", "seed", ...}.
    The first method is what `read_scores(path)` returns given no method and no default the file has;
    `headcut prune --scores` passes default fisher (prune.scores.DEFAULT_METHOD), so it reads fisher when the
    file has it, else the first.
    """
    if not scores_by_method:
        raise ValueError("no scores to write")
    # the folder rule every output file keeps (o.json/ or a folder given: named as the argument, with a file to
    # name there); replaced as before, as a scan rewrites its own
    path = check_out_file(path, overwrite=True, flag="write_scores path", example="importance.json")
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
    path = as_file_to_read(path, "read_scores path", what=SCORES_FILE)
    if not path.exists():
        plain = "no such score file; run `headcut scan --out DIR` and pass DIR/importance.json"
        raise UserError(f"{path}: {absent(path, plain)}.")
    if path.is_dir():
        raise UserError(f"{path} is a folder; pass the score file in it, {path / 'importance.json'}"
                        + ("." if (path / "importance.json").is_file() else " (`headcut scan --out DIR` writes it)."))
    check_regular(path, what="the scores (`headcut scan` writes importance.json)", kind="a score file")
    try:
        doc = json.loads(read_small_text(path, what="score file"), parse_int=bounded_int)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UserError(f"{path}: not a readable JSON score file ({e}); rerun `headcut scan`.") from None
    methods = doc.get("methods") if isinstance(doc, dict) else None
    if not isinstance(methods, dict) or not methods or doc.get("format") != FORMAT:
        raise UserError(f"{path}: not a headcut importance file (format {FORMAT}); rerun `headcut scan`.")
    name = method or (default if default in methods else next(iter(methods)))
    if name not in methods:
        raise UserError(f"{path} has no {quoted(name)} scores (it has {', '.join(methods)}); "
                        f"pass one of those or rerun `headcut scan --method {name}`.")
    try:
        rows = methods[name]["scores"]
        scores = torch.tensor([[_score_value(v, layer, head) for head, v in enumerate(row)]
                               for layer, row in enumerate(rows)], dtype=torch.float32)
        if scores.dim() != 2 or scores.shape[0] == 0:
            raise ValueError("scores must be a non-empty layers x heads table")
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path}: the {quoted(name)} scores are malformed ({e}); rerun `headcut scan`.") from None
    nulls = torch.tensor([[v is None for v in row] for row in rows])  # only null marks an absent head
    check_scores(scores, nulls, f"{path} ({quoted(name)})")
    model_info, data_info = doc.get("model") or {}, doc.get("data") or {}
    for key, value in (("model", model_info), ("data", data_info), ("extra", doc.get("extra") or {})):
        if not isinstance(value, dict):
            raise UserError(f"{path}: '{key}' must be a JSON object, not {type(value).__name__}; rerun `headcut scan`.")
    meta = {
        "method": name, "methods": list(methods), "file": str(path),
        "weights_hash": model_info.get("weights_hash"), "fingerprint": data_info.get("fingerprint"),
        "samples": data_info.get("samples"), "seed": data_info.get("seed"),
        "model": model_info, "data": data_info, "extra": doc.get("extra") or {},
    }
    return scores, meta
