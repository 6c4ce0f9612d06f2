"""Pairs named by a data spec, the one way the toolkit reads them: `synthetic` or `synthetic:SEED` (a drawn
set), or a file, sampled to `rows` with `seed`. A one-score task turns drawn grades into scores."""
from __future__ import annotations

import os
from pathlib import Path

from headcut_grader.data import FILE_KEYS, PRESETS, Pairs, iter_pairs, read_pairs
from headcut_grader import errors
from headcut_grader.errors import UserError, quoted
from headcut_grader.pairs import sampled_rows
from headcut.synthetic import SYNTHETIC_PAIRS, is_synthetic, synthetic_spec


def read_spec(spec: str, *, rows: int | None = None, seed: int = 0, task: str = "grades", name: str = "read_spec spec",
              **options) -> Pairs:
    """The pairs `spec` names; `options` go to `read_pairs` for a file (preset, columns, grades, texts_only, ...);
    `name`: what named `spec` (--data, a Python caller's argument), for a synthetic spec's messages (a file's name
    their file)."""
    synthetic = synthetic_spec(spec, rows, said=_rows_said(options), name=name)
    if synthetic is not None and options.get("texts_only"):
        return Pairs(synthetic.queries, synthetic.titles, None, synthetic.grades, synthetic.source)
    if synthetic is not None:
        _check_synthetic_grades(synthetic, options.get("grades") if task == "grades" else None, options.get("keys"))
        return as_scores(synthetic) if task == "score" else synthetic
    if rows is None:
        return read_pairs(spec, task=task, **options)
    return _sampled_file(spec, rows, seed, dict(options, task=task))


SAMPLE_CHUNK = 10_000  # rows a sampled file is read by: memory holds one such chunk and the sample, not the file


def _sampled_file(path: str, rows: int, seed: int, options: dict) -> Pairs:
    """`rows` pairs of file `path`, the ones Pairs.sample(rows, seed=seed) draws from the whole file, read in two
    passes of iter_pairs' chunks (the first counts and checks every row, the second keeps the drawn ones), so that a
    sample of a file of millions of rows does not hold them all. A file of one chunk is read once."""
    total, chunks, whole = 0, 0, None
    for chunk in iter_pairs(path, chunk_rows=SAMPLE_CHUNK, **options):
        total, chunks, whole = total + len(chunk.pairs), chunks + 1, chunk.pairs if chunks == 0 else None
    if whole is not None:
        return whole.sample(rows, seed=seed)
    if rows >= total:
        return read_pairs(path, **options)
    drawn = sampled_rows(total, rows, seed)
    parts, start, at = [], 0, 0
    for chunk in iter_pairs(path, chunk_rows=SAMPLE_CHUNK, **options):
        end = start + len(chunk.pairs)
        first = at
        while at < len(drawn) and drawn[at] < end:
            at += 1
        parts.append(chunk.pairs.subset([i - start for i in drawn[first:at]]))
        start = end
    return _joined(parts)


def _joined(parts: list[Pairs]) -> Pairs:
    """The pairs of `parts` (chunks of one file) in order, as one Pairs."""
    first = parts[0]

    def each(name):
        return None if getattr(first, name) is None else [x for part in parts for x in getattr(part, name)]

    return Pairs(each("queries"), each("titles"), each("labels"), first.grades, first.source, scores=each("scores"),
                 lines=each("lines"), gold_option=first.gold_option)


# Counting a file's pairs as a recipe is read (training.check_fits) stops after this many rows: past it the count is
# unknown (None), and a run too short for one step is refused by check_steps once its data is read. It bounds what a
# recipe read costs (about a second) however many pairs a step needs (epochs=0.001 with gradient_accumulation and
# batch_size at 1024 needs about 1e9); the recipe is read again by distill's setup, each --tune trial and each
# sub-recipe of a run, which find an unchanged file's count in _COUNTS. A multiple of COUNT_CHUNK, so no chunk is
# read past it.
MAX_COUNTED = 100_000
COUNT_CHUNK = 10_000


def count_spec(spec: str, *, at_most: int, **options) -> int | None:
    """How many pairs `spec` holds, counted up to `at_most`: a file is read in chunks and only until it holds that
    many, or MAX_COUNTED rows, so time and memory stay bounded whatever its size; None where it holds MAX_COUNTED
    and `at_most` is more (not counted further). Its texts are read as read_spec reads them (`options`: read_pairs',
    its gold unread). A file counted before with the same size and time of change is not read again."""
    if is_synthetic(spec):
        return min(at_most, SYNTHETIC_PAIRS)
    limit = min(at_most, MAX_COUNTED)
    rows = _count_file(spec, limit, options)
    return None if rows == limit < at_most else rows


_COUNTS: dict[tuple, int] = {}  # _count_file's counts by _count_key: a recipe read again counts no file twice


def _count_file(path: str, limit: int, options: dict) -> int:
    """The pairs in file `path`, counted up to `limit`; as counted before where the file has not changed since."""
    key = _count_key(path, limit, options)
    if key in _COUNTS:
        return _COUNTS[key]
    rows = 0
    for chunk in iter_pairs(path, chunk_rows=min(limit, COUNT_CHUNK), **options, texts_only=True):
        rows += len(chunk.pairs)
        if rows >= limit:
            rows = limit
            break
    if key is not None:
        if len(_COUNTS) >= 64:  # memory stays bounded in a long-lived process
            _COUNTS.clear()
        _COUNTS[key] = rows
    return rows


def _count_key(path: str, limit: int, options: dict) -> tuple | None:
    """A count of `path` as it is now (its size, time of change and inode), read with `options`; None where it
    cannot be looked at (iter_pairs says why as it opens it)."""
    try:
        stamp = os.stat(path)
    except OSError:
        return None
    return (str(Path(path).resolve()), stamp.st_size, stamp.st_mtime_ns, stamp.st_ino, limit,
            repr(sorted(options.items())))


# where read_spec's `rows` is spelled otherwise than rows (headcut_grader.errors.named): a command's --limit, a
# training recipe's (read_pairs' keys=""), which reads its train and dev data through here (a run recipe bounds its
# rows keys to MAX_SYNTHETIC before)
ROWS = {"flags": {"rows": "--limit"}, "keys": {"rows": "the recipe's train_rows or dev_rows"}}


def _rows_said(options: dict) -> str:
    """How the caller of read_spec named `rows`, by read_pairs' `names` and `keys` in `options`."""
    names = "keys" if isinstance(options.get("keys"), str) else options.get("names", "arguments")
    return errors.named("rows", names, section="data", spelled=ROWS)


def _check_synthetic_grades(pairs: Pairs, grades, keys) -> None:
    """Synthetic pairs grade 1..5: read against other grades, their labels would index the wrong grades."""
    if grades is None or tuple(grades) == tuple(pairs.grades):
        return
    drawn = ", ".join(map(str, pairs.grades))
    if keys == "":  # a recipe reads it: name its key
        raise UserError(f"synthetic data grades {drawn}, but the recipe says grades={list(grades)}; set "
                        f"grades=[{drawn}], or train on a file graded in yours.")
    raise UserError(f"synthetic data grades {drawn}, but the model grades {', '.join(map(str, grades))}; pass a "
                    "file graded in the model's grades.")


def as_scores(pairs: Pairs) -> Pairs:
    """Graded pairs as score pairs, the grade as the score (synthetic data for one-score models)."""
    scores = [float(pairs.grades[label]) for label in pairs.label_array()]
    return Pairs(pairs.queries, pairs.titles, None, pairs.grades, pairs.source, scores=scores)


def check_file_keys(settings, where: str, specs: dict, given: set) -> None:
    """The preset of `settings` (a recipe or a run's data section) is one headcut knows, whether or not a file reads
    it; and a FILE_KEYS key in `given` is refused where `specs` ({key: data spec}) name no file, as only a file
    reads it (synthetic pairs have no columns)."""
    if settings.preset is not None and settings.preset not in PRESETS:
        raise UserError(f"{where}: key 'preset' is {quoted(settings.preset)}, which is unknown; choose one of: "
                        f"{', '.join(PRESETS)}.")
    if any(spec is not None and not is_synthetic(spec) for spec in specs.values()):
        return
    for key in (k for k in FILE_KEYS if k in given):
        drawn = ", ".join(f"{name}={spec}" for name, spec in specs.items() if spec is not None)
        raise UserError(f"{where}: key '{key}' says how data files are read, but {drawn} read no file (synthetic "
                        f"pairs have no columns); remove {key}, or pass a data file.")
