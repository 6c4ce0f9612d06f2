"""Shared CLI plumbing: user errors -> one sentence + exit 2, data options, progress bars."""
from __future__ import annotations

import functools
import sys
from typing import Optional

import typer

from headcut.errors import UserError
from headcut.ranges import Range


def user_errors(fn):
    """Turn a UserError into its sentence on stderr and exit code 2, without a traceback; a flag whose value
    `number` refused stops the command here, before its body does any work."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            bad = next((v for v in kwargs.values() if isinstance(v, BadValue)), None)
            if bad is not None:
                raise UserError(bad.sentence)
            return fn(*args, **kwargs)
        except UserError as e:
            typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
            raise typer.Exit(2)

    return wrapper


def quiet_transformers() -> None:
    """transformers prints load reports and progress bars; headcut prints its own summary instead."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def read_data(path, *, preset, query_col, title_col, label_col, label_map, limit=None, require_labels=True, seed=0):
    from headcut.data import parse_label_map, read_pairs, synthetic_spec

    synthetic = synthetic_spec(path, limit)
    if synthetic is not None:
        return synthetic
    pairs = read_pairs(path, preset=preset, query_col=query_col, title_col=title_col, label_col=label_col,
                       label_map=parse_label_map(label_map), require_labels=require_labels)
    return pairs.sample(limit, seed=seed)


def progress_bar(total: int, desc: str):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="pair", file=sys.stderr, dynamic_ncols=True, leave=False,
                disable=None)


class BadValue:
    """What `number`'s parser returns for a refused value: `user_errors` reports it as the command's one sentence
    (a click usage error would print a usage block and a box instead of one line)."""

    def __init__(self, sentence: str):
        self.sentence = sentence


def bounded(kind: type, valid: Range, flag: str):
    """A parser for a whole or finite number within `valid`."""

    def parse(value):
        if isinstance(value, kind) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = kind(value)
            except (TypeError, ValueError):
                return BadValue(f"{flag} '{value}' is not a {'whole number' if kind is int else 'number'}; it must be "
                                f"{valid.describe()}.")
        problem = valid.problem(number)
        return BadValue(f"{flag} {value} {problem}.") if problem else number

    parse.__name__ = kind.__name__  # the metavar typer shows in --help
    parse.valid = valid
    return parse


def number(default, *flags: str, help: str, low=None, high=None, low_open=False, high_open=False, kind=None):
    """A typer option for a number with a checked range: number(64, "--batch-size", help=..., low=1)."""
    valid = Range(low, high, low_open, high_open)
    kind = kind or type(default)
    return typer.Option(default, *flags, help=f"{help} ({valid.describe()}).", parser=bounded(kind, valid, flags[0]))


# Reusable option declarations (typer reads the defaults).
PRESET = typer.Option(None, "--preset", help="Column/label preset: homedepot or qbqtc.")
QUERY_COL = typer.Option(None, "--query-col", help="Query column name (default: query).")
TITLE_COL = typer.Option(None, "--title-col", help="Title column name (default: title).")
LABEL_COL = typer.Option(None, "--label-col", help="Label column name (default: grade).")
LABEL_MAP = typer.Option(None, "--label-map", help="Map raw labels to grades: '0:1,1:3,2:5', or 'round' for float scores.")
MAX_LENGTH = number(None, "--max-length", help="Token limit per pair (default: the model's, else 128)", low=8, kind=int)
LIMIT = number(None, "--limit", help="Use a seeded random sample of this many rows", low=1, kind=int)
BATCH_SIZE = number(64, "--batch-size", help="Pairs per forward pass", low=1)
BOOTSTRAP = number(1000, "--bootstrap", help="Bootstrap resamples for the 95% CIs", low=10)
THREADS = number(2, "--threads", help="Threads (PyTorch and ONNX Runtime)", low=1)
SEED = number(0, "--seed", help="Seed of the data sample and anything random", low=0, high=2**32 - 1)
OVERWRITE = typer.Option(False, "--overwrite", help="Replace an existing output file or non-empty output folder.")
ALLOW_PICKLE = typer.Option(False, "--allow-pickle", help="Allow pickle weights (pytorch_model.bin): only for trusted models.")
Opt = Optional


def main_process() -> bool:
    """False on the other processes of `accelerate launch`: only the main process prints and draws bars."""
    from headcut.evaluate.ablation import process_state

    return process_state().is_main_process


def training_progress(desc: str):
    """A tqdm bar driven by `training.train` events; evaluations are printed above it. Returns (bar, callback)."""
    from tqdm import tqdm

    bar = tqdm(desc=desc, unit="step", file=sys.stderr, dynamic_ncols=True, leave=False,
               disable=None if main_process() else True)

    stage = [desc]

    def progress(event):
        name = event.get("stage", desc)  # a preparatory stage (teacher logits) counts pairs, training counts steps
        if name != stage[0]:
            stage[0] = name
            bar.reset(total=event["total"])
            bar.set_description(name)
            bar.unit = "pair" if name != desc else "step"
            if name != desc:
                bar.write(f"{name}: {event['total']} pairs")
        bar.total = event["total"]
        if "stage" in event:
            bar.n = event["step"]
            bar.refresh()
        elif "eval" in event:
            m = event["eval"]
            bar.write(f"step {event['step']}: dev accuracy {m['accuracy']:.4f}  macro-F1 {m['macro_f1']:.4f}  "
                      f"Spearman {m['spearman']:.4f}  loss {m['loss']:.4f}")
        else:
            bar.n = event["step"]
            bar.set_postfix(loss=f"{event['loss']:.3f}")
            bar.refresh()

    return bar, progress
