"""Where a prune's head scores come from: a scan's score file (checked against the model), or a fresh
scan on data, by default the dev data the model was fine-tuned with."""
from __future__ import annotations

from pathlib import Path

import torch

from headcut.arch import heads_per_layer, intermediate_size, layer_ids, mask_shape, neurons_per_layer
from headcut_grader.data import FILE_KEYS
from headcut_grader.errors import UserError, check_names, setting
from headcut_grader.files import as_file_to_read
from headcut_grader.ranges import check_callbacks
from headcut_grader.validation import absent
from headcut.model_arguments import check_loaded, check_model, check_tokenizer
from headcut.evaluate_arguments import SCORES_FILE
from headcut.prune_arguments import named

DEFAULT_METHOD = "fisher"  # one gradient pass, where ablation needs a forward pass per head


def check_unpruned(loaded, flag: str = named("model")) -> None:
    """Refuse a model already pruned (layers, heads or FFN neurons), named as `flag` (`prune_arguments.named`)."""
    check_loaded(loaded, "check_unpruned loaded")
    layers, heads = mask_shape(loaded.model)
    if layer_ids(loaded.model) != list(range(layers)):
        raise UserError(f"{setting(flag, loaded.path)} is already pruned (it kept layers {layer_ids(loaded.model)}); "
                        "prune the original model instead.")
    if heads_per_layer(loaded.model) != [heads] * layers:
        raise UserError(f"{setting(flag, loaded.path)} is already pruned ({heads_per_layer(loaded.model)} heads "
                        "per layer); prune the original model instead.")
    full = intermediate_size(loaded.model.config)
    if neurons_per_layer(loaded.model) != [full] * layers:
        raise UserError(f"{setting(flag, loaded.path)} is already pruned ({neurons_per_layer(loaded.model)} "
                        f"FFN neurons per layer of {full}); prune the original model instead.")


OWN_PATH = "scores_from_file path"  # how scores_from_file's refusals name `path` where it is itself the caller


def scores_from_file(path: str | Path, loaded, *, method: str | None = None, names: str = "arguments",
                     flag: str = OWN_PATH) -> tuple[torch.Tensor, dict]:
    """Scores and metadata from a scan's importance.json, refused when they belong to another model.
    `method`: which of the file's methods; default DEFAULT_METHOD when the file has it, else its first; `names`:
    how a refusal names the arguments (`prune_arguments.named`); `flag`: what named `path` as errors.caller reads it
    (a Python caller's: this argument, or prune's scores; --scores; none: a run's scan file, by its path alone)."""
    check_names(names, "scores_from_file names")
    from headcut.evaluate.importance import absent_heads, read_scores

    path = as_file_to_read(path, flag, what=SCORES_FILE)
    check_loaded(loaded, "scores_from_file loaded")
    own = flag == OWN_PATH  # called itself: its own arguments (path, loaded), and no data to pass instead
    scores_said = setting(flag if own else named("scores", names), path)
    model, data = named("model", names), named("data", names)
    if not path.exists():
        plain = "no such file; run `headcut scan` first" + ("" if own else f" or pass {data} to score heads here")
        raise UserError(f"{scores_said}: {absent(path, plain)}.")
    scores, meta = read_scores(path, method=method, default=DEFAULT_METHOD)
    scores = torch.as_tensor(scores, dtype=torch.float64)
    expected = mask_shape(loaded.model)
    if tuple(scores.shape) != expected:
        raise UserError(f"{scores_said} has {tuple(scores.shape)} heads but {model} has {expected}; "
                        "scan this model or pass its own score file.")
    missing = torch.nonzero(torch.isinf(scores) & ~absent_heads(loaded.model))
    if len(missing):
        layer, head = (int(x) for x in missing[0])
        raise UserError(f"{scores_said} has no score (null) for head L{layer}H{head}, which {model} has; "
                        "scan this model or pass its own score file.")
    recorded = (meta.get("model") or {}).get("weights_hash")
    if recorded and loaded.weights_hash and recorded != loaded.weights_hash:
        raise UserError(f"{scores_said} was computed on another model (weights {recorded}, {model} has "
                        f"{loaded.weights_hash}); scan this model or pass its own score file.")
    return scores, meta


COLUMNS = (*FILE_KEYS, "label_map")  # how a pairs file is read: the read_pairs options a caller may give


def default_data(loaded, names: str = "arguments", *, columns: dict | None = None,
                 columns_said: str = "default_data columns") -> tuple[str, dict]:
    """The dev data recorded by `headcut finetune` in the model's headcut.json: (path, how to read it: every COLUMNS
    key); `names` as `scores_from_file`'s. `columns` ({COLUMNS key: value or None}) read it otherwise: a value given
    replaces the recorded one, and a preset given every recorded column (they name another layout's columns);
    `columns_said`: how a refusal of them names the argument (data_pool's own)."""
    check_names(names, "default_data names")
    check_loaded(loaded, "default_data loaded")
    given = given_columns(columns, columns_said)
    dev = loaded.meta.get("dev_data") or {}
    path = dev.get("path")
    if not path or not Path(path).exists():
        where = f" (it names {path}, which is missing)" if path else ""
        raise UserError(f"{setting(named('model', names), loaded.path)} records no dev data file{where}; pass "
                        f"{setting(named('data', names), 'FILE')} to score heads or "
                        f"{setting(named('scores', names), 'FILE')} from `headcut scan`.")
    recorded = {} if "preset" in given else {key: dev.get(key) for key in FILE_KEYS}
    return path, {**dict.fromkeys(COLUMNS), **recorded, **given}


def given_columns(columns: dict | None, said: str) -> dict:
    """The values `columns` gives (None: not given), its keys refused where they are not COLUMNS (a misspelt one
    would read the file as recorded); `said`: how a refusal names the argument."""
    if columns is not None and not isinstance(columns, dict):
        raise UserError(f"{said} is {type(columns).__name__}; pass a dict of {', '.join(COLUMNS)} to values, or None.")
    unknown = [key for key in columns or {} if key not in COLUMNS]
    if unknown:
        raise UserError(f"{said} has key {unknown[0]!r:.60}, which is not one of {', '.join(COLUMNS)}; name those.")
    return {key: value for key, value in (columns or {}).items() if value is not None}


def scan_scores(model, tokenizer, pairs, *, method: str, batch_size: int = 64, max_length: int | None = None,
                progress=None, seed: int = 0, flag: str = "scan_scores method") -> torch.Tensor:
    """(num_layers, num_heads) float64 scores of criterion `method` (`evaluate.criteria`, higher = more
    important); heads the model lacks get -inf, and a NaN score of a head it has is one sentence; `flag`: what
    named `method`."""
    check_callbacks("scan_scores", progress=progress)
    from headcut.evaluate.criteria import head_importance

    check_model(model, "scan_scores model")
    check_tokenizer(tokenizer, "scan_scores tokenizer")
    return torch.as_tensor(head_importance(model, tokenizer, pairs, method=method, batch_size=batch_size,
                                           max_length=max_length, progress=progress, seed=seed, flag=flag),
                           dtype=torch.float64)
