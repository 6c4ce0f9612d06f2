"""What a prune scores, tunes and checks on, and how the result says so: decided here, not in the command,
so a Python caller and `headcut prune` record the same provenance and notes."""
from __future__ import annotations

from typing import Callable

from headcut_grader.data import Pairs, read_pairs
from headcut_grader.errors import UserError
from headcut.prune.result import PruneSettings
from headcut.prune.scores import DEFAULT_METHOD, default_data, given_columns
from headcut.prune_arguments import named
from headcut.prune.report import OPTIMISTIC


def data_pool(loaded, data: Pairs | None, names: str = "arguments", *, columns: dict | None = None,
              eval_data: Pairs | None = None, method: str | None = None, targets: str | None = None) -> Pairs:
    """`data`, or by default the dev data `headcut finetune` recorded in the model's headcut.json, read as
    `pool_gold` says, with the columns it recorded except where `columns` says otherwise (`default_data`'s: e.g.
    {"query_col": "q"}, or {"preset": "homedepot"} in place of every recorded column); `names`: how a refusal names
    the arguments (`prune_arguments.named`)."""
    if data is not None:
        if given_columns(columns, "data_pool columns"):
            raise UserError("data_pool columns say how the recorded dev data is read, and data is given, read "
                            "already; drop columns, or read data with them.")
        return data
    path, options = default_data(loaded, names, columns=columns, columns_said="data_pool columns")
    gold = pool_gold(eval_data, method=method, targets=targets)  # its labels index the model's grades
    return read_pairs(path, task=loaded.task, grades=loaded.grades, names=names, **gold, **options)


def pool_gold(eval_data, *, method: str | None, targets: str | None = None) -> dict:
    """How the scoring pool's gold is read (read_pairs' require_labels and wants_gold), decided here so that a
    Python caller's recorded dev data, `headcut prune --data` and a run's data.train are read alike: gold is
    required when quality is reported on the pool (`pool_needs_gold`), else wanted when scoring reads it
    (`scoring_needs_gold`: a file holding only the other task's gold is then refused with the sentence that says
    so)."""
    return {"require_labels": pool_needs_gold(eval_data), "wants_gold": scoring_needs_gold(method, targets)}


def pool_needs_gold(eval_data) -> bool:
    """Whether the scoring pairs must carry gold: only when quality is reported on them, that is without
    separate quality pairs (`eval_data`: Pairs, a file name or None)."""
    return eval_data is None


def scoring_needs_gold(method: str | None, targets: str | None = None) -> bool:
    """Whether scoring the pairs reads their gold: criterion `method` (default fisher) needs it (the exact
    ablation), or a budget prune's Fisher `targets` are the grades (None: a heads-only prune, which has none)."""
    from headcut.evaluate.criteria import CRITERIA

    found = CRITERIA.get(method or DEFAULT_METHOD)
    return targets == "grades" or (found is not None and found.needs_gold)


def eval_sample(eval_data: Pairs | None, scored: Pairs | None, settings: PruneSettings) -> Pairs | None:
    """Quality pairs: a seeded sample of `eval_data`, else the scoring pairs when they have grades."""
    if not pool_needs_gold(eval_data):
        return eval_data.sample(settings.eval_rows, seed=settings.seed)
    return scored if scored is not None and scored.task is not None else None


def notes_for(eval_pairs: Pairs | None, *chose: Pairs | None) -> list[str]:
    """The caveat of quality measured on pairs that also chose (or tuned) the pruned model (recorded alike for
    every caller; the report adds the caller's way to held-out pairs: report.optimistic)."""
    if eval_pairs is not None and any(p is not None and p.fingerprint == eval_pairs.fingerprint for p in chose):
        return [OPTIMISTIC]
    return []


MIN_CALIBRATE_ROWS = 5  # mask tuning holds every fifth calibration pair out to check each fit (prune.tune)


def check_calibration_size(pool: Pairs, settings: PruneSettings, *, tune: bool, names: str = "arguments") -> None:
    """Mask tuning on too few pairs is refused before any scoring, with the numbers that decide it; `names` as
    `data_pool`'s."""
    if tune and len(pool) < MIN_CALIBRATE_ROWS:  # calibrate_rows: None or at least this (PruneSettings)
        raise UserError(f"mask tuning needs at least {MIN_CALIBRATE_ROWS} calibration pairs (every fifth is held out "
                        f"to check the fit) but {pool.source} holds only {len(pool)}; pass more pairs with "
                        f"{named('data', names)}, or {named('no_tune', names)}.", about=("data", "tune"))


def file_score_record(scores, meta: dict) -> dict:
    """Head scores read from a scan's file: the method actually read from it, and the file's own provenance."""
    used = meta["method"]
    return {"method": used, "how": f"{meta.get('file')} ({used})", "values": scores.tolist(),
            "file": {"path": meta.get("file"), "data": meta.get("data"), "model": meta.get("model")}}


def scan_score_record(scores, method: str, pairs: Pairs) -> dict:
    """Head scores of a scan run here (the last step's, when iterative)."""
    return {"method": method, "values": None if scores is None else scores.tolist(),
            "how": f"{method} scan of {len(pairs)} pairs from {pairs.source}", "data": pairs.provenance()}


def stage(progress: Callable[[str, int, int | None], None] | None, name: str, total: int | None):
    """A pairs-done callback that reports stage `name` of `total` pairs (None: unknown) to `progress`."""
    return (lambda n: progress(name, n, total)) if progress else None
