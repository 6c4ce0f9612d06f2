"""Make a grader (the teacher) from a base model and graded pairs, driven by a recipe."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from headcut.batching import check_max_length, encode
from headcut.data_spec import read_spec
from headcut_grader.data import FILE_KEYS, Pairs, file_keys
from headcut.synthetic import is_synthetic
from headcut_grader.errors import UserError
from headcut.evaluate.ablation import process_state
from headcut.evaluate.predict import predict_logits
from headcut.evaluate.tasks import summary
from headcut.models import load_model, outline_if_present, resolve_source, save_model
from headcut_grader.ranges import check_callbacks, range_field, ranged
from headcut.recipes import check_recipe, to_dict
from headcut.run_folder import RunFolder, check_run_out, out_flag
from headcut.splits import split_by_query
from headcut.training import (LOSS_WEIGHT, TrainingRecipe, check_data_files, check_process_batch, check_steps,
                              check_task_keys, file_options, given_as, grades_fix, is_finished, other_dev_pairs,
                              query_index, removal, set_to, settings_from, train, trained_on, typed, worded)


@dataclass(frozen=True)
class FinetuneRecipe(TrainingRecipe):
    model: str = "minilm-l6"
    task: Literal["grades", "score"] = "grades"  # score: one output trained on the data's score column
    class_weighting: Literal["none", "sqrt", "balanced"] = "none"
    ordinal_weight: float = range_field(0.0, LOSS_WEIGHT)
    label_smoothing: float = ranged(0.0, 0.0, 1.0, high_open=True)
    # task=score sums these losses on the gold score (score_objective):
    mse_weight: float = range_field(1.0, LOSS_WEIGHT)  # squared error: the score's level and scale
    pairwise_weight: float = range_field(0.0, LOSS_WEIGHT)  # RankNet over title pairs of one query whose gold differs
    listwise_weight: float = range_field(0.0, LOSS_WEIGHT)  # ListNet over each query's titles

    def input_paths(self) -> list:
        return [self.model, *super().input_paths()]

    def check(self, where: str, *, named: frozenset = frozenset()) -> None:
        if self.train_data is None:
            raise UserError(f"{where}: no train_data; pass --train FILE (or --set train_data=FILE).")
        super().check(where, named=named)
        check_task_keys(self, TASK_KEYS, where, verb="trains", named=named)
        if self.task == "score" and not (self.mse_weight or self.pairwise_weight or self.listwise_weight):
            raise UserError(f"{where}: every loss weight of task=score is 0; set mse_weight, pairwise_weight or "
                            "listwise_weight above 0.", about=("mse_weight", "pairwise_weight", "listwise_weight"))
        base = outline_if_present(self.model, "model")
        if base is not None:  # before any file is read or model loaded, naming where max_length came from
            check_max_length(base.model, self.max_length, flag="max_length", where=where)


# The recipe keys only one task's loss reads: a recipe of the other task that sets them is refused.
TASK_KEYS = {"grades": ("grades", "class_weighting", "ordinal_weight", "label_smoothing"),
             "score": ("mse_weight", "pairwise_weight", "listwise_weight")}


def _read(recipe: TrainingRecipe, spec: str, rows: int | None, seed: int) -> Pairs:
    return read_spec(spec, rows=rows, seed=seed, task=getattr(recipe, "task", "grades"), **file_options(recipe),
                     grades_fix=grades_fix)


def load_data(recipe: TrainingRecipe) -> tuple[Pairs, Pairs]:
    check_data_files(recipe)
    train_pairs = _read(recipe, recipe.train_data, recipe.train_rows, recipe.seed)
    if recipe.dev_data is None:
        train_pairs, dev = split_by_query(train_pairs, 1 - recipe.dev_fraction, seed=recipe.seed)
        check_split(recipe, train_pairs, dev)
    else:
        dev = _read(recipe, recipe.dev_data, recipe.dev_rows, recipe.seed + 1)
    dev = dev.sample(recipe.dev_rows, seed=recipe.seed)
    check_dev_gold(recipe, dev)
    check_dev_apart(recipe, dev, train_pairs, "train_data")
    return train_pairs, dev


def check_dev_apart(recipe: TrainingRecipe, dev: Pairs, trained: Pairs, keys: str) -> None:
    """Dev pairs that are all among the pairs a run trains on (`trained`, read from the recipe `keys`) are refused:
    checkpoints would be chosen, and dev metrics reported, on training pairs. TrainingRecipe.check refuses a dev_data of
    train_data's or unlabeled_data's bytes before any file is read (training.check_dev_files_apart); this catches a
    copy saved another way (a BOM, other line ends, another format, some of its rows)."""
    if recipe.dev_data is None:  # a split of train_data by query: apart by construction
        return
    seen = set(zip(trained.queries, trained.titles))
    if not all(pair in seen for pair in zip(dev.queries, dev.titles)):
        return

    def say(name, how):  # worded (training.worded): a run names its keys as it does (data.dev)
        named = " and ".join(typed(name, how, key, getattr(recipe, key)) for key in keys.split())
        return (f"{typed(name, how, 'dev_data', recipe.dev_data)}: each of its {len(dev)} dev pairs is also among "
                f"the pairs the run trains on ({named}), so checkpoints would be chosen and dev metrics reported on "
                "training pairs; "
                f"{other_dev_pairs(name, how, 'dev pairs kept apart from those')}, or "
                f"{removal(name, how, 'dev_data', recipe.dev_data)} to hold out dev_fraction of {name('train_data')} "
                "by query.")

    raise worded("", say, about=("dev_data", *keys.split()))


def check_split(recipe: TrainingRecipe, train_pairs: Pairs, dev: Pairs) -> None:
    """A query split of train_data leaves pairs on both sides, or one sentence names the keys that made it (worded:
    a run names them as it does, data.train and teacher.dev_fraction)."""
    if len(train_pairs) and len(dev):
        return
    queries = len(train_pairs.query_groups()) + len(dev.query_groups())  # the split keeps each query whole
    side = "train" if len(dev) else "dev"

    def say(name, how):
        fraction, dev_pairs = name("dev_fraction"), f"pass dev pairs with {given_as(name, 'dev_data', 'FILE')}"
        fix = (f"{dev_pairs}, or train on pairs of two or more queries" if queries < 2 else
               f"{'lower' if side == 'train' else 'raise'} {fraction}, or {dev_pairs}")
        return (f"{typed(name, how, 'train_data', recipe.train_data)}: holding out {fraction}={recipe.dev_fraction} "
                f"of its {queries} {'query' if queries == 1 else 'queries'} (whole queries, as {name('dev_data')} "
                f"is unset) leaves no {side} pairs; {fix}.")

    raise worded("", say, about=("train_data", "dev_fraction"))


def check_dev_gold(recipe: TrainingRecipe, dev: Pairs) -> None:
    """Spearman, the select_metric that picks the best checkpoint, is undefined against one gold value (every
    checkpoint would read 0): dev pairs of a single grade or score are refused before training (worded: a run names
    its keys as it does)."""
    if recipe.select_metric != "spearman":
        return
    what, gold = gold_values(recipe, dev)
    if len(set(gold)) > 1:
        return

    def say(name, how):
        where = (typed(name, how, "dev_data", recipe.dev_data) if recipe.dev_data is not None else
                 f"the dev pairs held out of {typed(name, how, 'train_data', recipe.train_data)} "
                 f"({name('dev_fraction')}={recipe.dev_fraction})")
        return spearman_said(where, len(dev), what, gold[0], pairs="dev",
                             metric=f"Spearman ({name('select_metric')})", so="no checkpoint could be chosen on it",
                             fix=f"with {given_as(name, 'dev_data', 'FILE')}, or "
                                 f"{set_to(name, how, 'select_metric', 'loss')}")

    raise worded("", say, about=("dev_data",) if recipe.dev_data is not None else ("train_data", "dev_fraction"))


def spearman_undefined(where: str, rows: int, what: str, value: float, *, pairs: str, so: str, fix: str,
                       metric: str = "Spearman") -> UserError:
    """The refusal of `rows` `pairs` pairs (dev, test) that all share one gold `value`, a `what` (grade or score),
    against which Spearman is undefined: led by `where` (the file, flag or key that named them), saying what that
    stops (`so`) and how else to fix it (`fix`, after 'pass PAIRS pairs of two or more WHATs')."""
    return UserError(spearman_said(where, rows, what, value, pairs=pairs, so=so, fix=fix, metric=metric))


def spearman_said(where: str, rows: int, what: str, value: float, *, pairs: str, so: str, fix: str,
                  metric: str = "Spearman") -> str:
    """spearman_undefined's sentence."""
    return (f"{where}: {one_gold(rows, pairs, what, value)}; {metric} against one {what} is undefined, so {so}; pass "
            f"{pairs} pairs of two or more {what}s {fix}.")


def one_gold(rows: int, pairs: str, what: str, value: float) -> str:
    """'all 12 dev pairs have grade 3', or 'the one dev pair has grade 3': `rows` `pairs` pairs of one gold value."""
    have = f"all {rows} {pairs} pairs have" if rows > 1 else f"the one {pairs} pair has"
    return f"{have} {what} {value:g}"


def gold_values(recipe: TrainingRecipe, pairs: Pairs) -> tuple[str, list]:
    """What the recipe's task calls the pairs' gold ('grade' or 'score'), and each pair's gold as the data spells it."""
    if getattr(recipe, "task", "grades") == "score":
        return "score", list(pairs.score_array())
    return "grade", [pairs.grades[label] for label in pairs.label_array()]


def check_train_gold(recipe: FinetuneRecipe, train_pairs: Pairs) -> None:
    """Training pairs of a single grade or score teach a grader to give every pair that one value: refused before
    training, as dev pairs of one gold value are (check_dev_gold; worded: a run names its keys as it does)."""
    what, gold = gold_values(recipe, train_pairs)
    if len(set(gold)) > 1:
        return

    def say(name, how):
        return (f"{typed(name, how, 'train_data', recipe.train_data)}: "
                f"{one_gold(len(train_pairs), 'training', what, gold[0])}, "
                f"so the grader would learn to give every pair that {what}; train on pairs of two or more {what}s.")

    raise worded("", say, about=("train_data",))


def selection_pairs(recipe: TrainingRecipe) -> Pairs | None:
    """The pairs of a file that a training recipe picks its best checkpoint on (load_data's dev pairs);
    None when they are a synthetic draw or a query split of the training pairs."""
    if recipe.dev_data is None or is_synthetic(recipe.dev_data):
        return None
    return _read(recipe, recipe.dev_data, recipe.dev_rows, recipe.seed + 1).sample(recipe.dev_rows, seed=recipe.seed)


def recorded_recipe(meta: dict, *, where: str = "headcut.json") -> FinetuneRecipe | None:
    """The part of the recipe an artifact's headcut.json (`where`) records that says which pairs chose its best
    checkpoint (for selection_pairs), or None when it records no dev data; its keys are checked as a recipe
    file's are (an edited record is one sentence naming the key)."""
    from headcut.recipes import from_dict

    recorded = meta.get("recipe") if isinstance(meta, dict) else None
    if not isinstance(recorded, dict) or not recorded.get("dev_data"):
        return None
    keys = ("dev_data", "dev_rows", "seed", "task", "grades", *FILE_KEYS)
    return from_dict(FinetuneRecipe, {k: recorded[k] for k in keys if k in recorded}, where=f"{where}: recipe",
                     checked=False)


def dev_record(recipe: TrainingRecipe, dev: Pairs) -> dict:
    """What an artifact records of its dev pairs: a resolved path only for a file, none for a synthetic
    draw ('synthetic:SEED') or a split held out of the training pairs."""
    path = None if recipe.dev_data is None or is_synthetic(recipe.dev_data) else str(Path(recipe.dev_data).resolve())
    return {**dev.provenance(), "path": path, **file_keys(recipe)}


def class_weights(labels: np.ndarray, num_labels: int, how: str) -> torch.Tensor | None:
    if how == "none":
        return None
    counts = np.bincount(labels, minlength=num_labels).astype(np.float64) + 1
    w = (counts.sum() / counts) ** (0.5 if how == "sqrt" else 1.0)
    return torch.tensor(w / (w * counts / counts.sum()).sum(), dtype=torch.float32)  # mean weight 1 over data


def grade_loss(logits, labels, *, weights=None, ordinal_weight=0.0, label_smoothing=0.0):
    """Cross-entropy, plus `ordinal_weight` x squared error of the expected label (rank-aware)."""
    loss = F.cross_entropy(logits, labels, weight=None if weights is None else weights.to(logits.device),
                           label_smoothing=label_smoothing)
    if ordinal_weight:
        values = torch.arange(logits.shape[1], device=logits.device, dtype=logits.dtype)
        expected = logits.softmax(-1) @ values
        loss = loss + ordinal_weight * ((expected - labels.to(logits.dtype)) ** 2).mean()
    return loss


def score_loss(logits, scores):
    """Mean squared error of a one-score model's output `(batch, 1)` against gold scores `(batch,)`."""
    return F.mse_loss(logits[:, 0], scores.to(logits.dtype))


def pairwise_loss(logits, scores, query_ids):
    """RankNet (Burges et al., 2005): over every pair of titles of one query in the batch whose gold scores
    differ, the logistic loss of the model's score difference taken in the gold order. Logits (B, 1), scores and
    query_ids (B,). 0 (with a gradient) when the batch holds no such pair."""
    s = logits.float()[:, 0]
    i, j = torch.triu_indices(len(s), len(s), offset=1, device=s.device)
    keep = (query_ids[i] == query_ids[j]) & (scores[i] != scores[j])
    if not bool(keep.any()):
        return s.sum() * 0.0
    i, j = i[keep], j[keep]
    order = torch.sign(scores[i] - scores[j]).to(s.dtype)
    return F.softplus(-order * (s[i] - s[j])).mean()


def listwise_loss(logits, scores, query_ids):
    """ListNet top-one (Cao et al., 2007): for each query of the batch with two or more titles, the cross-entropy
    between the softmax of its gold scores and the softmax of the model's scores over those titles; the mean over
    such queries. 0 (with a gradient) when no query has two titles in the batch."""
    s = logits.float()[:, 0]
    losses = []
    for q in torch.unique(query_ids):
        rows = query_ids == q
        if int(rows.sum()) > 1:
            target = scores[rows].float().softmax(-1)
            losses.append(-(target * s[rows].log_softmax(-1)).sum())
    return torch.stack(losses).mean() if losses else s.sum() * 0.0


def score_objective(recipe, logits, scores, query_ids):
    """The recipe's weighted sum of score_loss, pairwise_loss and listwise_loss on the gold scores."""
    total = recipe.mse_weight * score_loss(logits, scores) if recipe.mse_weight else 0.0
    if recipe.pairwise_weight:
        total = total + recipe.pairwise_weight * pairwise_loss(logits, scores, query_ids)
    if recipe.listwise_weight:
        total = total + recipe.listwise_weight * listwise_loss(logits, scores, query_ids)
    return total


def ranks_queries(recipe) -> bool:
    """Whether a loss compares titles of one query, so batches must keep each query's pairs together."""
    return recipe.task == "score" and bool(recipe.pairwise_weight or recipe.listwise_weight)


def recipe_hash(recipe) -> str:
    return _digest(to_dict(recipe))


def run_hash(recipe, *read) -> str:
    """What a run folder's run is: its recipe and the content of what it read (pairs fingerprints, weights hashes),
    so a run whose files changed is not resumed onto other data."""
    return _digest([to_dict(recipe), *read])


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:12]


def _loss_fn(recipe: FinetuneRecipe, train_pairs: Pairs, queries: np.ndarray | None):
    """loss(model, batch, rows) of the recipe's task: grade_loss, or score_objective on the gold scores (`queries`:
    each pair's query index, when a ranking loss reads it)."""
    if recipe.task == "score":
        scores = torch.tensor(train_pairs.score_array(), dtype=torch.float32)
        ids = None if queries is None else torch.as_tensor(queries)
        return lambda m, batch, rows: score_objective(recipe, m(**batch).logits, scores[rows].to(m.device),
                                                      None if ids is None else ids[rows].to(m.device))
    labels = torch.tensor(train_pairs.label_array())
    weights = class_weights(train_pairs.label_array(), len(recipe.grades), recipe.class_weighting)

    def loss_fn(m, batch, rows):
        logits = m(**batch).logits
        return grade_loss(logits, labels[rows].to(logits.device), weights=weights,
                          ordinal_weight=recipe.ordinal_weight, label_smoothing=recipe.label_smoothing)

    return loss_fn


def finetune(recipe: FinetuneRecipe, out: str | Path, *, overwrite: bool = False, progress=None,
             stop_after_steps: int | None = None, names: str = "arguments") -> dict:
    """Train, keep the best dev checkpoint, write it to `out` as an artifact. Resumable: rerun the same
    call after an interruption and it continues from `out`.partial/checkpoint. `names`: who called, so that a refusal
    of `out` names it as they did (run_folder.out_flag: out, overwrite=True; `headcut finetune`: --out, --overwrite)."""
    check_callbacks("finetune", progress=progress)
    out, flag = Path(out), out_flag(names, out)
    check_recipe(recipe, FinetuneRecipe, "finetune recipe")
    check_run_out(out, overwrite=overwrite, inputs=recipe.input_paths(), flag=flag)
    check_process_batch(recipe.batch_size, process_state().num_processes)  # known before data or model is read
    resolve_source(recipe.model, flag="model")  # a missing model is said before the data is read
    train_pairs, dev = load_data(recipe)
    check_train_gold(recipe, train_pairs)
    check_steps(len(train_pairs), settings_from(recipe), trained_on(recipe))
    score = recipe.task == "score"
    loaded = load_model(recipe.model, num_labels=1 if score else len(recipe.grades), seed=recipe.seed, flag="model")
    model, tokenizer = loaded.model, loaded.tokenizer
    check_max_length(model, recipe.max_length, flag="max_length")  # the recipe's key, not encode's --max-length
    encoded = encode(tokenizer, train_pairs, max_length=recipe.max_length, model=model)
    dev_encoded = encode(tokenizer, dev, max_length=recipe.max_length, model=model)
    # opened only once data and model load, so a bad file or model leaves no half-made run folder behind
    read = (loaded.weights_hash, train_pairs.fingerprint, dev.fingerprint)
    folder = RunFolder.open(out, run_hash(recipe, *read), {"recipe": to_dict(recipe)}, overwrite=overwrite, flag=flag)
    queries = query_index(train_pairs) if ranks_queries(recipe) else None  # ranking losses batch by query
    loss_fn = _loss_fn(recipe, train_pairs, queries)

    def evaluate_fn(m):
        logits = predict_logits(m, tokenizer, dev, encoded=dev_encoded)
        return summary(logits, dev, task=recipe.task)

    meta = {
        "kind": "finetune",
        "task": recipe.task,
        **({"activation": "identity"} if score else {}),
        "grades": list(recipe.grades),
        "max_length": recipe.max_length,
        "base_model": str(recipe.model),
        "recipe": to_dict(recipe),
        "train_data": train_pairs.provenance(),
        "dev_data": dev_record(recipe, dev),
    }

    def save_best(m, metrics):
        loaded.model = m
        save_model(loaded, folder.best, meta={**meta, "dev_metrics": metrics}, overwrite=True)

    settings = settings_from(recipe)
    state = train(model, encoded, settings=settings, loss_fn=loss_fn, evaluate_fn=evaluate_fn, work_dir=folder.path,
                  save_best=save_best, progress=progress, stop_after_steps=stop_after_steps,
                  query_ids=queries)
    result = {"state": state.__dict__, "finished": is_finished(state, len(encoded), settings),
              "work_dir": str(folder.path),
              "examples_per_second": state.examples / max(state.train_seconds, 1e-9),
              "cpu_per_wall": state.cpu_seconds / max(state.train_seconds, 1e-9)}
    if result["finished"]:
        training = {k: result[k] for k in ("examples_per_second", "cpu_per_wall")} | {
            "steps": state.step, "best_step": state.best_step, "history": state.history,
            "train_seconds": state.train_seconds}
        best_meta = folder.publish({"training": training})
        result["out"] = str(out)
        result["dev_metrics"] = best_meta["dev_metrics"]
    return result
