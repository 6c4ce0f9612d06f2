"""Query-title-grade pairs: reading files, presets, label maps, query groups, a synthetic default.

Labels are class indices 0..G-1; grades are what people say (1..5 by default): grade = grades[label].
A one-score model (task `score`) reads a numeric column into `scores` instead (Home Depot: `score`, 1.0-3.0).
"""
from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from headcut_grader.errors import UserError
from headcut_grader.tasks import TASKS  # noqa: F401  (what Pairs.task names)

DEFAULT_GRADES = (1, 2, 3, 4, 5)
FIX_ROW = "fix the row or drop it"  # what a grade outside the grades calls for where no flag or key sets them
FORMATS = ("tsv", "csv", "jsonl", "json")
# One rule for every format: a query or title may hold up to MAX_TEXT_CHARS characters (a grader reads only
# its first max_length tokens, so longer texts are almost surely a broken file). Lines of TSV/CSV/JSON lines
# are read with a cap, so a file without newlines cannot fill the memory before that rule is reached.
MAX_TEXT_CHARS = 1_000_000
MAX_LINE_BYTES = 8_000_000
# A chunk of rows also ends once its texts pass this many characters, so that memory stays bounded for titles of
# any length (10,000 rows of 1M characters would be 10 GB of text): a chunk holds less than CHUNK_CHARS plus one
# row of 2 * MAX_TEXT_CHARS. Ordinary rows (10,000 of ~100 characters) never reach it.
CHUNK_CHARS = 8_000_000
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tab, newline and carriage return are text
_SUFFIX_FORMATS = {"tsv": "tsv", "csv": "csv", "jsonl": "jsonl", "ndjson": "jsonl", "json": "json"}


@dataclass(frozen=True)
class Preset:
    query_col: str = "query"
    title_col: str = "title"
    label_cols: tuple[str, ...] = ("grade",)  # first one present wins
    label_map: dict | None = None  # raw label text -> grade; None: the label is the grade
    fmt: str | None = None
    score_cols: tuple[str, ...] = ("score",)  # what a one-score model learns and is judged on


PRESETS = {
    # Home Depot: grade 1..5 already derived from the raters' mean score (see ../shared/data/README).
    "homedepot": Preset(fmt="tsv"),
    # QBQTC: the 2021 release calls the field `relevant`, the current one `label`; 0/1/2 -> 1/3/5.
    "qbqtc": Preset(label_cols=("relevant", "label"), label_map={"0": 1, "1": 3, "2": 5}, fmt="jsonl"),
}


@dataclass(frozen=True)
class Pairs:
    """Parallel lists of queries, titles and labels (0-based class indices, or None when unlabeled); `scores`:
    numeric gold scores for a one-score model (task `score`) instead of labels."""

    queries: list[str]
    titles: list[str]
    labels: list[int] | None
    grades: tuple[int, ...] = DEFAULT_GRADES
    source: str = "<memory>"
    fingerprint: str = field(default="", compare=False)
    scores: list[float] | None = None

    def __post_init__(self):
        if not self.fingerprint:
            gold = self.labels if self.scores is None else self.scores
            object.__setattr__(self, "fingerprint", fingerprint(self.queries, self.titles, gold))

    @property
    def task(self) -> str | None:
        """What the gold of these pairs fits: `score`, `grades`, or None when unlabeled."""
        return "score" if self.scores is not None else ("grades" if self.labels is not None else None)

    def score_array(self) -> np.ndarray:
        if self.scores is None:
            raise UserError(f"{self.source} has no scores; pass a file with a numeric score column (--label-col).")
        return np.asarray(self.scores, dtype=np.float64)

    def provenance(self) -> dict:
        """What a record says about the pairs it was computed on: their source, fingerprint and count."""
        return {"source": self.source, "fingerprint": self.fingerprint, "rows": len(self)}

    def __len__(self) -> int:
        return len(self.queries)

    @property
    def has_labels(self) -> bool:
        return self.labels is not None

    def label_array(self) -> np.ndarray:
        if self.labels is None:
            raise UserError(f"{self.source} has no labels; pass a file with a grade column (--label-col).")
        return np.asarray(self.labels, dtype=np.int64)

    def subset(self, indices) -> "Pairs":
        idx = [int(i) for i in indices]
        return Pairs(
            [self.queries[i] for i in idx],
            [self.titles[i] for i in idx],
            None if self.labels is None else [self.labels[i] for i in idx],
            self.grades,
            self.source,
            scores=None if self.scores is None else [self.scores[i] for i in idx],
        )

    def query_groups(self) -> list[np.ndarray]:
        """Row indices of each query, in first-seen order (for NDCG and query-level splits)."""
        return query_groups(self.queries)

    def split_by_query(self, fraction: float, *, seed: int = 0) -> tuple["Pairs", "Pairs"]:
        """Split so that all pairs of one query land on the same side; `fraction` of queries go first."""
        groups = self.query_groups()
        order = list(range(len(groups)))
        random.Random(seed).shuffle(order)
        cut = int(round(fraction * len(groups)))
        first = sorted(i for g in order[:cut] for i in groups[g])
        second = sorted(i for g in order[cut:] for i in groups[g])
        return self.subset(first), self.subset(second)

    def sample(self, n: int | None, *, seed: int = 0) -> "Pairs":
        """A reproducible random subset of n rows (all rows when n is None or >= len)."""
        if n is None or n >= len(self):
            return self
        rows = sorted(random.Random(seed).sample(range(len(self)), n))
        return self.subset(rows)


def query_groups(queries: list[str]) -> list[np.ndarray]:
    seen: dict[str, list[int]] = {}
    for i, q in enumerate(queries):
        seen.setdefault(q, []).append(i)
    return [np.asarray(v) for v in seen.values()]


def fingerprint(queries, titles, labels) -> str:
    """A short content hash, so a score file can be checked against the data it was computed on."""
    h = hashlib.sha256()
    for i, (q, t) in enumerate(zip(queries, titles)):
        h.update(q.encode())
        h.update(b"\t")
        h.update(t.encode())
        h.update(b"\t")
        h.update(b"" if labels is None else str(labels[i]).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def parse_label_map(text: str | None) -> dict | str | None:
    """`--label-map` as '0:1,1:3,2:5' (raw -> grade), 'round' (float score -> nearest grade), or None."""
    if text is None or text == "":
        return None
    if text == "round":
        return "round"
    out = {}
    for item in text.split(","):
        raw, sep, grade = item.partition(":")
        if not sep or not grade.strip().lstrip("-").isdigit():
            raise UserError(
                f"--label-map item '{item}' is not RAW:GRADE; write e.g. --label-map 0:1,1:3,2:5 or --label-map round."
            )
        out[raw.strip()] = int(grade)
    return out


def read_pairs(
    path: str | Path,
    *,
    preset: str | None = None,
    query_col: str | None = None,
    title_col: str | None = None,
    label_col: str | None = None,
    label_map: dict | str | None = None,
    grades: tuple[int, ...] = DEFAULT_GRADES,
    grades_fix: str = FIX_ROW,
    fmt: str | None = None,
    require_labels: bool = True,
    limit: int | None = None,
    task: str = "grades",
) -> Pairs:
    """Read pairs from TSV, CSV, JSON lines or a JSON array.

    Every problem a user can cause raises `UserError` naming the file, line and column.
    `label_map` maps raw label text to a grade, or is 'round' for float scores. A grade outside `grades` is
    refused with `grades_fix`: what the caller's user can do about it (a flag or recipe key they have).
    With `require_labels=False` a file without a label column gives unlabeled pairs.
    `task="score"` reads the preset's score column (or `label_col`) as numbers into `Pairs.scores`.
    """
    chunk = next(iter_pairs(path, chunk_rows=limit, chunk_chars=None, preset=preset, query_col=query_col,
                            title_col=title_col, label_col=label_col, label_map=label_map, grades=grades,
                            grades_fix=grades_fix, fmt=fmt,
                            require_labels=require_labels, task=task))
    return chunk.pairs


@dataclass(frozen=True)
class Chunk:
    """Consecutive rows of a file, and where the rows after them start (to resume a run there)."""

    pairs: Pairs
    position: "Position"


@dataclass(frozen=True)
class Position:
    """After a row: `offset` bytes of the file read (JSON arrays: items), on line `line`; `sha256` of those bytes
    (JSON arrays: of the whole file), so a resumed run can tell that the rows before it are unchanged."""

    offset: int = 0
    line: int = 0
    sha256: str = ""


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
    grades_fix: str = FIX_ROW,
    fmt: str | None = None,
    require_labels: bool = True,
    start: Position | None = None,
    task: str = "grades",
):
    """The rows of a file as Chunks of `chunk_rows` pairs, or fewer where their texts pass `chunk_chars` characters
    (None: no limit), read as they are needed: memory holds one chunk whatever the file's size (JSON arrays, which
    cannot be read in parts, excepted).

    From `start` (a Chunk's position), reading continues after that row; the file's first row still names the
    columns. Problems raise the same sentences as `read_pairs`, with the true line numbers.
    """
    path = Path(path)
    if preset is not None and preset not in PRESETS:
        raise UserError(f"--preset '{preset}' is unknown; choose one of: {', '.join(PRESETS)}.")
    p = PRESETS.get(preset, Preset())
    check_regular(path)
    # The file's own suffix says more than a preset's usual format (a Home Depot export saved as .jsonl).
    fmt = fmt or _suffix_format(path) or p.fmt or guess_format(path)
    if fmt not in FORMATS:
        raise UserError(f"format '{fmt}' is unknown; choose one of: {', '.join(FORMATS)}.")
    query_col = query_col or p.query_col
    title_col = title_col or p.title_col
    score = task == "score"
    label_cols = (label_col,) if label_col else (p.score_cols if score else p.label_cols)
    label_map = label_map if label_map is not None else p.label_map

    with _Lines(path, capped=fmt != "json") as lines:
        records = _records(path, lines, fmt)  # (line_number, dict), lazily
        first = next(records, None)
        hint = ""
        if fmt in ("tsv", "csv") and lines.first_text.lstrip().startswith(("{", "[")):
            hint = f"; it was read as {fmt.upper()}, but it looks like JSON lines: name it .jsonl"
        if first is None:
            raise UserError(f"{path}: no data rows; the file holds a header at most{hint}.")
        columns = list(first[1].keys())
        shown = ", ".join(columns)
        shown = (shown if len(shown) <= 200 else shown[:200] + "...") + hint
        for col, flag in ((query_col, "--query-col"), (title_col, "--title-col")):
            if col not in columns:
                raise UserError(f"{path}: no column '{col}' (columns: {shown}); name it with {flag}.")
        label_name = next((c for c in label_cols if c in columns), None)
        if label_name is None and require_labels:
            raise UserError(_missing_gold(path, label_cols[0], shown, columns, p, task=task))
        if start is not None and start.offset:
            records = _records(path, lines.seek(start), fmt, header=columns)
        else:
            records = itertools.chain([first], records)
        queries, titles, labels, chars = [], [], [], 0
        for line, row in records:
            for col in (query_col, title_col):
                (queries if col == query_col else titles).append(
                    _to_text(row.get(col), f"{path}, line {line}, column '{col}'"))
            chars += len(queries[-1]) + len(titles[-1])
            if label_name is not None:
                where = f"{path}, line {line}, column '{label_name}'"
                if score:
                    labels.append(_to_score(row.get(label_name), where))
                else:
                    grade = _to_grade(row.get(label_name), label_map, grades, where, grades_fix)
                    labels.append(grades.index(grade))
            if len(queries) == chunk_rows or (chunk_chars is not None and chars >= chunk_chars):
                yield Chunk(_pairs(queries, titles, labels if label_name is not None else None, grades, path, score),
                            lines.position())
                queries, titles, labels, chars = [], [], [], 0
        if queries or (chunk_rows is None):
            yield Chunk(_pairs(queries, titles, labels if label_name is not None else None, grades, path, score),
                        lines.position())


def _pairs(queries, titles, gold, grades, path, score: bool) -> Pairs:
    if score:
        return Pairs(queries, titles, None, tuple(grades), str(path), scores=gold)
    return Pairs(queries, titles, gold, tuple(grades), str(path))


def _missing_gold(path, wanted: str, shown: str, columns: list, preset: Preset, *, task: str) -> str:
    """No gold column for the model's task: say so, and say when the file has the other task's column."""
    other = preset.label_cols if task == "score" else preset.score_cols
    found = next((c for c in other if c in columns), None)
    if task == "score":
        if found:
            return (f"{path} has grades ('{found}') but no score column '{wanted}', and this model is a one-score "
                    "reranker (task score); pass a file with a numeric score column (or name it with --label-col), "
                    "or use a grades model.")
        return f"{path}: no score column '{wanted}' (columns: {shown}); name it with --label-col."
    if found:
        return (f"{path} has scores ('{found}') but no grade column '{wanted}', and this model grades (task grades); "
                "pass graded pairs (or name the grade column with --label-col), or use a one-score model.")
    return f"{path}: no label column '{wanted}' (columns: {shown}); name it with --label-col."


def _suffix_format(path: Path) -> str | None:
    fmt = _SUFFIX_FORMATS.get(path.suffix.lower().lstrip("."))
    if fmt == "json":
        # QBQTC ships JSON lines under .json: look at the first non-blank character.
        head = b""
        if path.is_file():
            with open(path, "rb") as f:
                head = f.read(4096).lstrip()
        return "json" if head.startswith(b"[") else "jsonl"
    return fmt


def guess_format(path: Path) -> str:
    """The format a file's suffix names (.txt counts as TSV)."""
    path = Path(path)
    fmt = _suffix_format(path) or ("tsv" if path.suffix.lower() == ".txt" else None)
    if fmt is None:
        raise UserError(f"{path}: cannot tell the format from the suffix '{path.suffix}'; "
                        "name the file .tsv, .csv, .jsonl or .json.")
    return fmt


def check_regular(path: Path) -> None:
    """A user's input file must be a regular file: a FIFO would block a read, /dev/zero never ends."""
    if not path.exists():
        raise UserError(f"{path}: no such file; check the path.")
    if path.is_dir():
        raise UserError(f"{path} is a folder; pass a data file (TSV, CSV, JSON lines or JSON).")
    if not path.is_file():
        raise UserError(f"{path} is not a regular file (a pipe, device or socket); save the pairs to a file "
                        "and pass that.")


class _Lines:
    """A file's lines as text, read one at a time with a cap on a line's bytes; it knows how far it has read
    (bytes, lines, and a hash of those bytes) so a reader can resume after any row. JSON arrays are read whole."""

    def __init__(self, path: Path, *, capped: bool):
        self.path, self.capped = path, capped
        self.number, self.offset, self.first_text = 0, 0, ""
        self.hash, self.expected = hashlib.sha256(), None
        self.file = open(path, "rb")
        blank = True
        for raw in iter(lambda: self.file.readline(MAX_LINE_BYTES + 1) if capped else self.file.read(), b""):
            if raw.strip():
                blank = False
                break
        if blank:
            self.file.close()
            raise UserError(f"{path} is empty; pass a file with a header and data rows.")
        self.file.seek(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def __iter__(self):
        while True:
            at_start = self.file.tell() == 0
            raw = self.file.readline(MAX_LINE_BYTES + 1) if self.capped else self.file.read()
            if not raw:
                return
            self.number += 1
            if self.capped and len(raw) > MAX_LINE_BYTES:
                raise UserError(f"{self.path}, line {self.number} is longer than {MAX_LINE_BYTES:,} bytes; a row holds "
                                "one query, title and grade: is this the right file?")
            self.offset += len(raw)
            self.hash.update(raw)
            try:
                text = raw.decode("utf-8-sig" if at_start else "utf-8")
            except UnicodeDecodeError as e:
                line = self.number + raw[: e.start].count(b"\n")  # a JSON array is one "line" of many
                col = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
                raise UserError(f"{self.path}, line {line}, byte column {col}: not UTF-8 (byte 0x{raw[e.start]:02x}); "
                                "re-save the file as UTF-8.") from None
            if not self.first_text and text.strip():
                self.first_text = text
            yield text

    def position(self) -> Position:
        return Position(self.offset, self.number, self.hash.hexdigest())

    def seek(self, start: Position) -> "_Lines":
        """Continue after `start`, which a run over these same bytes reported; refuse if they have changed."""
        if not self.capped:  # a JSON array: read again, skip start.offset items, compare the whole file's hash
            self.file.seek(0)
            self.number, self.offset, self.hash, self.expected = 0, start.offset, hashlib.sha256(), start.sha256
            return self
        self.hash = _prefix_hash(self.path, start.offset)
        self.expected = start.sha256
        self.check_unchanged()
        self.file.seek(start.offset)
        self.number, self.offset = start.line, start.offset
        return self

    def check_unchanged(self) -> None:
        if self.hash.hexdigest() != self.expected:
            raise UserError(f"{self.path} has changed since the interrupted run read it; grade it from the start "
                            "(run without --resume, with --overwrite).")


def _prefix_hash(path: Path, nbytes: int):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while nbytes > 0:
            block = f.read(min(nbytes, 1 << 20))
            if not block:
                break
            h.update(block)
            nbytes -= len(block)
    return h


def prefix_sha256(path: str | Path, nbytes: int) -> str:
    """The hash a Position records: of the first `nbytes` bytes of the file."""
    return _prefix_hash(Path(path), nbytes).hexdigest()


_JSON_KINDS = {bool: "true/false", int: "number", float: "number", dict: "object", list: "array"}


def text_problem(text: str, *, max_chars: int = MAX_TEXT_CHARS) -> str | None:
    """Why a query or title is not one ("empty text", ...), or None; the server applies the same rule."""
    if not text.strip():
        return "empty text"
    if len(text) > max_chars:
        return f"the text is longer than {max_chars:,} characters ({len(text):,})"
    bad = _CONTROL.search(text)
    if bad:
        return f"control character U+{ord(bad.group()):04X} at character {bad.start() + 1}"
    return None


def _to_text(value, where: str) -> str:
    if value is None:
        raise UserError(f"{where}: empty text; remove the row or fill it in.")
    if not isinstance(value, str):  # JSON: 123, true or {"a": 1} is not a query someone typed
        raise UserError(f"{where}: got a JSON {_JSON_KINDS.get(type(value), type(value).__name__)} "
                        f"({json.dumps(value)[:40]}), but it must be text; put it in quotes or fix the row.")
    problem = text_problem(value)
    if problem:
        fix = ("remove the row or fill it in" if problem == "empty text" else
               "shorten it (a grader reads only its first max_length tokens)" if problem.startswith("the text is")
               else "remove it (a binary or corrupt file?)")
        raise UserError(f"{where}: {problem}; {fix}.")
    return value.strip()


def _records(path: Path, lines: _Lines, fmt: str, *, header: list[str] | None = None):
    """(line number, row dict) of each data row; `header` given: `lines` starts after the header (a resume)."""
    if fmt in ("tsv", "csv"):
        csv.field_size_limit(max(csv.field_size_limit(), MAX_TEXT_CHARS + 1))  # the text rule decides, not csv
        records = _csv_records(path, csv.reader(iter(lines), delimiter="\t" if fmt == "tsv" else ","), lines)
        if header is None:
            header = next(records, None)
            if not header:
                raise UserError(f"{path}: no header row; the first line must name the columns.")
            header = [h.strip() for h in header]
        for record in records:
            if not record or all(not c.strip() for c in record):
                continue
            if len(record) != len(header):
                raise UserError(
                    f"{path}, line {lines.number}: {len(record)} fields where the header has {len(header)}; "
                    f"fix the row (a stray {'tab' if fmt == 'tsv' else 'comma or quote'}?)."
                )
            yield lines.number, dict(zip(header, record))
    elif fmt == "jsonl":
        number = lines.number
        for text in lines:
            for chunk in text.splitlines() or [""]:  # the same line breaks str.splitlines counts
                number += 1
                if not chunk.strip():
                    continue
                try:
                    obj = json.loads(chunk)
                except json.JSONDecodeError as e:
                    raise UserError(f"{path}, line {number}, column {e.colno}: invalid JSON ({e.msg}); "
                                    "fix that line.") from None
                except RecursionError:
                    raise UserError(f"{path}, line {number}: JSON nested too deeply; fix that line.") from None
                if not isinstance(obj, dict):
                    raise UserError(f"{path}, line {number}: expected a JSON object per line; fix that line.")
                yield number, obj
    else:
        yield from _json_array(path, lines)


def _json_array(path: Path, lines: _Lines):
    """A JSON array's objects; `lines.offset` counts the items read, as that is where a resume continues."""
    skip = lines.offset
    text = "".join(lines)
    if lines.expected is not None:
        lines.check_unchanged()
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise UserError(f"{path}, line {e.lineno}, column {e.colno}: invalid JSON ({e.msg}); fix it.") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply; fix the file's shape.") from None
    if not isinstance(data, list) or not all(isinstance(o, dict) for o in data):
        raise UserError(f"{path}: expected a JSON array of objects (or JSON lines); fix the file's shape.")
    for i in range(skip, len(data)):
        lines.offset = lines.number = i + 1
        yield i + 1, data[i]  # "line" = position in the array, 1-based


def _csv_records(path: Path, reader, lines: _Lines):
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as e:  # a quoted field running on over many lines
            text = f"the text is longer than {MAX_TEXT_CHARS:,} characters" if "field larger" in str(e) else str(e)
            raise UserError(f"{path}, line {lines.number}: {text}; check the quotes on that row.") from None


def _to_grade(value, label_map, grades, where: str, grades_fix: str) -> int:
    if value is None or str(value).strip() == "":
        raise UserError(f"{where}: empty label; fill it in or drop the row.")
    if isinstance(value, (bool, dict, list)):
        raise UserError(f"{where}: got a JSON {_JSON_KINDS[type(value)]} ({json.dumps(value)[:40]}), but it must be "
                        "a number or text; fix the row.")
    text = str(value).strip()
    if isinstance(label_map, dict):
        if text not in label_map:
            raise UserError(f"{where}: label '{text}' is not in the label map {sorted(label_map)}; extend --label-map.")
        grade = label_map[text]
    else:
        try:
            number = float(text)
        except ValueError:
            raise UserError(f"{where}: label '{text}' is not a number; pass --label-map to map it to a grade.") from None
        if not math.isfinite(number):
            raise UserError(f"{where}: label '{text}' is not a finite number; write a grade such as 3 or drop the row.")
        if label_map == "round":
            grade = int(math.floor(number + 0.5))  # round half up, like the Home Depot grades
        elif number != int(number):
            raise UserError(f"{where}: label {text} is not a whole grade; pass --label-map round to round scores.")
        else:
            grade = int(number)
    if grade not in grades:
        raise UserError(f"{where}: grade {grade} is not one of the grades {list(grades)}; {grades_fix}.")
    return grade


def _to_score(value, where: str) -> float:
    """A gold score: any finite number."""
    if value is None or str(value).strip() == "":
        raise UserError(f"{where}: empty score; fill it in or drop the row.")
    try:
        number = float(value) if not isinstance(value, (bool, dict, list)) else float("nan")
    except ValueError:
        number = float("nan")
    if not math.isfinite(number):
        raise UserError(f"{where}: score {str(value)[:40]!r} is not a finite number; fix the row or drop it.")
    return number


# --- synthetic default -------------------------------------------------------------------------

_PRODUCTS = {
    "drill": ["cordless", "hammer", "brushless", "compact"],
    "faucet": ["kitchen", "bathroom", "pull-down", "single-handle"],
    "paint": ["interior", "exterior", "satin", "semi-gloss"],
    "lamp": ["desk", "floor", "led", "dimmable"],
    "saw": ["circular", "miter", "jig", "table"],
    "shelf": ["wall", "floating", "corner", "wire"],
    "door": ["storm", "interior", "sliding", "barn"],
    "mower": ["push", "riding", "electric", "self-propelled"],
    "tile": ["ceramic", "porcelain", "mosaic", "vinyl"],
    "fan": ["ceiling", "box", "tower", "exhaust"],
    "hose": ["garden", "expandable", "soaker", "rubber"],
    "grill": ["gas", "charcoal", "pellet", "portable"],
}
_COLORS = ["black", "white", "chrome", "brushed nickel", "bronze", "red", "gray", "blue"]
_BRANDS = ["Ridgeline", "HomeMax", "Acme Pro", "Northwind", "Bluebird", "Everbuild"]
_SIZES = ["12 in.", "24 in.", "36 in.", "1 gal.", "5 gal.", "20-volt", "60 ft."]


def is_synthetic(spec) -> bool:
    return str(spec).partition(":")[0] == "synthetic"


def synthetic_spec(spec: str, n: int | None = None) -> Pairs | None:
    """'synthetic' or 'synthetic:SEED' (another seed = an independent held-out draw); None for a file path."""
    if not is_synthetic(spec):
        return None
    seed = str(spec).partition(":")[2]
    if seed and not seed.isdigit():
        raise UserError(f"data '{spec}': write synthetic or synthetic:SEED with a whole-number seed.")
    return synthetic_pairs(n or 2000, seed=int(seed or 0))


def synthetic_pairs(n: int = 2000, *, seed: int = 0) -> Pairs:
    """Deterministic product-search pairs whose grade follows term overlap and attribute agreement.

    Synthetic, not real data: grade 5 = same product type, attribute and colour; 4 = one attribute off;
    3 = same type, two off; 2 = a related word only; 1 = another product.
    """
    rng = random.Random(seed)
    kinds = list(_PRODUCTS)
    queries, titles, labels = [], [], []
    while len(queries) < n:
        kind = rng.choice(kinds)
        attr = rng.choice(_PRODUCTS[kind])
        color = rng.choice(_COLORS)
        query = f"{attr} {kind} {color}" if rng.random() < 0.5 else f"{color} {attr} {kind}"
        for _ in range(rng.randint(3, 6)):
            grade = rng.choice(DEFAULT_GRADES)
            t_kind, t_attr, t_color = kind, attr, color
            if grade <= 4:
                t_color = rng.choice([c for c in _COLORS if c != color])
            if grade <= 3:
                t_attr = rng.choice([a for a in _PRODUCTS[kind] if a != attr])
            if grade <= 2:
                t_kind = rng.choice([k for k in kinds if k != kind])
                t_attr = attr if grade == 2 else rng.choice(_PRODUCTS[t_kind])
            title = f"{rng.choice(_BRANDS)} {rng.choice(_SIZES)} {t_attr} {t_kind} in {t_color}"
            queries.append(query)
            titles.append(title)
            labels.append(DEFAULT_GRADES.index(grade))
            if len(queries) == n:
                break
    return Pairs(queries, titles, labels, DEFAULT_GRADES, f"synthetic(n={n}, seed={seed})")
