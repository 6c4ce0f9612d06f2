"""What a library function that takes a model accepts, checked before any work: a path, or a model of the other
kind (a LoadedModel where a PyTorch model is wanted, or the reverse), is refused in one sentence saying what to
pass. A path is not loaded for the caller: loading takes options (allow_pickle, attn_implementation) that are
headcut.load_model's to say, and every function here takes what it returns, as prune and build_grader do."""
from __future__ import annotations

import functools
import os

from headcut_grader.errors import UserError
from headcut_grader.ranges import argument


def check_loaded(value, name: str) -> None:
    """`value` is what headcut.load_model returns (the model with its tokenizer and record); `name`: the function
    and argument, e.g. 'evaluate_model loaded'."""
    if _is_loaded(value):
        return
    path = _path(value)
    if path is not None:
        raise UserError(f"{name} is the path {path!r}; pass the loaded model: headcut.load_model({path!r}).")
    if _is_module(value):
        raise UserError(f"{name} is {_a(value)} (a PyTorch model); pass what headcut.load_model(path) "
                        "returns, which holds its tokenizer and record too.")
    raise UserError(f"{name} is {_shown(value)}; pass the loaded model: headcut.load_model(path).")


def check_model(value, name: str) -> None:
    """`value` is a PyTorch model (a LoadedModel's .model)."""
    if _is_module(value):
        return
    path = _path(value)
    if path is not None:
        raise UserError(f"{name} is the path {path!r}; pass a PyTorch model: headcut.load_model({path!r}).model "
                        "(its .tokenizer is the tokenizer).")
    if _is_loaded(value):
        raise UserError(f"{name} is {_a(value)}; pass its .model (and its .tokenizer as the tokenizer).")
    raise UserError(f"{name} is {_shown(value)}; pass a PyTorch model, e.g. headcut.load_model(path).model.")


def takes_model(function):
    """`function(model, ...)` with its first argument checked by check_model, named after it ('flops_per_pair
    model'), before it runs: for the many small public functions of headcut.arch, each of which reads model.config
    or its modules (a path gave "'str' object has no attribute 'config'")."""
    name = f"{function.__name__} model"

    @functools.wraps(function)
    def checked(model, *args, **kwargs):
        check_model(model, name)
        return function(model, *args, **kwargs)

    return checked


def check_models(value, name: str) -> None:
    """`value` is a list (or tuple) of PyTorch models, each checked as check_model does."""
    if not isinstance(value, (list, tuple)):
        path = _path(value)
        shown = f"the path {path!r}" if path is not None else _a(value) if _is_module(value) else _shown(value)
        load = "headcut.load_model(path)" if path is None else f"headcut.load_model({path!r})"
        raise UserError(f"{name} is {shown}; pass a list of PyTorch models, e.g. [{load}.model].")
    for i, model in enumerate(value):
        check_model(model, f"{name}[{i}]")


def check_tokenizer(value, name: str) -> None:
    """`value` is a Hugging Face tokenizer (a LoadedModel's .tokenizer)."""
    if callable(value) and not _is_module(value):
        return
    path = _path(value)
    if path is not None:
        raise UserError(f"{name} is the path {path!r}; pass a loaded tokenizer: "
                        f"headcut.load_model({path!r}).tokenizer.")
    if _is_loaded(value):
        raise UserError(f"{name} is {_a(value)}; pass its .tokenizer.")
    raise UserError(f"{name} is {_shown(value)}; pass a Hugging Face tokenizer, e.g. "
                    "headcut.load_model(path).tokenizer.")


def _is_module(value) -> bool:
    import torch  # here, so a command line that only reads these checks' module does not load torch

    return isinstance(value, torch.nn.Module)


def _is_loaded(value) -> bool:
    """A LoadedModel, or anything shaped like one (its fields are what the callers read)."""
    return _is_module(getattr(value, "model", None)) and hasattr(value, "tokenizer") and hasattr(value, "meta")


def _path(value) -> str | None:
    return os.fspath(value) if isinstance(value, (str, os.PathLike)) else None


def _shown(value) -> str:
    """A plain value as written (3, None, [1]); an object by its type, not its (long) repr."""
    plain = isinstance(value, (int, float, list, tuple, dict, set)) or value is None
    return argument(value)[:60] if plain else _a(value)


def _a(value) -> str:
    """'a LoadedModel', 'an object': the type of `value` with its article."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
