"""A small, resumable training loop on accelerate, shared by finetune and distill.

The same code runs on CPU, one GPU, or several GPUs/machines under `accelerate launch`. Batches hold
pairs of similar length (shuffled per epoch from a seeded order), so a resumed run replays exactly the
batches the interrupted one would have seen.
"""
from __future__ import annotations

import json
import math
import pickle
import random
import shutil
import time
import zipfile
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Literal

import numpy as np
import torch
from safetensors import SafetensorError

from headcut.batching import Encoded, collate
from headcut.process_group import close_at_exit
from headcut.synthetic import is_synthetic, synthetic_seed
from headcut.weight_files import broken_file, header_shapes
from headcut.data_spec import check_file_keys, count_spec
from headcut.recipes import CommandLine, read_from
from headcut_grader.data import DEFAULT_GRADES, FILE_KEYS, file_keys
from headcut_grader.errors import UserError, WordedError, caller, lead_of, setting
from headcut_grader.files import PAIRS_FILE, file_hash, folder_spelled, write_fault, write_text
from headcut_grader.ranges import MAX_BATCH, SEED, SEQ_LEN, Range, check_callbacks, check_ranges, range_field, ranged
from headcut_grader.validation import absent, read_small_text


# A recipe's batch_size is the global batch (split_batches: accelerate launch gives each of N processes a
# ceil(batch_size / N) share of each batch), so as it is read it may be up to GLOBAL_BATCH; the share one process
# forwards must stay within every batch setting's bound (ranges.MAX_BATCH), which check_process_batch checks once the
# process count is known, when the run starts. On one process that is batch_size <= MAX_BATCH.
GLOBAL_BATCH = Range(1, 65_536)
# what a batch past its bound calls for
LARGER_STEP = "for more pairs per optimizer step, raise gradient_accumulation (each step is batch_size x " \
              "gradient_accumulation pairs)"
# A loss term's weight: every *_weight key of finetune's and distill's recipes reads this one (0 turns the term off)
LOSS_WEIGHT = Range(0.0, 100.0)


@dataclass(frozen=True)
class LoopSettings:
    """Each numeric field's allowed range is declared with it (`ranged`) and checked when a recipe is read."""
    epochs: float = ranged(2.0, 0.0, 1000.0, low_open=True)
    # each process's share of it, ceil(batch_size / processes), is checked against MAX_BATCH as the run starts
    # (check_process_batch), so on one process (without accelerate launch) batch_size stops at MAX_BATCH
    batch_size: int = range_field(32, GLOBAL_BATCH, beyond=LARGER_STEP)  # the global batch; per process at most 1024
    learning_rate: float = ranged(5e-5, 0.0, 1.0, low_open=True)
    warmup_ratio: float = ranged(0.1, 0.0, 1.0)  # share of the steps spent warming up
    weight_decay: float = ranged(0.01, 0.0, 1.0)
    gradient_accumulation: int = ranged(1, 1, 1024)
    mixed_precision: Literal["no", "fp16", "bf16"] = "no"  # bf16/fp16 on accelerators that support them
    eval_every: int = ranged(200, 1)
    checkpoint_every: int = ranged(200, 1)
    early_stopping_patience: int = ranged(0, 0)  # evaluations without improvement before stopping; 0 = never
    select_metric: Literal["spearman", "accuracy", "macro_f1", "loss"] = "spearman"  # "loss" is minimised
    seed: int = range_field(0, SEED)
    max_grad_norm: float = ranged(1.0, 0.0, low_open=True)
    ema_decay: float = ranged(0.0, 0.0, 1.0, high_open=True)  # >0: evaluate and save a moving average of the weights


def grades_fix(grade: int, grades: tuple) -> str:
    """What a data file's grade outside the recipe's grades calls for; the example adds that grade to them."""
    example = ",".join(map(str, sorted({*grades, grade})))
    return f"fix the row, or name the grades the file uses with the recipe key 'grades' (e.g. --set grades=[{example}])"


@dataclass(frozen=True)
class TrainingRecipe(LoopSettings):
    """The fields every training recipe shares: the loop settings, and the data to train on.

    FinetuneRecipe and DistillRecipe extend it; a subclass may redefine a field to change its default.
    """
    train_data: str | None = None  # a file, or "synthetic"
    dev_data: str | None = None  # a file, or "synthetic"; None: hold out dev_fraction of train by query
    preset: str | None = None  # a data preset (column names, format), e.g. homedepot
    query_col: str | None = None  # the data files' columns, where they differ from the preset's
    title_col: str | None = None
    label_col: str | None = None  # the grade column (task grades) or the score column (task score)
    train_rows: int | None = ranged(None, 1)
    dev_rows: int | None = ranged(1000, 1)
    dev_fraction: float = ranged(0.1, 0.0, 1.0, low_open=True, high_open=True)
    grades: tuple[int, ...] = DEFAULT_GRADES
    max_length: int = range_field(64, SEQ_LEN)

    def input_paths(self) -> list:
        """Files and folders the run reads (None or a built-in name where unset): none may be its output; the recipe
        file too, where load_recipe read it (recipes.read_from), so no out replaces it, whoever calls."""
        return [read_from(self), self.train_data, self.dev_data]

    def check(self, where: str, *, named: frozenset = frozenset()) -> None:
        """Every rule that reads keys together; `named`: the keys a --set or a run's section gives (is_set)."""
        if self.train_data is None:
            raise UserError(f"{where}: no train_data; pass --set train_data=FILE.")
        check_ranges(self, where)
        if len(self.grades) < 2 or len(set(self.grades)) != len(self.grades):
            raise UserError(f"{where}: key 'grades' is {list(self.grades)}; name two or more different grades, "
                            "e.g. [1, 2, 3, 4, 5].", about=("grades",))
        check_dev_files_apart(self, where)
        check_dev_fraction(self, where, named)
        check_file_keys(self, where, {key: getattr(self, key, None) for key in DATA_KEYS}, file_keys_given(self, named))
        check_fits(self, where)

    def most_pairs(self) -> tuple[int, Callable] | None:
        """The most pairs the run can train on and the keys that say so (worded by their names, name(key) -> str),
        where the recipe's keys bound them (train_rows); None where only the files do (check_fits counts them)."""
        rows = self.train_rows
        return None if rows is None else (rows, lambda name: f"{name('train_rows')}={rows}")


def worded(where: str, say: Callable[[Callable[[str], str], Callable[[str], str]], str], *,
           about: tuple[str, ...]) -> WordedError:
    """A recipe check's refusal of keys `about`, led by `where` and worded by `say(name, how)` (WordedError): a caller
    that gave keys under its own names (a run's [data]: data.dev for dev_data) words it again with its own."""
    return WordedError(lead_of(where), say, about=about)


DATA_KEYS = ("train_data", "dev_data", "unlabeled_data")  # the recipe keys that name pairs to read


TRAINED_KEYS = ("train_data", "unlabeled_data")  # the recipe keys that name pairs a run trains on


def check_dev_files_apart(recipe: TrainingRecipe, where: str) -> None:
    """dev_data is not pairs the run trains on (same_data: one file, a copy of its bytes, one synthetic draw), said
    before any file is read or model loaded; finetune.check_dev_apart compares the pairs read, for other copies."""
    for key in TRAINED_KEYS:
        trained = getattr(recipe, key, None)
        if recipe.dev_data is not None and trained is not None and same_data(trained, recipe.dev_data):
            def say(name, how, key=key):
                return (f"{typed(name, how, 'dev_data', recipe.dev_data)} holds the pairs of "
                        f"{mentioned(name, how, key, getattr(recipe, key))}, so "
                        f"checkpoints would be chosen and dev metrics reported on pairs it trains on; "
                        f"{other_dev_pairs(name, how, 'other pairs')} (synthetic:1 for another synthetic draw), or "
                        f"{removal(name, how, 'dev_data', recipe.dev_data, it='it')} to hold out dev_fraction of "
                        f"{name('train_data')} by query.")

            raise worded(where, say, about=("dev_data", key))


def other_dev_pairs(name, how, pairs: str) -> str:
    """How a refusal of dev_data (worded: name(key), how(key)) asks for `pairs` there: 'set dev_data to PAIRS', 'set
    data.dev to PAIRS in the run file or by --set', 'pass PAIRS to --dev', on a command line without --dev 'pass PAIRS
    with --set dev_data=FILE'."""
    dev = name("dev_data")
    if caller(dev) == "flags":
        return f"pass {pairs} to {dev}"
    if by_set(how, "dev_data"):
        return f"pass {pairs} with --set {dev}=FILE"
    return f"set {dev} to {pairs}{how('dev_data')}"


def by_set(how, key: str) -> bool:
    """Whether a refusal (worded: how(key)) is a command line's, where `key` is changed by --set KEY=VALUE."""
    return isinstance(how(key), CommandLine)


def typed(name, how, key: str, value) -> str:
    """`key` holding `value` as a refusal (worded: name(key), how(key)) leads with it, as its user gave it: '--dev F'
    by a flag, '--set dev_data=F' by --set on a command line, 'dev_data F' from a recipe or Python, 'data.dev F' in a
    run."""
    said = name(key)
    return f"--set {said}={value}" if how(key) is CommandLine.GIVEN_BY_SET else f"{said} {value}"


def mentioned(name, how, key: str, value) -> str:
    """`key` holding `value` as a refusal (worded: name(key), how(key)) names it after its lead: as its user typed it
    where that is '--set train_data=F' on a command line, else by its name (train_data, --train, data.train)."""
    return typed(name, how, key, value) if how(key) is CommandLine.GIVEN_BY_SET else name(key)


def removal(name, how, key: str, value, *, it: str = "") -> str:
    """How a refusal (worded: name(key), how(key)) asks to take `key` (holding `value`) away: 'drop --set
    dev_data=F' where its user typed that, else 'remove ' and `it` or the key as named ('remove --dev', 'remove
    dev_data' from a recipe file, 'remove data.dev' in a run)."""
    if how(key) is CommandLine.GIVEN_BY_SET:
        return f"drop {typed(name, how, key, value)}"
    return f"remove {it or name(key)}"


def given_as(name, key: str, value: str) -> str:
    """How a refusal (worded: name(key)) says to give `key` a `value`: '--set dev_data=FILE', '--set data.dev=FILE' in
    a run, '--dev FILE' where a command's flag gave it."""
    said = name(key)
    return f"{said} {value}" if caller(said) == "flags" else f"--set {said}={value}"


def set_to(name, how, key: str, value: str) -> str:
    """How a refusal (worded: name(key), how(key)) asks for `key`=`value`: 'pass --set select_metric=loss' on a
    command line (or 'pass --flag VALUE' where a flag gave it), 'set teacher.select_metric=loss in the run file or by
    --set' in a run, 'set select_metric=loss' from Python."""
    said = name(key)
    if caller(said) == "flags" or by_set(how, key):
        return f"pass {given_as(name, key, value)}"
    return f"set {said}={value}{how(key)}"


def check_data_files(recipe) -> None:
    """Every data file a recipe names exists, and every synthetic:SEED has a whole-number seed, or one sentence names
    its key (not only the path)."""
    for key in DATA_KEYS:
        spec = getattr(recipe, key, None)
        if spec is not None and is_synthetic(spec):
            synthetic_seed(spec, name=key)  # synthetic:abc, said by its key
        # p.tsv/: Path() drops the /
        elif spec is not None and (problem := folder_spelled(spec, key, reading=True, what=PAIRS_FILE)):
            raise UserError(problem)
        elif spec is not None and not Path(spec).exists():
            offline = f" (or pass --set {key}=synthetic)" if key != "unlabeled_data" else ""
            raise UserError(f"{key}={spec}: {absent(spec, f'no such file; check the path{offline}')}.")


def same_data(a: str, b: str) -> bool:
    """Whether two data specs name the same pairs: one synthetic seed ('synthetic' is seed 0), one file, or two
    files of the same bytes (a copy). A malformed seed names no pairs: check_data_files names it by its key."""
    if is_synthetic(a) or is_synthetic(b):
        seed = _seed_or_none(a) if is_synthetic(a) and is_synthetic(b) else None
        return seed is not None and seed == _seed_or_none(b)
    if not (on_disk(a) and on_disk(b)):
        return False
    first, second = Path(a), Path(b)
    if first.resolve() == second.resolve():
        return True
    try:
        return first.stat().st_size == second.stat().st_size and file_hash(first) == file_hash(second)
    except OSError:  # a missing file is named by check_data_files
        return False


def on_disk(spec: str) -> bool:
    """Whether data spec `spec` is a file a check may read before check_data_files has named a bad one by its key:
    one that is there, not spelled as a folder (p.tsv/, which Path() reads as p.tsv)."""
    return not folder_spelled(spec, "", reading=True) and Path(spec).is_file()


def _seed_or_none(spec: str) -> int | None:
    try:
        return synthetic_seed(spec)
    except UserError:
        return None


def is_set(recipe, key: str, named: frozenset) -> bool:
    """Whether a recipe sets `key`: to a value other than its default, or at all by a --set or a run's section
    (`named`), whose value the recipe would ignore where the key does not apply. A recipe file's key at the
    default value is not set: a shared recipe may list it for another use of the file."""
    return key in named or getattr(recipe, key) != next(f.default for f in fields(recipe) if f.name == key)


def is_given(recipe, key: str, named: frozenset, *, over: tuple = ()) -> bool:
    """Whether the user gives `key` (is_set), where a recipe file's own value is let be once the user replaces a
    key it belongs to (one of `over`): a shared recipe names its dev_fraction, preset or scan draws for its own
    data or experiments, and a --dev, a run's data.* or --set scan.experiments replaces those. A key in `named`
    is always given."""
    return key in named or (is_set(recipe, key, frozenset()) and not any(k in named for k in over))


def check_task_keys(recipe, task_keys: dict, where: str, *, verb: str, named: frozenset = frozenset()) -> None:
    """A key only the other task's losses read is refused when set (is_set), so no setting is silently ignored;
    so is a grades metric for a one-score model. `task_keys`: {task: its keys}; `verb`: what the recipe does."""
    other = "score" if recipe.task == "grades" else "grades"
    for key in task_keys[other]:
        if is_set(recipe, key, named):
            raise UserError(f"{where}: key '{key}' applies to task={other} only, and this recipe {verb} "
                            f"task={recipe.task}; remove it (or set task={other}).", about=(key,))
    if recipe.task == "score" and recipe.select_metric in ("accuracy", "macro_f1"):
        raise UserError(f"{where}: select_metric={recipe.select_metric} needs grades, and task=score has one "
                        "output; use spearman or loss.", about=("select_metric",))


def check_dev_fraction(recipe: TrainingRecipe, where: str, named: frozenset) -> None:
    """dev_fraction splits train_data only where dev_data is unset: set (is_set) beside dev_data, it would be ignored.
    A dev_data given over a recipe file (--dev, a run's data.dev) replaces that file's split, so the file's own
    dev_fraction is let be."""
    if recipe.dev_data is None or not is_given(recipe, "dev_fraction", named, over=("dev_data",)):
        return

    def say(name, how):
        dev = name("dev_data")
        return (f"key '{name('dev_fraction')}' ({recipe.dev_fraction}) holds out a share of {name('train_data')}'s "
                f"queries as dev pairs only when {dev} is unset, and {dev} is {recipe.dev_data}; "
                f"{removal(name, how, 'dev_fraction', recipe.dev_fraction)}, or "
                f"{removal(name, how, 'dev_data', recipe.dev_data)} to hold out that split.")

    raise worded(where, say, about=("dev_fraction", "dev_data"))


def file_keys_given(recipe: TrainingRecipe, named: frozenset) -> set:
    """The file keys (preset, columns) a recipe gives for its data (is_set): a recipe file's own are not, where its data
    keys are given over it (--train, a run's data), as a shared recipe names its preset for its own files."""
    return {key for key in FILE_KEYS if is_given(recipe, key, named, over=DATA_KEYS)}


def file_options(recipe: TrainingRecipe) -> dict:
    """How a recipe's data files are read (headcut_grader.readers.read_pairs): its preset, columns and grades, and
    messages that name recipe keys, not flags."""
    return dict(file_keys(recipe), grades=recipe.grades, keys="")


@dataclass
class LoopState:
    step: int = 0
    best_value: float | None = None
    best_step: int = -1
    bad_evals: int = 0
    history: list = field(default_factory=list)
    train_seconds: float = 0.0
    cpu_seconds: float = 0.0
    examples: int = 0


def epoch_batches(encoded: Encoded, batch_size: int, *, seed: int, epoch: int) -> list[np.ndarray]:
    """Length-bucketed batches in a seeded random order: little padding, still shuffled."""
    rng = random.Random(seed * 1000 + epoch)
    rows = list(range(len(encoded)))
    rng.shuffle(rows)
    lengths = encoded.lengths()
    chunk = batch_size * 50  # sort within chunks of 50 batches: close lengths, but batches still vary
    batches = []
    for start in range(0, len(rows), chunk):
        part = sorted(rows[start : start + chunk], key=lambda i: lengths[i])
        batches += [np.asarray(part[i : i + batch_size]) for i in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches


def query_index(pairs) -> np.ndarray:
    """The query index of each pair of a Pairs (the order of first appearance): query_batches' input."""
    ids = np.empty(len(pairs), dtype=np.int64)
    for q, rows in enumerate(pairs.query_groups()):
        ids[rows] = q
    return ids


def query_batches(query_ids: np.ndarray, batch_size: int, *, seed: int, epoch: int) -> list[np.ndarray]:
    """Batches that keep each query's rows together (queries in a seeded random order, a query split only at a
    batch's end): what a loss over titles of one query (margin-MSE, RankNet, ListNet) needs. As many batches as
    epoch_batches."""
    rng = random.Random(seed * 1000 + epoch)
    queries = sorted(set(int(q) for q in query_ids))
    rng.shuffle(queries)
    rank = np.empty(max(queries) + 1 if queries else 0, dtype=np.int64)
    rank[queries] = np.arange(len(queries))
    order = np.argsort(rank[np.asarray(query_ids, dtype=np.int64)], kind="stable")
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def _better(value, best, metric):
    if best is None:
        return True
    return value < best if metric == "loss" else value > best


@dataclass
class _Run:
    """What `train` sets up once: accelerate's objects and the parameters it steps."""
    accelerator: object
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: object
    params: list  # every trainable parameter (clipped together)
    extra_params: list  # extra modules' parameters: their gradients are averaged here, not by DDP
    total_steps: int
    average: "WeightAverage | None" = None  # ema_decay > 0: what evaluation and save_best read


class WeightAverage:
    """An exponential moving average of a model's trainable weights (Polyak averaging), updated after each
    optimizer step with decay min(ema_decay, (1 + n) / (10 + n)) at update n, so early updates are not
    dominated by the initial weights. Checkpointed with the run (state_dict), so a resumed run averages on."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay, self.updates = decay, 0
        self.shadow = {name: p.detach().clone() for name, p in _trained(model)}

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        self.updates += 1
        decay = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for name, p in _trained(model):
            self.shadow[name].lerp_(p.detach(), 1 - decay)

    @contextmanager
    def swapped_in(self, model: torch.nn.Module):
        """`model` holds the averaged weights inside the block, its own again after it."""
        own = {name: p.detach().clone() for name, p in _trained(model)}
        _load(model, self.shadow)
        try:
            yield model
        finally:
            _load(model, own)

    def state_dict(self) -> dict:
        return {"updates": self.updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict) -> None:
        self.updates = int(state["updates"])
        for name, value in state["shadow"].items():
            self.shadow[name].copy_(value)


def _trained(model: torch.nn.Module):
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


@torch.no_grad()
def _load(model: torch.nn.Module, weights: dict) -> None:
    for name, p in _trained(model):
        p.copy_(weights[name])


CHECKPOINT = "checkpoint"  # the folder in `work_dir` that a rerun resumes from


def train(
    model,
    encoded: Encoded,
    *,
    settings: LoopSettings,
    loss_fn: Callable[[torch.nn.Module, dict, np.ndarray], torch.Tensor],
    evaluate_fn: Callable[[torch.nn.Module], dict],
    work_dir: Path,
    save_best: Callable[[torch.nn.Module, dict], None],
    extra_modules: list[torch.nn.Module] = (),
    progress: Callable[[dict], None] | None = None,
    stop_after_steps: int | None = None,
    query_ids: np.ndarray | None = None,
) -> LoopState:
    """Train `model`; `loss_fn(model, batch, rows)` returns the loss, `evaluate_fn(model)` a metrics dict.

    Checkpoints land in `work_dir/checkpoint` every `checkpoint_every` steps; calling again with the same
    `work_dir` resumes from there. `save_best` is called with the model whenever the selected metric improves.
    `stop_after_steps` stops early (used by tests to simulate an interruption). `query_ids` (one per row):
    batches keep each query's rows together (query_batches) instead of bucketing by length.
    """
    check_callbacks("train", progress=progress)
    run = _setup(model, settings, extra_modules, total_steps(len(encoded), settings))
    ckpt = work_dir / CHECKPOINT
    state = _resume(run.accelerator, ckpt, model=run.accelerator.unwrap_model(run.model))
    per_epoch = math.ceil(len(encoded) / settings.batch_size)
    micro_total = micro_batches(len(encoded), settings)
    micro = state.step * settings.gradient_accumulation
    clock = _Clock()
    stop = is_finished(state, len(encoded), settings)  # a run resumed after it stopped early stays stopped
    while micro < micro_total and not stop:
        epoch, offset = divmod(micro, per_epoch)
        batches = (epoch_batches(encoded, settings.batch_size, seed=settings.seed, epoch=epoch) if query_ids is None
                   else query_batches(query_ids, settings.batch_size, seed=settings.seed, epoch=epoch))
        for rows in batches[offset:]:
            if micro >= micro_total:
                break
            loss = _micro_step(run, encoded, rows, loss_fn, settings)
            micro += 1
            state.examples += len(rows)
            if micro % settings.gradient_accumulation:
                continue
            state.step += 1
            if run.average is not None:
                run.average.update(run.accelerator.unwrap_model(run.model))
            if progress:
                progress({"step": state.step, "total": run.total_steps, "loss": loss.item()})
            last = micro >= micro_total
            if state.step % settings.eval_every == 0 or last:
                stop = _evaluate(run, state, settings, evaluate_fn, save_best, progress)
            if state.step % settings.checkpoint_every == 0 or last or stop:
                clock.add_to(state)
                _checkpoint(run.accelerator, ckpt, state)
            if stop or (stop_after_steps is not None and state.step >= stop_after_steps):
                stop = True
                break
    run.accelerator.wait_for_everyone()
    return state


def _setup(model, settings: LoopSettings, extra_modules, steps: int) -> _Run:
    """Seed, accelerate, AdamW (no decay on biases and norms) and a linear warm-up / decay schedule."""
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration, set_seed

    set_seed(settings.seed)
    # Each batch is split across the processes (split_batches: the scheduler steps once per step), so
    # `batch_size` is the global batch and N processes follow the one-process trajectory N times faster.
    accelerator = Accelerator(
        mixed_precision=settings.mixed_precision, gradient_accumulation_steps=settings.gradient_accumulation,
        cpu=not torch.cuda.is_available(), dataloader_config=DataLoaderConfiguration(split_batches=True),
    )
    close_at_exit()
    check_process_batch(settings.batch_size, accelerator.num_processes)  # a caller of train() that did not check
    params = [p for m in [model, *extra_modules] for p in m.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        [{"params": [p for p in params if p.dim() > 1], "weight_decay": settings.weight_decay},
         {"params": [p for p in params if p.dim() <= 1], "weight_decay": 0.0}],
        lr=settings.learning_rate,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(steps, int(settings.warmup_ratio * steps)))
    # Extra modules (distill's hidden-state projections) are called by loss_fn directly, not through a DDP
    # wrapper, so their gradients are averaged across processes here instead.
    extra_params = [p for m in extra_modules for p in m.parameters() if p.requires_grad]
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for m in extra_modules:
        accelerator.register_for_checkpointing(m)
    average = None
    if settings.ema_decay:
        average = WeightAverage(accelerator.unwrap_model(model), settings.ema_decay)
        accelerator.register_for_checkpointing(average)
    return _Run(accelerator, model, optimizer, scheduler, params, extra_params, steps, average)


def _schedule(total: int, warmup: int) -> Callable[[int], float]:
    """Linear warm-up over `warmup` steps, then linear decay to 0 at `total`."""
    def factor(step):
        if step < warmup:
            return (step + 1) / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))

    return factor


def _resume(accelerator, ckpt: Path, *, model: torch.nn.Module | None = None) -> LoopState:
    """The loop state of the newest whole checkpoint (model, optimizer, scheduler, RNG loaded), else a fresh one.
    `model`: the model trained (unwrapped), whose weights the checkpoint's must be."""
    found = _newest_checkpoint(ckpt)
    if found is None:
        return LoopState()
    # a file of it cut short or deleted (a full disk, a copy of the run folder interrupted) is not a traceback; what
    # else loading raises (a RuntimeError: out of memory) is not damage, and is not called so
    fix = _after_deleting(ckpt, found[0])
    with broken_file(found[0], label=f"the checkpoint {found[0]}", errors=DAMAGED, fix=fix):
        _check_whole(found[0])
        if model is not None:
            _check_same_model(model, found[0], fix=fix)
        accelerator.load_state(str(found[0]))
    return found[1]


def _check_same_model(model: torch.nn.Module, checkpoint: Path, *, fix: str) -> None:
    """The checkpoint's weights (model.safetensors) are `model`'s, by name and shape: one copied in from another
    model's run was a RuntimeError listing every missing and unexpected key. A weight the file leaves out because it
    shares its tensor with one it holds (accelerate saves tied weights once) is not missing."""
    path = checkpoint / "model.safetensors"
    if not path.is_file():
        return
    saved = header_shapes(path)
    own = model.state_dict()
    stored = {tensor.data_ptr() for name, tensor in own.items() if name in saved}
    differ = [name for name in sorted(own.keys() | saved.keys())
              if (tuple(own[name].shape) if name in own else None) != saved.get(name)
              and not (name not in saved and own[name].data_ptr() in stored)]
    if differ:
        name = differ[0]
        there = list(saved[name]) if name in saved else "no such weight"
        here = list(own[name].shape) if name in own else "no such weight"
        raise UserError(f"the checkpoint {checkpoint} holds another model's weights ({name}: {there} there, {here} in "
                        f"the model this run trains), copied in from another run; {fix}.")


# what reading a checkpoint's files raises where one was cut short or deleted
DAMAGED = (FileNotFoundError, EOFError, pickle.UnpicklingError, SafetensorError, zipfile.BadZipFile)


def _check_whole(checkpoint: Path) -> None:
    """torch saves zip archives (optimizer.bin, scheduler.bin, random_states_0.pkl): one cut short has no central
    directory, which zipfile says by its own error (torch's reader raises a RuntimeError, as an out-of-memory does)."""
    for path in sorted([*checkpoint.glob("*.bin"), *checkpoint.glob("*.pkl")]):
        zipfile.ZipFile(path).close()


def _after_deleting(ckpt: Path, damaged: Path) -> str:
    """How to go on past a damaged checkpoint: delete it, and the rerun resumes from the next whole one, if any."""
    later = _checkpoints(ckpt)
    older = next(((c, state) for c in later[later.index(damaged) + 1:] if (state := _loop_state(c)) is not None), None)
    if older is None:
        return "delete that folder, and the rerun trains this run again from step 0"
    return f"delete that folder, and the rerun resumes from step {older[1].step} (the checkpoint {older[0]})"


def checkpoint_step(work_dir: Path) -> int | None:
    """The step of the checkpoint that calling `train` again with `work_dir` resumes after; None when there is
    none (it would train from step 0)."""
    found = _newest_checkpoint(Path(work_dir) / CHECKPOINT)
    return None if found is None else found[1].step


def _newest_checkpoint(ckpt: Path) -> tuple[Path, LoopState] | None:
    """The newest whole checkpoint and its loop state: one whose loop.json (written last) reads whole."""
    return next(((c, state) for c in _checkpoints(ckpt) if (state := _loop_state(c)) is not None), None)


def _loop_state(checkpoint: Path) -> LoopState | None:
    """None where loop.json is missing, or cut short by a kill while an earlier version wrote it in place."""
    try:
        return LoopState(**json.loads(read_small_text(checkpoint / "loop.json")))
    except (OSError, ValueError, TypeError, UserError):
        return None


def _checkpoints(ckpt: Path) -> tuple[Path, Path, Path]:
    """Where a checkpoint may be, newest first: a kill while _checkpoint swaps them leaves the new one in .tmp, the
    previous one in .old, or both."""
    return ckpt.with_name(ckpt.name + ".tmp"), ckpt, ckpt.with_name(ckpt.name + ".old")


def _micro_step(run: _Run, encoded: Encoded, rows: np.ndarray, loss_fn, settings: LoopSettings) -> torch.Tensor:
    """Forward and backward of this process's share of one batch; the optimizer steps when accumulation ends."""
    accelerator, world = run.accelerator, run.accelerator.num_processes
    run.model.train()
    shard, share = _shard(rows, accelerator.process_index, world)
    batch = {k: v.to(accelerator.device) for k, v in collate(encoded, shard).items()}
    with accelerator.accumulate(run.model):
        loss = loss_fn(run.model, batch, shard)
        _check_finite(loss, accelerator)
        accelerator.backward(loss * share)
        if accelerator.sync_gradients and world > 1:
            _average_gradients(run.extra_params, world)
        if accelerator.sync_gradients and settings.max_grad_norm:
            accelerator.clip_grad_norm_(run.params, settings.max_grad_norm)
        run.optimizer.step()
        run.scheduler.step()
        run.optimizer.zero_grad()
    return loss


class TrainingDiverged(UserError):
    """A batch's loss was not finite: training stopped before publishing (a search stops at such a trial)."""


def _check_finite(loss: torch.Tensor, accelerator) -> None:
    """A loss of inf or NaN would turn every weight to NaN, and the run would publish a broken model: stop first.
    Every process reads every process's loss, so all stop together (one stopping alone would leave the others
    waiting in the gradient all-reduce)."""
    losses = loss.detach().float().sum().reshape(1)
    if accelerator.num_processes > 1:
        losses = accelerator.gather(losses)
    bad = losses[~torch.isfinite(losses)]
    if len(bad):
        raise TrainingDiverged(f"training diverged: a batch's loss is {float(bad[0])}; look for extreme gold values in "
                               "the training data, or lower learning_rate (nothing was published).")


def _evaluate(run: _Run, state: LoopState, settings: LoopSettings, evaluate_fn, save_best, progress) -> bool:
    """Evaluate (the weight average, with ema_decay), keep the best model (main process), count evaluations without
    improvement; True: stop early."""
    model = run.accelerator.unwrap_model(run.model)
    with run.average.swapped_in(model) if run.average is not None else nullcontext(model):
        metrics = evaluate_fn(model)
        better = _better(metrics[settings.select_metric], state.best_value, settings.select_metric)
        if better and run.accelerator.is_main_process:
            save_best(model, metrics)
    state.history.append({"step": state.step, **metrics})
    stop = False
    if better:
        state.best_value, state.best_step, state.bad_evals = metrics[settings.select_metric], state.step, 0
    else:
        state.bad_evals += 1
        stop = bool(settings.early_stopping_patience and state.bad_evals >= settings.early_stopping_patience)
    if progress:
        progress({"step": state.step, "total": run.total_steps, "eval": metrics})
    return stop


class _Clock:
    """Wall and CPU seconds of training since the last checkpoint, added to the loop state at each one."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def add_to(self, state: LoopState) -> None:
        state.train_seconds += time.perf_counter() - self.wall
        state.cpu_seconds += time.process_time() - self.cpu
        self.wall, self.cpu = time.perf_counter(), time.process_time()


def _shard(rows: np.ndarray, rank: int, world: int) -> tuple[np.ndarray, float]:
    """This process's rows of a batch, and the weight that makes the processes' averaged gradients equal
    the gradient of the whole batch's mean loss (DDP averages them; shards may differ by a row)."""
    if world == 1:
        return rows, 1.0
    shard = rows[rank::world]
    if len(shard) == 0:  # fewer rows than processes: take part in the step with a zero-weight row
        return rows[:1], 0.0
    return shard, world * len(shard) / len(rows)


def _average_gradients(params: list[torch.nn.Parameter], world: int) -> None:
    import torch.distributed as dist

    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)
        p.grad /= world


def _checkpoint(accelerator, ckpt: Path, state: LoopState) -> None:
    """Save model/optimizer/scheduler/RNG state, then the loop state; a crash at any point keeps a whole checkpoint.

    Every process calls save_state: the main process writes the weights, and each process its own RNG
    state (random_states_<rank>.pkl), so that every process resumes with the random numbers it had.
    """
    tmp, _, old = _checkpoints(ckpt)
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    try:
        accelerator.save_state(str(tmp))
    except Exception as e:
        unsaved = _unsaved(tmp, ckpt, e)
        if unsaved is e:  # no write fault: as it was raised, with its cause
            raise
        raise unsaved from None
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        write_text(tmp / "loop.json", json.dumps(state.__dict__))  # atomic: a kill leaves it whole or absent
        if ckpt.exists():  # renamed, not deleted, first: deleting takes a while, and a kill meanwhile keeps both
            shutil.rmtree(old, ignore_errors=True)
            ckpt.rename(old)
        tmp.rename(ckpt)
        shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()


def _unsaved(tmp: Path, ckpt: Path, error: Exception) -> Exception:
    """A checkpoint that could not be written: on a full disk (torch says so as a RuntimeError) one sentence naming
    the folder, and the half-written checkpoint removed (a rerun passes it over: it has no loop.json); else `error`."""
    why = write_fault(error, tmp if tmp.exists() else tmp.parent)
    if why is None:
        return error
    shutil.rmtree(tmp, ignore_errors=True)
    since = _newest_checkpoint(ckpt)
    again = "from step 0" if since is None else f"from the checkpoint of step {since[1].step}"
    return UserError(f"{ckpt}: writing the checkpoint failed ({why}); check free space and permissions, then rerun: it "
                     f"resumes {again}.")


# --- what finetune and distill share besides the loop (their run folder: headcut/run_folder.py) --------


def settings_from(recipe) -> LoopSettings:
    """The loop settings a recipe names with the same field names (epochs, batch_size, ...)."""
    import dataclasses

    return LoopSettings(**{f.name: getattr(recipe, f.name) for f in dataclasses.fields(LoopSettings)
                           if hasattr(recipe, f.name)})


def batch_count(n: int, settings: LoopSettings) -> int:
    """The batches of `settings.epochs` epochs over `n` examples."""
    return math.ceil(math.ceil(n / settings.batch_size) * settings.epochs)


def micro_batches(n: int, settings: LoopSettings) -> int:
    """The batches `train` runs: all of them, less a last accumulation too short to make an optimizer step."""
    batches = batch_count(n, settings)
    return batches - batches % settings.gradient_accumulation


def total_steps(n: int, settings: LoopSettings) -> int:
    """Optimizer steps `train` takes over `n` examples."""
    return micro_batches(n, settings) // settings.gradient_accumulation


def check_steps(n: int, settings: LoopSettings, where, *, pairs=None) -> None:
    """A run must make at least one optimizer step, or it would end with nothing to publish. `where`: what the
    sentence is led by, text (the recipe file and --set values as it is read) or worded by the keys' names (trained_on:
    the pairs counted, once read); `pairs(name)`: how the `n` pairs are named (default: 'N pairs'). A WordedError:
    a run names the keys as it does (teacher.gradient_accumulation)."""
    if total_steps(n, settings):
        return

    def say(name, how):
        steps, lead = name("gradient_accumulation"), "" if isinstance(where, str) else f"{where(name, how)}: "
        return (f"{lead}{steps}={settings.gradient_accumulation} batches make one optimizer step, but "
                f"{pairs(name) if pairs else f'{n} pairs'} in batches of {settings.batch_size} over "
                f"{setting(name('epochs'), as_written(settings.epochs))} are {batch_count(n, settings)} batches; "
                f"lower {steps} or {name('batch_size')} (--set {steps}=N).")

    raise worded(where if isinstance(where, str) else "", say, about=())


def as_written(value: float) -> float | int:
    """A float key's `value` as a message shows what the recipe wrote: 2 for `epochs: 2` (read as 2.0), 2.5 as is;
    setting() shows a --set's own text where it reads as the value."""
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53 else value


def check_process_batch(batch_size: int, processes: int) -> None:
    """Each of `processes` processes forwards a ceil(batch_size / processes) share of the global batch
    (GLOBAL_BATCH), which must stay within every batch setting's bound (ranges.MAX_BATCH). A run checks it before any
    model loads (evaluate.ablation.process_state: this launch's processes, 1 unless under accelerate launch)."""
    share = math.ceil(batch_size / processes)
    if share > MAX_BATCH:
        over = "1 process" if processes == 1 else f"{processes} processes"
        raise UserError(f"batch_size={batch_size} over {over} is {share} pairs per process in each forward pass, past "
                        f"{MAX_BATCH}; lower batch_size ({LARGER_STEP}), or add processes (accelerate launch "
                        f"--num_processes {math.ceil(batch_size / MAX_BATCH)} or more).", about=("batch_size",))


def check_fits(recipe, where) -> None:
    """The run makes an optimizer step on the most pairs it can train on (check_steps), said before any model loads:
    as the recipe's keys bound them (most_pairs), else as its data hold them (most_read). `where`: what the sentence
    is led by (check_steps)."""
    settings = settings_from(recipe)
    most = recipe.most_pairs() or most_read(recipe, pairs_for_a_step(settings))
    if most is not None:
        check_steps(most[0], settings, where, pairs=lambda name: f"at most {most[0]} pairs ({most[1](name)})")


ROWS_KEYS = {"train_data": "train_rows", "unlabeled_data": "unlabeled_rows"}  # the key that bounds each one's pairs


def most_read(recipe, enough: int) -> tuple[int, Callable] | None:
    """The pairs the recipe's data hold (each file's up to its ROWS_KEYS key) and what says so (worded by the keys'
    names, name(key) -> str), counted only until they are `enough` (data_spec.count_spec: a big file is not read to
    its end); None once they are, past data_spec.MAX_COUNTED rows, or where a file is not there (check_data_files says
    so as the run reads it)."""
    total, said = 0, []
    for key in (k for k in TRAINED_KEYS if getattr(recipe, k, None) is not None):
        spec, bound = getattr(recipe, key), getattr(recipe, ROWS_KEYS[key], None)
        if not is_synthetic(spec) and not on_disk(spec):
            return None
        wanted = enough - total if bound is None else min(bound, enough - total)
        rows = count_spec(spec, at_most=wanted, **dict(file_options(recipe), label_col=None))
        if rows is None or rows == enough - total:  # past data_spec.MAX_COUNTED: check_steps says it once read
            return None
        total += rows
        said.append((ROWS_KEYS[key], f"={bound}", "") if rows == bound else (key, f" {spec}", f"{rows} in "))
    return total, lambda name: " + ".join(f"{before}{name(key)}{after}" for key, after, before in said)


def pairs_for_a_step(settings: LoopSettings) -> int:
    """The fewest pairs on which `train` takes an optimizer step."""
    batches = math.floor((settings.gradient_accumulation - 1) / settings.epochs) + 1  # per epoch; then exact:
    while batches > 1 and total_steps((batches - 1) * settings.batch_size, settings):
        batches -= 1
    while not total_steps(batches * settings.batch_size, settings):
        batches += 1
    return (batches - 1) * settings.batch_size + 1


def trained_on(recipe) -> Callable[[Callable[[str], str]], str]:
    """The pairs a run trains on, as a sentence about their count is led, worded by the keys' names (name(key)):
    'train_data F[ and unlabeled_data G]'."""
    return lambda name, how=lambda key: "": " and ".join(typed(name, how, key, getattr(recipe, key))
                                                         for key in TRAINED_KEYS if getattr(recipe, key, None))


def is_finished(state: LoopState, n: int, settings: LoopSettings) -> bool:
    """True once `train` ran to the end or stopped early for lack of improvement (not when interrupted)."""
    stopped = settings.early_stopping_patience and state.bad_evals >= settings.early_stopping_patience
    return bool(state.step >= total_steps(n, settings) or stopped)
