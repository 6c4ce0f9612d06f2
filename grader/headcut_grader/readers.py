"""Reading pairs from TSV, CSV, JSON lines or a JSON array: presets, column choice, formats, and chunks read
as they are needed (with the position to resume after each)."""
from __future__ import annotations

import csv
import itertools
import json
import math
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from headcut_grader import errors
from headcut_grader.errors import UserError, check_names, counted, quoted, setting
from headcut_grader.files import PAIRS_FILE, as_file_to_read
from headcut_grader.ranges import CHUNK_ROWS, argument, as_whole, checked_bool, checked_number
from headcut_grader.tasks import TASKS
from headcut_grader.json_array import json_array_items
from headcut_grader.lines import Lines, Position, packed_fix
from headcut_grader.pairs import DEFAULT_GRADES, Pairs
from headcut_grader.validation import (FIX_ROW, MAX_TEXT_CHARS, cell_number, check_regular, significant_digits,
                                       to_grade, to_score, to_text)

FORMATS = ("tsv", "csv", "jsonl", "json")
# A chunk of rows also ends once its texts pass this many characters, so that memory stays bounded for titles of
# any length (10,000 rows of 1M characters would be 10 GB of text): a chunk holds less than CHUNK_CHARS plus one
# row of 2 * MAX_TEXT_CHARS. Ordinary rows (10,000 of ~100 characters) never reach it.
CHUNK_CHARS = 8_000_000
_SUFFIX_FORMATS = {"tsv": "tsv", "csv": "csv", "jsonl": "jsonl", "ndjson": "jsonl", "json": "json"}


@dataclass(frozen=True)
class Preset:
    query_col: str = "query"
    title_col: str = "title"
    label_cols: tuple[str, ...] = ("grade",)  # first one present wins
    label_map: dict | None = None  # raw label text -> grade; None: the label is the grade
    fmt: str | None = None
    score_cols: tuple[str, ...] = ("score",)  # what a one-score model learns and is judged on


# The read_pairs options that say where a file's fields are: what a recipe sets and an artifact records.
FILE_KEYS = ("preset", "query_col", "title_col", "label_col")


def file_keys(settings) -> dict:
    """The FILE_KEYS values of `settings` (a recipe or its data section), as read_pairs keyword arguments."""
    return {key: getattr(settings, key) for key in FILE_KEYS}


PRESETS = {
    # Home Depot: grade 1..5 already derived from the raters' mean score (see ../shared/data/README).
    "homedepot": Preset(fmt="tsv"),
    # QBQTC: the 2021 release calls the field `relevant`, the current one `label`; 0/1/2 -> 1/3/5.
    "qbqtc": Preset(label_cols=("relevant", "label"), label_map={"0": 1, "1": 3, "2": 5}, fmt="jsonl"),
}


def read_pairs(
    path: str | Path,
    *,
    preset: str | None = None,
    query_col: str | None = None,
    title_col: str | None = None,
    label_col: str | None = None,
    label_map: dict | str | None = None,
    grades: tuple[int, ...] = DEFAULT_GRADES,
    grades_fix: str | Callable[[int, tuple], str] = FIX_ROW,
    fmt: str | None = None,
    require_labels: bool = True,
    limit: int | None = None,
    task: str = "grades",
    names: str = "arguments",
    keys: str | dict | None = None,
    texts_only: bool = False,
    wants_gold: bool = False,
) -> Pairs:
    """Read pairs from TSV, CSV, JSON lines or a JSON array.

    Every problem a user can cause raises `UserError` naming the file, line and column.
    `label_map` maps raw label text to a grade, or is 'round' for float scores. A grade outside `grades` is
    refused with `grades_fix`: what the caller's user can do about it (a flag or recipe key they have), or a function
    of (grade, grades) saying it.
    With `require_labels=False` a file without a label column gives unlabeled pairs; with `texts_only` every file
    does (its gold column, if any, is not read: for callers that never use gold). `wants_gold` (with
    `require_labels=False`: the caller's options use gold where there is some) refuses a file whose only gold is the
    other task's (scores for a grades model), as `require_labels` does, rather than read it as unlabeled.
    `task="score"` reads the preset's score column (or `label_col`) as numbers into `Pairs.scores`.
    `limit`: read the first `limit` rows only (at most ranges.MAX_CHUNK_ROWS); None: every row.
    `names` is who set the options, so that a message names them as written (headcut_grader.errors.named): "arguments"
    read_pairs' own (label_map, title_col=NAME), "keys" a run recipe's (data.title_col), "flags" a command's
    (--label-map). `keys` a str: a recipe's keys under that prefix ("" for --set title_col=NAME, "data." for a
    pipeline); a dict: flags named otherwise ({"title_col": "--seg-col"}: the caller read another column as the
    titles).
    """
    check_names(names, "read_pairs names")
    path = as_file_to_read(path, "read_pairs path", what=PAIRS_FILE)
    if limit is not None:
        checked_number(limit, "read_pairs limit", CHUNK_ROWS, whole=True)  # its rows are iter_pairs' one chunk
    _check_options("read_pairs", grades=grades, task=task, query_col=query_col, title_col=title_col,
                   label_col=label_col, require_labels=require_labels, texts_only=texts_only, wants_gold=wants_gold)
    chunk = next(iter_pairs(path, chunk_rows=limit, chunk_chars=None, preset=preset, query_col=query_col,
                            title_col=title_col, label_col=label_col, label_map=label_map, grades=grades,
                            grades_fix=grades_fix, fmt=fmt,
                            require_labels=require_labels, task=task, names=names, keys=keys,
                            texts_only=texts_only, wants_gold=wants_gold))
    return chunk.pairs


def _check_options(function: str, *, grades, task, require_labels, texts_only, wants_gold, **columns) -> None:
    """A Python caller's options of the wrong kind, one sentence naming `function`'s argument, before a row is read:
    each was read otherwise (task='rank' as grades, query_col=0 as the preset's column, require_labels='no' as
    True) or failed in Python's words (grades='12345')."""
    whole = [as_whole(grade) for grade in grades] if isinstance(grades, (tuple, list)) else [None]
    if None in whole or len(set(whole)) != len(whole) or len(whole) < 2:
        raise UserError(f"{function} grades is {argument(grades)[:60]}; pass two or more different whole numbers, "
                        "e.g. (1, 2, 3, 4, 5).")
    if task not in TASKS:
        raise UserError(f"{function} task is {argument(task)[:60]}; pass one of: {', '.join(TASKS)}.")
    for name, value in columns.items():
        if value is not None and not isinstance(value, str):
            raise UserError(f"{function} {name} is {argument(value)[:60]}; pass a column's name as text, or None.")
    for name, value in {"require_labels": require_labels, "texts_only": texts_only, "wants_gold": wants_gold}.items():
        checked_bool(value, f"{function} {name}")


def _check_label_map(label_map, grades: tuple[int, ...], said: str) -> None:
    """A label map's grades are the model's, said of the map before any row is read (each row naming it would
    blame the row). Any other text than 'round' was read as no map at all (label_map='rnd'); a key no cell can be (0,
    '', ' 0') left every row refused as a label the map lacks."""
    if label_map is None or label_map == "round":
        return
    if not isinstance(label_map, dict):
        raise UserError(f"{said} is {argument(label_map)[:60]}; pass a dict of raw label -> grade (e.g. {{'0': 1, "
                        "'1': 3, '2': 5}), 'round' to round float scores to the nearest grade, or None.")
    for raw, grade in label_map.items():
        if not isinstance(raw, str) or not raw.strip() or raw != raw.strip():  # a cell is read as stripped text
            raise UserError(f"{said} maps {argument(raw)[:60]}, which no label cell can be (they are read as text, "
                            "without blanks around it); key each raw label as the file writes it, e.g. {'0': 1}.")
        if grade not in grades:
            raise UserError(f"{said} maps {quoted(raw)} to {grade}, which is "
                            f"not one of the grades {list(grades)}; map each label to one of them.")


@dataclass(frozen=True)
class Chunk:
    """Consecutive rows of a file, and where the rows after them start (to resume a run there)."""

    pairs: Pairs
    position: "Position"


def iter_pairs(
    path: str | Path,
    *,
    chunk_rows: int | None,
    chunk_chars: int | None = CHUNK_CHARS,
    preset: str | None = None,
    query_col: str | None = None,
    title_col: str | None = None,
    label_col: str | None = None,
    label_map: dict | str | None = None,
    grades: tuple[int, ...] = DEFAULT_GRADES,
    grades_fix: str | Callable[[int, tuple], str] = FIX_ROW,
    fmt: str | None = None,
    require_labels: bool = True,
    start: Position | None = None,
    task: str = "grades",
    names: str = "arguments",
    keys: str | dict | None = None,
    texts_only: bool = False,
    wants_gold: bool = False,
):
    """The rows of a file as Chunks of `chunk_rows` pairs, or fewer where their texts pass `chunk_chars` characters
    (None: no limit), read as they are needed: memory holds one chunk whatever the file's size (JSON arrays too,
    read item by item).

    From `start` (a Chunk's position), reading continues after that row; the file's first row still names the
    columns. Problems raise the same sentences as `read_pairs`, with the true line numbers.
    """
    check_names(names, "iter_pairs names")
    path = as_file_to_read(path, "iter_pairs path", what=PAIRS_FILE)
    if chunk_rows is not None:
        checked_number(chunk_rows, "iter_pairs chunk_rows", CHUNK_ROWS, whole=True)
    _check_options("iter_pairs", grades=grades, task=task, query_col=query_col, title_col=title_col,
                   label_col=label_col, require_labels=require_labels, texts_only=texts_only, wants_gold=wants_gold)
    keys = Named(names, keys)
    _check_column_names(path, keys, query_col=query_col, title_col=title_col, label_col=label_col)
    p, fmt = _format_of(path, preset, fmt, keys)
    query_col, title_col = text_columns(preset, query_col, title_col)
    if query_col == title_col:
        raise UserError(f"{keys.said('query_col')} and {keys.said('title_col')} "
                        f"both name column {quoted(query_col)}; name the queries' and the titles' own columns.")
    score = task == "score"
    if score and label_map is not None:
        raise UserError(f"{keys.said('label_map')} maps labels to grades, and this model is a "
                        "one-score reranker that reads the score column as numbers; drop it.")
    label_cols = () if texts_only else (label_col,) if label_col else (p.score_cols if score else p.label_cols)
    _check_label_map(label_map, grades, keys.said("label_map"))
    label_map = label_map if label_map is not None else p.label_map

    with Lines(path) as lines:
        records = _records(path, lines, fmt)  # (line_number, dict), lazily
        first = next(records, None)
        columns = _columns(path, first, lines, fmt, (query_col, title_col), keys, gold=label_cols)
        label_name = next((c for c in label_cols if c in columns), None)
        _refuse_shared_gold(label_name, label_col, {"query_col": query_col, "title_col": title_col}, keys)
        wanted = require_labels or (wants_gold and _other_gold(columns, p, task=task) is not None)
        if label_name is None and not texts_only and wanted:
            raise UserError(_missing_gold(path, label_cols[0], _shown(columns, lines, fmt), columns, p, task=task,
                                          fix=keys.fix("label_col")))
        if label_name is None and not texts_only and preset is not None and label_col is None:
            _refuse_unread_gold(path, preset, label_cols, columns, task=task, keys=keys)
        if start is not None and start.offset:
            records = _records(path, lines.seek(start, names), fmt, header=columns)
        else:
            records = itertools.chain([first], records)

        map_said = "" if keys.recipe else keys.said("label_map")  # a recipe has no label map to set
        # a JSON row has keys of its own: gold that the first row lacks would go unread in every row
        unread = label_cols if label_name is None and fmt in ("jsonl", "json") else ()
        at = {col: f"column {quoted(col)}" for col in (query_col, title_col, label_name)}  # once, not per row

        def gold(row, line):
            where = f"{path}, line {line}, {at[label_name]}"
            if score:
                return to_score(row.get(label_name), where)
            return grades.index(to_grade(row.get(label_name), label_map, grades, where, grades_fix, map_said))

        queries, titles, labels, numbers, chars = [], [], [], [], 0
        for line, row in records:
            numbers.append(line)
            queries.append(to_text(row.get(query_col), f"{path}, line {line}, {at[query_col]}"))
            titles.append(to_text(row.get(title_col), f"{path}, line {line}, {at[title_col]}"))
            chars += len(queries[-1]) + len(titles[-1])
            if unread:
                _refuse_late_gold(path, row, line, unread, first_line=first[0])
            if label_name is not None:
                labels.append(gold(row, line))
            if len(queries) == chunk_rows or (chunk_chars is not None and chars >= chunk_chars):
                yield Chunk(_pairs(queries, titles, labels if label_name is not None else None, grades, path, score,
                                   numbers, keys), lines.position())
                queries, titles, labels, numbers, chars = [], [], [], [], 0
        if queries or (chunk_rows is None):
            yield Chunk(_pairs(queries, titles, labels if label_name is not None else None, grades, path, score,
                               numbers, keys), lines.position())


def _refuse_shared_gold(gold: str | None, label_col: str | None, texts: dict, keys: "Named") -> None:
    """A gold column `gold` that the queries or titles (`texts`: their option -> column) are read from too: its
    cells would be read as both, and one of them refused row by row with a fix that does not fit."""
    option = next((option for option, col in texts.items() if col == gold), None)
    if option is None:
        return
    held = {"query_col": "queries", "title_col": "titles"}[option]
    if label_col is not None:
        raise UserError(f"{keys.said('label_col')} names column {quoted(gold)}, which holds the {held}; name the "
                        f"gold column, or leave {keys.said('label_col')} out.")
    raise UserError(f"{keys.said(option)} names column {quoted(gold)}, which holds the gold; name the {held}' own "
                    "column.")


def _refuse_late_gold(path: Path, row: dict, line: int, gold: tuple, *, first_line: int) -> None:
    """A JSON row holding a gold column (`gold`: the names it may have) that the first row, whose keys are the file's
    columns, lacks: refused, since that gold would be read in no row (a partly graded file was read as ungraded;
    a null gold is refused as empty, so the fix is a value in each row, a file of the graded rows, or no gold)."""
    col = next((c for c in gold if row.get(c) not in (None, "")), None)  # null: no gold, as an empty cell
    if col is not None:
        raise UserError(f"{path}, line {line} has a gold column {quoted(col)}, which line {first_line} (the first "
                        f"row, whose keys are the file's columns) lacks, so no row's {quoted(col)} would be read; give "
                        f"each row without one its {quoted(col)} (null is refused as empty), move the graded rows to "
                        f"a file of their own, or drop {quoted(col)} from every row to read the file without gold.")


def _check_column_names(path: Path, keys: "Named", **columns) -> None:
    """A column option given as blank text would read as not given (the preset's column, unsaid)."""
    for option, name in columns.items():
        if name is not None and not str(name).strip():
            said = keys.key(option)
            raise UserError(f"{said} is empty; name a column of {path}, or leave it out for the preset's column.")


@dataclass(frozen=True)
class Named:
    """How read_pairs' messages name its options for the caller's user (its `names` and `keys`), by the one naming
    rule, headcut_grader.errors.named."""

    names: str = "arguments"
    keys: str | dict | None = None

    @property
    def recipe(self) -> bool:
        return isinstance(self.keys, str) or self.names == "keys"

    def key(self, option: str) -> str:
        """`option`'s name for the caller's user: label_map, --label-map, or a recipe's key data.label_map."""
        if isinstance(self.keys, str):  # a recipe's keys under that prefix
            return errors.named(option, "keys", section=self.keys.rstrip("."))
        spelled = {"flags": self.keys} if isinstance(self.keys, dict) else None
        return errors.named(option, self.names, section="data", spelled=spelled)

    def said(self, option: str) -> str:
        """`option` as the caller's user passes it: label_map, --label-map, or a recipe key's --set data.label_map."""
        return "--set " + self.key(option) if self.recipe else self.key(option)

    def fix(self, option: str) -> str:
        """What sets `option` (query_col, title_col, label_col) to a column: --label-col, --set data.label_col=NAME,
        label_col=NAME."""
        said = self.said(option)
        return said if errors.caller(said) == "flags" else f"{said}=NAME"


def text_columns(preset: str | None, query_col: str | None, title_col: str | None) -> tuple[str, str]:
    """The columns the queries and titles are read from: those named, else the preset's."""
    p = PRESETS.get(preset, Preset())
    return query_col or p.query_col, title_col or p.title_col


def check_preset(preset, said: str) -> None:
    """A preset that is not None nor one of PRESETS, one sentence; `said`: the setting with its value, as its
    caller wrote it (--preset 'x', settings.preset='x')."""
    if preset is not None and (not isinstance(preset, str) or preset not in PRESETS):
        raise UserError(f"{said} is unknown; choose one of: {', '.join(PRESETS)}.")


def _format_of(path: Path, preset: str | None, fmt: str | None, keys: Named) -> tuple[Preset, str]:
    """The preset's settings and the file's format: the file's own suffix says more than a preset's usual format
    (a Home Depot export saved as .jsonl)."""
    check_preset(preset, f"key '{keys.key('preset')}' is {quoted(preset)}, which" if keys.recipe
                 else setting(keys.said("preset"), quoted(preset)))
    p = PRESETS.get(preset, Preset())
    check_regular(path)
    fmt = fmt or _suffix_format(path) or p.fmt or _input_format(path)
    if fmt not in FORMATS:
        raise UserError(f"format {quoted(fmt)} is unknown; choose one of: {', '.join(FORMATS)}.")
    return p, fmt


def _json_hint(lines, fmt: str) -> str:
    if fmt in ("tsv", "csv") and lines.first_text.lstrip().startswith(("{", "[")):
        return f"; it was read as {fmt.upper()}, but it looks like JSON lines: name it .jsonl"
    return ""


def _shown(columns: list, lines, fmt: str) -> str:
    """The file's columns for a message (the first 200 characters), with a hint when it looks like JSON lines."""
    shown = ", ".join(map(quoted, columns))
    return (shown if len(shown) <= 200 else shown[:200] + "...") + _json_hint(lines, fmt)


def _columns(path: Path, first, lines, fmt: str, needed: tuple[str, str], keys: Named, *, gold: tuple = ()) -> list:
    """The columns the first row names, refusing a file without rows or without the query or title column; `gold`: the
    names a gold column may have, which tell a header from a first line of data."""
    if first is None:
        if fmt == "json":  # a JSON file has no header to hold
            raise UserError(f"{path}: no rows: the file is an empty JSON array; pass pairs as objects in it.")
        raise UserError(f"{path}: no data rows; the file holds a header at most{_json_hint(lines, fmt)}.")
    columns = list(first[1].keys())
    for col, option in zip(needed, ("query_col", "title_col")):
        if col not in columns:
            fix = _nested_fix(first[1]) or _header_fix(columns, col, needed, fmt, keys.fix(option), gold=gold)
            raise UserError(f"{path}: no column {quoted(col)} (columns: {_shown(columns, lines, fmt)}); {fix}.")
    return columns


def _nested_fix(row: dict) -> str | None:
    """The fix for a JSON row of one key that holds a list: pairs nested in an object (a request body of `serve` saved
    as a file), where naming the key as a column would read the list as one text."""
    if len(row) == 1 and isinstance(next(iter(row.values())), list):
        return (f"its one key {quoted(next(iter(row)))} holds a list (a request body of `serve`?): write each pair as "
                "an object of its own, one per line (JSON lines) or in a JSON array")
    return None


# the other separator a header of one column may hold, and the suffix that reads it
_SEPARATORS = {"csv": ("\t", "tabs", "tsv"), "tsv": (",", "commas", "csv")}


# separators of delimited text that neither CSV nor TSV splits by, as a sentence names them
_OTHER_SEPARATORS = {";": "semicolons (a spreadsheet's CSV in some languages)", "|": "vertical bars"}


def _header_fix(columns: list, col: str, needed: tuple[str, str], fmt: str, fix: str, *, gold: tuple = ()) -> str:
    """The fix for a header without column `col`, where naming the column with `fix` (--query-col) is not it: a header
    split by the other format's separator, a first line of data (no header: naming a column by a cell would read
    that row as the header, and drop it; a line with a cell that names a needed or `gold` column, in any case, is a
    header, whatever its other columns are called: 2023), or a column named in another case."""
    separator, held, suffix = _SEPARATORS.get(fmt, (None, "", ""))
    if separator and len(columns) == 1 and separator in columns[0]:
        return f"its header holds {held}, so it was read as one column: name the file .{suffix}"
    other = next((sep for sep in _OTHER_SEPARATORS if fmt in _SEPARATORS and len(columns) == 1
                  and col in str(columns[0]).split(sep)), None)
    if other is not None:  # naming the column with `fix` would name the whole header line
        return (f"its header is split by {_OTHER_SEPARATORS[other]}, which neither CSV nor TSV splits by: save it "
                "with commas (.csv) or tabs (.tsv)")
    number = next((c for c in columns if fmt in _SEPARATORS and _is_number(c)), None)
    names = {str(name).casefold() for name in (*needed, *gold)}
    if number is not None and not any(str(c).casefold() in names for c in columns):
        return (f"its first line looks like data ({quoted(number)} is a number), and the first line must be the "
                f"header: add one above it naming the columns ({', '.join(needed)} and the gold column)")
    return _name_fix(columns, col, fix)


def _name_fix(columns: list, col: str, fix: str) -> str:
    """Name the column with `fix` (--label-col), and as which where one differs from `col` in case only; where one
    differs by a character that does not print (NUL, a byte-order mark), which no shell can type, fix the file."""
    hidden = next((c for c in columns if isinstance(c, str) and not c.isprintable()
                   and _printed(c).casefold() == col.casefold()), None)
    if hidden is not None:
        held = _char_said(next(ch for ch in hidden if not ch.isprintable()))
        return (f"column {quoted(hidden)} holds an invisible character ({held}): delete it from the column's name in "
                "the file")
    near = next((c for c in columns if isinstance(c, str) and c.casefold() == col.casefold()), None)
    if near is None:
        return f"name it with {fix}"
    named = fix[:-len("NAME")] + near if fix.endswith("=NAME") else f"{fix} {near}"
    return f"column {quoted(near)} differs in case only (names are case-sensitive): name it with {named}"


def _printed(name: str) -> str:
    return "".join(ch for ch in name if ch.isprintable())


_CHAR_NAMES = {"\x00": "NUL", "\ufeff": "a byte-order mark, BOM"}


def _char_said(ch: str) -> str:
    """A character that does not print, as a message names it: 'U+0000, NUL', 'U+200B, zero width space'."""
    name = _CHAR_NAMES.get(ch) or unicodedata.name(ch, "a control character").lower()
    return f"U+{ord(ch):04X}, {name}"


def _is_number(cell) -> bool:
    try:
        return math.isfinite(cell_number(str(cell).strip()))
    except ValueError:
        return False


def _pairs(queries, titles, gold, grades, path, score: bool, lines: list[int], keys: Named) -> Pairs:
    read = dict(lines=lines, gold_option=keys.fix("label_col"))
    if score:
        return Pairs(queries, titles, None, tuple(grades), str(path), scores=gold, **read)
    return Pairs(queries, titles, gold, tuple(grades), str(path), **read)


def _missing_gold(path, wanted: str, shown: str, columns: list, preset: Preset, *, task: str,
                  fix: str) -> str:
    """No gold column for the model's task: say so, and say when the file has the other task's column."""
    found = _other_gold(columns, preset, task=task)
    if task == "score":
        if found:
            return (f"{path} has grades ({quoted(found)}) but no score column {quoted(wanted)}, and this model is "
                    f"a one-score reranker (task score); pass a file with a numeric score column (or name it with "
                    f"{fix}), or use a grades model.")
        return f"{path}: no score column {quoted(wanted)} (columns: {shown}); {_name_fix(columns, wanted, fix)}."
    if found:
        return (f"{path} has scores ({quoted(found)}) but no grade column {quoted(wanted)}, and this model grades "
                f"(task grades); pass graded pairs (or name the grade column with {fix}), or use a one-score model.")
    return f"{path}: no label column {quoted(wanted)} (columns: {shown}); {_name_fix(columns, wanted, fix)}."


def _other_gold(columns: list, preset: Preset, *, task: str) -> str | None:
    """The file's gold column of the other task than the model's (a grade column for a score model), or None."""
    other = preset.label_cols if task == "score" else preset.score_cols
    return next((c for c in other if c in columns), None)


def _refuse_unread_gold(path: Path, preset: str, wanted: tuple, columns: list, *, task: str, keys: Named) -> None:
    """A named preset whose gold column the file lacks, in a file holding another preset's gold column: where gold
    is optional (grade, scan) that gold would go unread (no true_grade), so the preset is refused for the file."""
    gold = {name: p.score_cols if task == "score" else p.label_cols for name, p in PRESETS.items()}
    found = next((c for c in columns if any(c in cols for cols in gold.values())), None)
    if found is None:
        return
    fits = next(name for name, cols in gold.items() if found in cols)
    key = keys.key("preset")
    said = f"key '{key}' {quoted(preset)}" if keys.recipe else setting(key, quoted(preset))
    use = f"set {key} to '{fits}'" if keys.recipe else f"pass {setting(key, fits)}"
    raise UserError(f"{path} has no column {' or '.join(map(quoted, wanted))}, where {said} reads the gold, and "
                    f"its gold column {quoted(found)} would go unread; {use} (it reads {quoted(found)}) for this "
                    f"file, or name the gold column with {keys.fix('label_col')}.")


def _suffix_format(path: Path) -> str | None:
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower().lstrip("."))
    if fmt == "json":
        # QBQTC ships JSON lines under .json: look at the first non-blank character.
        head = b""
        if path.is_file():
            with open(path, "rb") as f:
                head = f.read(4096).removeprefix(b"\xef\xbb\xbf").lstrip()  # after a BOM
        return "json" if head.startswith(b"[") else "jsonl"
    return fmt


# suffixes of spreadsheets, which hold pairs but are no text to read
_SPREADSHEETS = (".xlsx", ".xlsm", ".xls", ".ods", ".numbers")


def _input_format(path: Path) -> str:
    """guess_format for a file to read, which says what it is where its suffix names no format: a compressed file
    (p.tsv.gz, told to be named .tsv, was then told it is gzip-compressed) or a spreadsheet."""
    if path.suffix.lower() in _SPREADSHEETS:
        raise UserError(f"{path} is a spreadsheet, which is not read; save it as CSV (UTF-8) or as tab-separated "
                        "text and pass that.")
    if fix := packed_fix(path):
        raise UserError(f"{path}: {fix}.")
    return guess_format(path)


def guess_format(path: Path) -> str:
    """The format a file's suffix names (.txt counts as TSV)."""
    path = Path(path)
    fmt = _suffix_format(path) or ("tsv" if path.suffix.lower() == ".txt" else None)
    if fmt is None:
        raise UserError(f"{path}: cannot tell the format from the suffix {quoted(path.suffix)}; "
                        "name the file .tsv, .csv, .jsonl or .json.")
    return fmt


def _records(path: Path, lines: Lines, fmt: str, *, header: list[str] | None = None):
    """(line number, row dict) of each data row; `header` given: `lines` starts after the header (a resume)."""
    if fmt in ("tsv", "csv"):
        csv.field_size_limit(max(csv.field_size_limit(), MAX_TEXT_CHARS + 1))  # the text rule decides, not csv
        # strict: a quote never closed, or text after a closing quote, is an error (not folded into one field)
        reader = csv.reader(iter(lines), delimiter="\t" if fmt == "tsv" else ",", strict=True)
        records = _csv_records(path, reader, lines)
        if header is None:
            line, header = next(records, (0, None))
            if not header:
                raise UserError(f"{path}: no header row; the first line must name the columns.")
            header = [h.strip() for h in header]
            _refuse_repeats(header, f"{path}, line {line}: the header")
        for line, record in records:
            if not record or all(not c.strip() for c in record):
                continue
            if len(record) != len(header):
                raise UserError(_ragged(path, line, len(record), header, fmt))
            yield line, dict(zip(header, record))
    elif fmt == "jsonl":
        number = lines.number
        first = number == 0  # the file's first object, not a resume's
        for text in lines:
            for chunk in _json_lines(text):
                number += 1
                if not chunk.strip():
                    continue
                try:
                    obj = json.loads(chunk, object_pairs_hook=unique_keys(f"{path}, line {number}: the object"),
                                     parse_int=bounded_int)
                except json.JSONDecodeError as e:
                    raise _json_line_error(path, number, chunk, e, first=first) from None
                except RecursionError:
                    raise UserError(f"{path}, line {number}: JSON nested too deeply; fix that line.") from None
                first = False
                if not isinstance(obj, dict):
                    raise UserError(f"{path}, line {number}: expected a JSON object per line; fix that line.")
                yield number, obj
    else:  # a row's "line" is its item number in the array, 1-based
        decoder = json.JSONDecoder(object_pairs_hook=unique_keys(f"{path}: an object"), parse_int=bounded_int)
        yield from json_array_items(lines, decoder)


def _ragged(path: Path, line: int, fields: int, header: list[str], fmt: str) -> str:
    """The sentence for row `line` of `fields` fields under a header of another count. Where the header alone is
    at fault, it is named: a separator at the end of the header line (a spreadsheet's export) makes an unnamed last
    column that no row has, and 'fix the row' sent the user to rows that are right."""
    separator = "tab" if fmt == "tsv" else "comma"
    named = len(header)
    while named and not header[named - 1]:
        named -= 1
    unnamed = len(header) - named
    if unnamed and fields == named:
        what, ends = ("an unnamed column", f"the {separator}") if unnamed == 1 else \
            (f"{unnamed} unnamed columns", f"the {unnamed} {separator}s")
        return (f"{path}, line 1: the header ends in {what} that line {line} does not have; delete {ends} at the end "
                "of the header line.")
    cause = (f"a missing {separator}" if fields < len(header) else  # a cell left out
             f"a stray {separator}" + ("" if fmt == "tsv" else " or quote"))
    return (f"{path}, line {line}: {counted(fields, 'field')} where the header has {len(header)}; fix the row "
            f"({cause}?).")


def _json_line_error(path: Path, number: int, chunk: str, error: json.JSONDecodeError, *, first: bool) -> UserError:
    """The sentence for JSON line `number` that does not parse: the file's first object cut at its line's end is one
    JSON object written over several lines (json.dump(..., indent=2): a pretty-printed request body of `serve`), no
    line of JSON lines to fix."""
    if first and error.pos >= len(chunk.rstrip()):
        return UserError(f"{path}, line {number}: a JSON object goes on past the end of the line, and JSON lines hold "
                         "one whole object per line (a pretty-printed file, or a request body of `serve`?); write each "
                         "pair as an object on a line of its own, or the pairs in a JSON array [{...}, {...}].")
    return UserError(f"{path}, line {number}, column {error.colno}: invalid JSON ({error.msg}); fix that line.")


# JSON lines end at LF, CRLF or a lone CR; U+2028, U+2029 and U+0085, where str.splitlines also splits, may stand
# unescaped inside a JSON string (json.dumps(ensure_ascii=False) writes them so)
_LINE_BREAK = re.compile(r"\r\n?|\n")


def _json_lines(text: str) -> list[str]:
    """The JSON lines in `text` (one line as Lines reads it, which holds more where lines end with a lone CR)."""
    pieces = _LINE_BREAK.split(text)
    return pieces[:-1] if len(pieces) > 1 and not pieces[-1] else pieces


def _refuse_repeats(names: list, where: str, noun: str = "column") -> None:
    """A column named twice is ambiguous (which one holds the text?): refused, naming it."""
    seen = set()
    for name in names:
        if name and name in seen:
            raise UserError(f"{where} names {noun} {quoted(name)} twice; rename or remove one of them.")
        seen.add(name)


def bounded_int(text: str) -> int | float:
    """json.loads' parse_int: a whole number of over 300 significant digits is read as a float (inf past 1e308),
    which every range check then refuses in its sentence; Python refuses ints of over 4,300 digits with a bare
    ValueError."""
    return int(text) if len(significant_digits(text)) <= 300 else float(text)


def unique_keys(where: str):
    """json.loads' object_pairs_hook: a dict, refusing a key given twice."""
    def build(pairs):
        _refuse_repeats([key for key, _ in pairs], where, noun="key")
        return dict(pairs)

    return build


def _csv_records(path: Path, reader, lines: Lines):
    """(line, fields) of each record, `line` the one it begins on: a quoted field may run on over lines, and a
    quote opened on one row and closed on a later one is that first row's fault, not the later one's."""
    while True:
        start = lines.number + 1  # the line the next record begins on
        try:
            yield start, next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # a quoted field running on over many lines, or to the end of the file
            ran_on = f" (it runs on to line {lines.number})" if lines.number > start else ""
            if "field larger" in str(e):
                text = f"line {start}: the text is longer than {MAX_TEXT_CHARS:,} characters{ran_on}"
            elif "unexpected end of data" in str(e):
                text = f"line {start}: a quote opened on this row is never closed"
            elif "expected after" in str(e) and ran_on:
                text = (f"line {start}: a quote opened on this row closes only on line {lines.number}, where text "
                        "follows it (a quote inside a field is written doubled, or the field left unquoted)")
            elif "expected after" in str(e):
                text = (f"line {lines.number}: text follows the closing quote of a field (a quoted field holds its "
                        "quotes doubled)")
            elif "new-line character seen in unquoted field" in str(e):  # lines ended by CR alone (classic Mac)
                raise UserError(f"{path}, line {start}: a carriage return (CR) without a line feed (LF) outside "
                                "quotes; save the file with LF or CRLF line endings (or quote a field that holds a "
                                "CR).") from None
            else:
                text = f"line {lines.number}: {e}"
            raise UserError(f"{path}, {text}; check the quotes on that row.") from None
