"""The one seam for unit importance: a `Criterion` scores every attention head (and, where it can, every FFN
neuron) of a model on pairs, and `CRITERIA` is the registry that `headcut scan`, `prune --keep-ratio` and
`prune --flops/--latency` all read. A new criterion is one `register_criterion(Criterion(...))` call.

Scores are float64, higher = more important, indexed by original ids (heads `(layers, heads)`, neurons
`(layers, intermediate_size)`); a unit the model no longer has scores -inf, and a unit it has must score a
finite number (`Criterion.score` checks, so a NaN never sorts as the least important).
Criteria share passes through `ScoringData`: the ablation logits (ablation, kl) and one mask-gradient pass
(gradient, fisher; `evaluate.fisher`) run once however many criteria read them.

Built in, in the order `headcut scan` writes them:
- `ablation`: increase of the mean loss when the head alone is masked (exact; loss rather than accuracy, since
  accuracy deltas of single heads drown in the noise of a few hundred pairs); needs gold;
- `kl`: mean KL(unmasked || head masked) of the grade distribution (a one-score model: the squared change of
  its score); needs no gold;
- `gradient` (Michel et al. 2019): mean |dL/d mask| over pairs, each layer divided by its L2 norm;
- `fisher` (Kwon et al. 2022): the Fisher information of the masks, heads and FFN neurons, for `targets`
  grades (gold: the empirical Fisher) or teacher (the model's own expected Fisher; the default without gold);
- `entropy`: minus the mean attention entropy (nats) of the head: sharp heads rank above diffuse ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from headcut.arch import layer_parts, mask_shape, present_heads
from headcut.batching import Encoded, collate, encode
from headcut.evaluate.ablation import distributed_ablation_logits
from headcut.evaluate.attention import attention_batches, attention_weights
from headcut.evaluate.fisher import TARGETS, MaskGradients, UnitScores, mask_gradient_pass, present_neurons
from headcut.evaluate.importance import check_scores, example_change, example_loss, gold, is_score_model
from headcut_grader.data import Pairs
from headcut_grader.errors import UserError, caller, quoted, setting
from headcut_grader.ranges import check_callbacks
from headcut.evaluate_arguments import checked_arguments
from headcut.model_arguments import check_model, check_tokenizer


def gold_name(task: str) -> str:
    """What a model of `task` reads as gold, as a message names it: grades, or a score model's scores."""
    return "scores" if task == "score" else "grades"


@dataclass
class ScoringData:
    """What criteria read: the model, its encoded pairs and their gold (None: unlabelled), and the passes they
    share, each run on first use. `targets`: Fisher's, grades or teacher (None: grades when there is gold);
    `neurons`: score FFN neurons too (the budget prunes need them); `progress(stage, pairs_done)`."""

    model: torch.nn.Module
    encoded: Encoded
    gold: np.ndarray | None
    source: str = "the pairs"
    targets: str | None = None
    neurons: bool = False
    batch_size: int = 64
    progress: Callable[[str, int], None] | None = None
    _ablation: tuple | None = field(default=None, repr=False)
    _gradients: MaskGradients | None = field(default=None, repr=False)

    @property
    def pairs(self) -> int:
        return len(self.encoded) if self.encoded is not None else self._ablation[0].shape[0]

    @property
    def gold_name(self) -> str:
        return gold_name("score" if is_score_model(self.model) else "grades")

    @property
    def fisher_targets(self) -> str:
        return self.targets or ("grades" if self.gold is not None else "teacher")

    def stage(self, name: str) -> Callable[[int], None] | None:
        return (lambda n: self.progress(name, n)) if self.progress else None

    def ablation(self) -> tuple[np.ndarray, np.ndarray]:
        """The unmasked logits and those with each head masked alone (`evaluate.ablation`)."""
        if self._ablation is None:
            self._ablation = distributed_ablation_logits(self.model, self.encoded, batch_size=self.batch_size,
                                                         progress=self.stage("ablation scan"))
        return self._ablation

    def gradients(self) -> MaskGradients:
        """The one mask-gradient pass (`evaluate.fisher.mask_gradient_pass`) for `fisher_targets`."""
        targets = self.fisher_targets
        check_targets(targets, has_gold=self.gold is not None, source=self.source, gold_name=self.gold_name)
        if self._gradients is None:
            labels = self.gold if targets == "grades" else None
            self._gradients = mask_gradient_pass(self.model, self.encoded, labels, targets=targets,
                                                 neurons=self.neurons, batch_size=self.batch_size,
                                                 progress=self.stage("mask gradients"))
        return self._gradients


def check_targets(targets: str, *, has_gold: bool = True, source: str = "the pairs", flag: str = "targets",
                  gold_name: str = "grades") -> None:
    """Fisher's `targets` is one of TARGETS, and `grades` comes with gold (`gold_name`: the model's, grades or
    scores); `flag`: the flag, recipe key or argument that named it."""
    if targets not in TARGETS:
        raise UserError(f"{setting(flag, quoted(targets))} is unknown; choose one of: {', '.join(TARGETS)}.")
    if targets == "grades" and not has_gold:
        raise UserError(f"{source} has no {gold_name}, which {setting(flag, 'grades')} needs; use "
                        f"{setting(flag, 'teacher')}.")


@dataclass(frozen=True)
class Criterion:
    """One way to rank units. `compute(data)` returns head scores `(layers, heads)` and, when `data.neurons`
    and the criterion scores neurons, neuron scores `(layers, intermediate_size)` (else None); absent units may
    hold anything. `needs_gold`: it reads the pairs' gold; `neurons`: it can score FFN neurons (so it can plan
    `--flops` and `--latency`); `summary`: one line for --help and the docs."""

    name: str
    summary: str
    compute: Callable[[ScoringData], tuple]
    needs_gold: bool = False
    neurons: bool = False

    def score(self, data: ScoringData, *, flag: str = "method") -> UnitScores:
        """The criterion's `UnitScores`: -inf where the model lacks the unit; a non-finite score of a unit it
        has is one sentence (UserError); `flag`: the flag, recipe key or argument that chose it."""
        if self.needs_gold and data.gold is None:
            raise UserError(f"{data.source} has no {data.gold_name}, which {setting(flag, self.name)} needs; use "
                            f"{setting(flag, 'kl')}.", about=("method",))
        heads, neurons = self.compute(data)
        what = f"{self.name} scores"
        heads = _checked(heads, present_heads(data.model), what, "head")
        if neurons is not None:
            neurons = _checked(neurons, present_neurons(data.model), what, "neuron")
        targets = data.fisher_targets if self.name == "fisher" else None
        return UnitScores(heads, neurons, targets, data.pairs, method=self.name)


def _checked(scores, present: torch.Tensor, what: str, unit: str) -> torch.Tensor:
    scores = torch.as_tensor(np.asarray(scores, dtype=np.float64))
    check_scores(scores, ~present, what, unit=unit)
    return scores.masked_fill(~present, float("-inf"))


CRITERIA: dict[str, Criterion] = {}


def register_criterion(criterion: Criterion) -> Criterion:
    """Add `criterion` to the registry (replacing one of the same name): scan, prune and the run recipes
    accept its name from then on."""
    CRITERIA[criterion.name] = criterion
    return criterion


def criterion(name: str, *, flag: str = "criterion name", neurons: bool = False) -> Criterion:
    """The registered criterion `name`; `neurons`: it must score FFN neurons too (the budget prunes); `flag`: the
    flag, recipe key or argument that named it."""
    found = CRITERIA.get(name)
    if found is None:
        raise UserError(f"{setting(flag, quoted(name))} is unknown; choose one of: {', '.join(CRITERIA)}.")
    if neurons and not found.neurons:
        able = ", ".join(n for n, c in CRITERIA.items() if c.neurons)
        budget = "--flops/--latency plan" if caller(flag) == "flags" else "a FLOPs or latency budget plans"
        raise UserError(f"{setting(flag, name)} scores heads only, and {budget} heads and FFN neurons; "
                        f"use {able}.")
    return found


def head_importance(model, tokenizer, pairs: Pairs, *, method: str, batch_size: int = 64,
                    max_length: int | None = None, progress: Callable[[int], None] | None = None,
                    seed: int = 0, flag: str = "head_importance method") -> torch.Tensor:
    """Score every head of `model` on `pairs` with criterion `method`: `(num_layers, num_heads)` float32;
    `flag`: the flag, recipe key or argument that named `method`.

    `progress(n)` is called as pairs finish. Deterministic: no criterion samples and the model runs in eval
    mode, so `seed` changes nothing (it is kept for callers that record it) and the caller's random state is
    left alone."""
    check_callbacks("head_importance", progress=progress)
    check_model(model, "head_importance model")
    check_tokenizer(tokenizer, "head_importance tokenizer")
    batch_size, max_length = checked_arguments("head_importance", batch_size=batch_size, max_length=max_length)
    chosen = criterion(method, flag=flag)
    model.eval()
    data = ScoringData(model, encode(tokenizer, pairs, max_length=max_length, model=model), gold(pairs),
                       source=str(pairs.source), batch_size=batch_size,
                       progress=(lambda stage, n: progress(n)) if progress else None)
    return chosen.score(data, flag=flag).heads.float()


def ablation_scores(model, gold: np.ndarray | None, base: np.ndarray, masked: np.ndarray, *,
                    method: str) -> torch.Tensor:
    """`ablation` or `kl` head scores, float32, from ablation logits already computed (`evaluate.ablation`)."""
    flag = "ablation_scores method"
    data = ScoringData(model, None, gold, _ablation=(base, masked))
    return criterion(method, flag=flag).score(data, flag=flag).heads.float()


# --- the built-in criteria ------------------------------------------------------------------------


def _ablation(data: ScoringData):
    base, masked = data.ablation()
    return example_loss(masked, data.gold).mean(-1) - example_loss(base, data.gold).mean(), None


def _kl(data: ScoringData):
    base, masked = data.ablation()
    return example_change(base[None, None], masked).mean(-1), None


def _gradient(data: ScoringData):
    return gradient_table(data.gradients().per_pair, method="gradient"), None


def _fisher(data: ScoringData):
    grads = data.gradients()
    return grads.fisher_heads, grads.fisher_neurons if data.neurons else None


def gradient_scores(model, per_pair: np.ndarray, *, method: str) -> torch.Tensor:
    """`gradient` or `fisher` head scores, float32, from per-pair mask gradients (`fisher.mask_gradients`)."""
    return _checked(gradient_table(per_pair, method=method), present_heads(model), f"{method} scores", "head").float()


def gradient_table(per_pair: np.ndarray, *, method: str) -> np.ndarray:
    """From per-pair mask gradients `(pairs, layers, heads)`: `fisher`, the sum of their squares; `gradient`,
    the mean of their magnitudes, each layer divided by its L2 norm (absent heads have zero gradient)."""
    if method == "fisher":
        return (per_pair ** 2).sum(0)
    score = np.abs(per_pair).mean(0)
    norm = np.linalg.norm(score, axis=1, keepdims=True)
    return score / np.where(norm > 0, norm, 1.0)


def _entropy(data: ScoringData):
    return entropy_scores(data.model, data.encoded, batch_size=data.batch_size,
                          progress=data.stage("attention entropy")), None


@torch.inference_mode()
def entropy_scores(model, encoded: Encoded, *, batch_size: int = 64, progress=None) -> np.ndarray:
    """Minus the mean entropy of each head's attention rows over real (non-padding) query tokens, in passes of
    `batch_size` pairs at most, fewer where their maps would pass MAX_HELD_SCORES (`attention_batches`)."""
    total = torch.zeros(mask_shape(model), dtype=torch.float64)
    tokens = 0
    for rows in attention_batches(model, encoded, batch_size):
        tokens += _add_entropy(model, collate(encoded, rows), total)
        if progress:
            progress(len(rows))
    return -(total / max(tokens, 1)).numpy()


def _add_entropy(model, batch: dict, total: torch.Tensor) -> int:
    """Add one pass's attention entropies to `total` (layers, heads); its real query tokens. A function of its own
    so the pass's maps die when it returns: as loop variables they would live on through the next pass's forward."""
    device = next(model.parameters()).device
    batch = {k: v.to(device) for k, v in batch.items()}
    maps, _ = attention_weights(model, batch)
    real = batch["attention_mask"].bool()
    for layer, (part, a) in enumerate(zip(layer_parts(model), maps)):
        if a is not None:
            ent = -(a * torch.log(a.clamp_min(1e-12))).sum(-1)  # (batch, heads, queries)
            total[layer, part.head_ids] += ent.permute(1, 0, 2)[:, real].double().sum(-1).cpu()
    return int(real.sum())


for _c in (
    Criterion("ablation", "loss increase when the head alone is masked (exact; needs gold)", _ablation,
              needs_gold=True),
    Criterion("kl", "change of the output when the head alone is masked (exact; no gold)", _kl),
    Criterion("gradient", "mean |d loss / d mask|, per-layer normalised (Michel et al. 2019)", _gradient),
    Criterion("fisher", "Fisher information of head and neuron masks (Kwon et al. 2022)", _fisher, neurons=True),
    Criterion("entropy", "sharp attention ranks above diffuse (no gold)", _entropy),
):
    register_criterion(_c)
