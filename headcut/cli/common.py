"""Shared CLI plumbing of the toolkit's commands; what the runtime's commands also need lives in
headcut_grader.cli.common and is re-exported here."""
from __future__ import annotations

import sys

import typer

from headcut_grader.data import DEFAULT_GRADES
from headcut.evaluate_arguments import DEFAULTS, argument_range
from headcut.export.bench_settings import BenchSettings

# The commands the runtime shares (grade, serve) are declared with these; the toolkit's commands reuse them.
from headcut_grader.cli.common import (LABEL_COL, OVERWRITE, PRESET, QUERY_COL, TITLE_COL, BadValue, Opt,  # noqa: F401
                                       bounded, field_option, file_option, file_to_read, flags_set, folder_option,
                                       number, number_in, on_interrupt, path, progress_bar, user_errors,
                                       version_option, written_whole)


def quiet_transformers() -> None:
    """transformers prints load reports and progress bars; headcut prints its own summary instead."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def read_data(path, *, preset, query_col, title_col, label_col, label_map, limit=None, require_labels=True, seed=0,
              task="grades", grades=None, flags=None, texts_only=False, wants_gold=False, flag="--data"):
    """Pairs of a file (or 'synthetic'), with the gold of the model's `task`: grades, or a score column. `grades`:
    the model's (its labels index these, so a file's grades must be read against them; default 1..5). `flags`:
    the flags that set a column where they are not --query-col / --title-col / --label-col (read_pairs' keys).
    `texts_only`: no gold at all, for a command that never reads it (its gold column is not read). `wants_gold`: gold
    is optional, but the command's options use it: a file holding only the other task's gold is refused. `flag`: the
    flag that named `path`."""
    grades = tuple(grades or DEFAULT_GRADES)
    from headcut.data_spec import read_spec
    from headcut_grader.data import parse_label_map

    return read_spec(path, rows=limit, seed=seed, task=task, preset=preset, query_col=query_col, title_col=title_col,
                     label_col=label_col, label_map=parse_label_map(label_map, names="flags"),
                     require_labels=require_labels, grades_fix=label_map_fix, names="flags", keys=flags, grades=grades,
                     texts_only=texts_only, wants_gold=wants_gold, name=flag)


def label_map_fix(grade: int, grades: tuple[int, ...]) -> str:
    """What a user whose file grades otherwise than the model can do (as training.grades_fix): the --label-map onto
    the model's grades, from labels that hold the one seen, `grade` (3:1,...,7:5 for 7; 0:1,...,4:5 for 0)."""
    first = grade if grade < grades[0] else grade - len(grades) + 1
    labels = range(first, first + len(grades))
    return (f"fix the row, or map the file's labels onto these grades with --label-map, e.g. --label-map "
            f"{','.join(f'{i}:{g}' for i, g in zip(labels, grades))} for labels {labels[0]} to {labels[-1]}")


# Reusable option declarations (typer reads the defaults).
LABEL_MAP = typer.Option(None, "--label-map",
                         help="Map raw labels to grades: '0:1,1:3,2:5', or 'round' for float scores.")


def argument_option(name: str, *flags: str, help: str, kind=None, default=...):
    """A typer option with shared setting `name`'s default (DEFAULTS) and range, so a flag, the library's dataclass
    and a run recipe's key cannot drift apart; `default`: a command's own, where it must differ (the range stays)."""
    return number_in(argument_range(name), DEFAULTS[name] if default is ... else default, *flags, help=help, kind=kind)


# the shared settings' defaults and ranges are the library's (headcut.evaluate_arguments)
MAX_LENGTH = argument_option("max_length", "--max-length", help="Token limit per pair (default: the model's, else 128)",
                             kind=int)
LIMIT = number(None, "--limit", help="Use a seeded random sample of this many rows", low=1, kind=int)
BATCH_SIZE = argument_option("batch_size", "--batch-size", help="Pairs per forward pass")
BOOTSTRAP = argument_option("bootstrap", "--bootstrap", help="Bootstrap resamples for the 95% CIs")
THREADS = field_option(BenchSettings, "threads", "--threads", help="Threads (PyTorch, ONNX Runtime, OpenVINO)")
SEED = argument_option("seed", "--seed", help="Seed of a file's row sample (--limit) and "
                       "anything random; synthetic data is drawn by its own seed (--data synthetic:SEED)")
ALLOW_PICKLE = typer.Option(False, "--allow-pickle",
                            help="Allow pickle weights (pytorch_model.bin): only for trusted models.")


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
            bar.write(f"step {event['step']}: dev {metrics_line(m)}")
        else:
            bar.n = event["step"]
            bar.set_postfix(loss=f"{event['loss']:.3f}")
            bar.refresh()

    return bar, progress


def training_left(out):
    """For on_interrupt, made as an interruptible finetune or distill into `out` begins: what the command left, the
    checkpoint its rerun resumes after if one was saved (on the main process only: the others print nothing). A
    checkpoint is named only when this command opened the run folder (its stamp is not the one found here at the
    start): before that, OUT.partial may hold another recipe's run, which the rerun would refuse."""
    from headcut.run_folder import partial_folder, stamp_mark
    from headcut.training import checkpoint_step

    before, written = stamp_mark(out), written_whole(out)

    def left() -> str | None:
        if not main_process():
            return None
        if said := written():  # published; was: a Ctrl-C while the run folder was removed said nothing was kept
            return said
        if stamp_mark(out) == before:
            return "nothing was trained yet; rerun the same command to start."
        folder = partial_folder(out)
        step = checkpoint_step(folder) if folder.is_dir() else None
        if step is None:
            return "no checkpoint was saved yet; rerun the same command to train again from step 0."
        return f"{folder} keeps the checkpoint of step {step}; rerun the same command to resume after it."

    return left


def metrics_line(m: dict) -> str:
    """One line of dev metrics, a grades model's or a score model's (which has no accuracy)."""
    from headcut.evaluate.tasks import shown

    names = (("accuracy", "accuracy"), ("macro-F1", "macro_f1"), ("Spearman", "spearman"), ("loss", "loss")) \
        if "accuracy" in m else (("Spearman", "spearman"), ("Pearson", "pearson"), ("NDCG@10", "ndcg@10"),
                                 ("MSE", "loss"))
    # a figure with nothing to judge is NaN, and null once stored (NDCG@10 of dev pairs of one title per query)
    return "  ".join(f"{name} {shown(m.get(key), '.4f')}" for name, key in names)
