"""Grade a file of any size: read, grade and write in chunks (memory holds a few chunks, never the file), in one
process or several, into OUT's partial file that becomes OUT in one rename; an interrupted run resumes after its
last finished chunk and writes the same bytes as a run that was never interrupted."""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import signal
from collections import deque
from contextlib import contextmanager
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field, fields, replace
from itertools import chain
from pathlib import Path
from typing import Callable

import numpy as np

from headcut_grader.backends import BACKEND_CHOICES, graph_sha256, graphs
from headcut_grader.data import Position, guess_format, iter_pairs
from headcut_grader.errors import Given, UserError, check_names, counted, named, quoted, setting
from headcut_grader.files import (PAIRS_FILE, as_file_to_read, as_path, check_out_file, publish_file, published,
                                  write_json)
from headcut_grader.grader import Grader, Grades, read_record, results_from_logits
from headcut_grader.lines import RESUME_SPELLED, afresh
from headcut_grader.orphans import exit_with_parent
from headcut_grader.readers import check_preset, text_columns
from headcut_grader.ranges import (BATCH, BATCH_SIZE, CHUNK_ROWS, RUNTIME_THREADS, THREADS, WORKERS, argument,
                                   check_callbacks, checked_bool, checked_fields, range_field)
from headcut_grader.tokens import NoTokens
from headcut_grader.validation import MAX_RECORD_BYTES, read_small_text

STATE_FORMAT = 2  # 2: the state carries a checksum of itself
# chunk ends before the last that the state keeps ("earlier": rows, bytes, position, counts at each), so a partial
# file cut short resumes from the last whole chunk it holds; a state written before these were kept has none
EARLIER_KEPT = 16
BOUNDARY = ("rows", "bytes", "position", "counts")


@dataclass(frozen=True)
class GradeSettings:
    """What decides the output's bytes (a resumed run must use the same) and how the work is spread."""

    chunk_rows: int = range_field(10_000, CHUNK_ROWS)  # pairs read, graded and written at a time: memory grows
    # with this, not the file
    batch_size: int = range_field(BATCH_SIZE, BATCH)
    preset: str | None = None
    query_col: str | None = None
    title_col: str | None = None
    label_col: str | None = None
    out_format: str | None = None  # None: from OUT's suffix, else the input's
    workers: int = range_field(1, WORKERS)  # processes, each with its own Grader
    threads: int = range_field(RUNTIME_THREADS, THREADS)  # runtime threads per process
    backend: str = "auto"  # onnxruntime, openvino, or auto (the grader's fastest on this CPU)

    def output_keys(self) -> dict:
        """The settings that change the output's bytes; workers and threads only change the speed."""
        return {k: v for k, v in asdict(self).items() if k not in ("workers", "threads")}


@dataclass(frozen=True)
class GradeSummary:
    rows: int
    resumed_rows: int  # graded by the interrupted run this one continued
    counts: dict  # grade -> rows
    out: Path
    backend: str = ""  # the runtime and precision that graded, e.g. "openvino 2026.4.1 bf16"
    broken_runtimes: dict = field(default_factory=dict)  # runtimes auto skipped as they fail to import: why, by name


def partial_paths(out: Path) -> tuple[Path, Path]:
    """The rows written so far, and the state that says how far they go (both beside OUT, until it is done)."""
    return out.parent / f".{out.name}.partial", out.parent / f".{out.name}.partial.json"


def kept_rows(out) -> int | None:
    """The graded rows an interrupted grade into `out` left for --resume to continue after (its partial file and
    the state counting them), or None when it left none."""
    data, state_path = partial_paths(Path(out))
    state = _read_state(state_path)[0] if state_path.exists() and data.exists() else None
    rows = state.get("rows") if isinstance(state, dict) else None
    return rows if isinstance(rows, int) and not isinstance(rows, bool) else None


# where a caller spells an argument otherwise than NAME or --NAME (headcut_grader.errors.named)
SPELLED = {"arguments": RESUME_SPELLED,
           "flags": {"grader_dir": "GRADER_DIR"}}


def said(name: str, names: str) -> str:
    """grade_file's argument or setting `name` as its caller wrote it: "arguments" a Python call's (out,
    resume=True, chunk_rows), "flags" `headcut grade`'s (--out, --resume, GRADER_DIR, --chunk-rows)."""
    return named(name, names, section="", spelled=SPELLED)


def grade_file(grader_dir, source, out, *, settings: GradeSettings = GradeSettings(), resume: bool = False,
               overwrite: bool = False, progress: Callable[[int], None] | None = None,
               names: str = "arguments") -> GradeSummary:
    """Grade every pair of SOURCE into OUT: query, title, [true_grade], grade, expected_grade, p<grade>...
    `names`: who called, so that messages name what they wrote (headcut_grader.errors.named): "arguments" these
    (out, resume=True, settings' chunk_rows), "flags" `headcut grade`'s (--out, --resume, --chunk-rows)."""
    check_names(names, "grade_file names")
    names = _settings_named(names)
    check_callbacks("grade_file", progress=progress)
    resume = checked_bool(resume, "resume")
    as_path(grader_dir, "grade_file grader_dir", what="a grader folder's path")
    source = as_file_to_read(source, "grade_file source", what=PAIRS_FILE)
    path = as_path(out, "grade_file out", what="an output file's path")
    settings = checked_settings(settings, names)
    if settings.out_format == "json":
        raise UserError(f"{_setting('out_format', names)} is 'json': grades are written as JSON lines, not one JSON "
                        "document; pass out_format='jsonl'.")
    # `out` as given, not `path`: Path('o.tsv/') is o.tsv, and the / that says a folder was meant is lost
    out = check_out_file(out, overwrite=overwrite, inputs=[source, grader_dir], example="grades.tsv",
                         flag=said("out", names), **_out_suffixes(path, settings.out_format, names))
    fmt = settings.out_format or (guess_format(out) if out.suffix else guess_format(source))
    # a JSON array input graded into OUT without a suffix: JSON lines, as every JSON output is
    settings = replace(settings, out_format="jsonl" if fmt == "json" else fmt)
    task, gold = _task(grader_dir)
    chunks = _chunks(source, settings, task, gold, names=names)
    first = next(chunks)  # a bad file (columns, first rows) is reported before a bad grader folder, as before chunks
    grader = Grader(grader_dir, threads=settings.threads, batch_size=settings.batch_size, backend=settings.backend,
                    names=names)
    data, state_path = partial_paths(out)
    state = _resumable_state(state_path, data, out, grader, settings, resume=resume, overwrite=overwrite,
                             names=names)
    counts = dict(state["counts"]) if state else {str(g): 0 for g in grader.record.get("grades", [])}
    rows = done = state["rows"] if state else 0
    earlier = list(state.get("earlier", [])) if state else []
    chunks = (_chunks(source, settings, task, gold, start=Position(**state["position"]), names=names) if state
              else chain([first], chunks))
    made = _missing_folders(out.parent)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)  # as every command's --out: missing folders are made
        _no_link(data, resuming=bool(state), names=names)
        with os.fdopen(os.open(data, os.O_RDWR | os.O_CREAT, 0o666), "r+b") as f:  # truncated once locked
            _lock(f, out, said("out", names))
            if not state:  # --overwrite: the last run's state must not count this run's rows
                state_path.unlink(missing_ok=True)
            with _removed_unless_counted(data, state_path, made):
                f.truncate(state["bytes"] if state else 0)
                f.seek(0, os.SEEK_END)
                for chunk, logits in _graded(chunks, grader, settings, progress):
                    result = grade_rows(chunk.pairs, results_from_logits(logits, grader.record))
                    f.write(format_rows(result, settings.out_format, header=rows == 0).encode("utf-8"))
                    f.flush()
                    os.fsync(f.fileno())  # the state below must never count rows that are not on disk
                    if rows:  # the chunk end before this one, kept for a partial file cut short
                        earlier = (earlier + [{k: state[k] for k in BOUNDARY}])[-EARLIER_KEPT:]
                    rows += len(chunk.pairs)
                    for g in result.get("grade", ()):  # a score grader has no grades to count
                        counts[str(g)] += 1
                    state = _checked({"format": STATE_FORMAT, "source": str(source), "rows": rows, "bytes": f.tell(),
                                      "position": asdict(chunk.position), "counts": dict(counts),
                                      "grader_sha256": _grader_id(grader), "settings": settings.output_keys(),
                                      "earlier": earlier})
                    write_json(state_path, state)
        with _removed_once_published(data, state_path, out):
            publish_file(data, out, overwrite=overwrite, flag=said("out", names))
    except OSError as e:  # --resume only where rows are kept for it (was: said also where nothing was written)
        again = f"with {said('resume', names)}" if kept_rows(out) is not None else "from the start"
        raise UserError(f"{out}: writing failed ({e.strerror}); check free space and permissions, then rerun "
                        f"{again}.") from None
    return GradeSummary(rows, done, {int(g): n for g, n in counts.items()}, out, grader.runtime,
                        grader.broken_runtimes)


OUT_FORMATS = ("tsv", "csv", "jsonl")


def checked_settings(settings, names: str) -> GradeSettings:
    """`settings` with its numbers as plain ints, after checking its type, each number's range and the output
    format, so a bad one is one sentence before any work (was: an AttributeError, the process pool's ValueError)."""
    settings = checked_fields(settings, GradeSettings, lambda name: _setting(name, names) if name else "settings")
    if settings.out_format not in (None, "json", *OUT_FORMATS):  # json: refused by name in grade_file
        raise UserError(f"{_setting('out_format', names)} is {argument(settings.out_format)[:60]}; use one of: "
                        f"{', '.join(OUT_FORMATS)} (or None: from out's suffix).")
    if settings.backend not in BACKEND_CHOICES:  # was: Grader's words, once the first chunk was read
        raise UserError(f"{_setting('backend', names)} is {argument(settings.backend)[:60]}; use one of: "
                        f"{', '.join(BACKEND_CHOICES)}.")
    for column in ("query_col", "title_col", "label_col"):
        value = getattr(settings, column)
        if value is not None and not isinstance(value, str):
            raise UserError(f"{_setting(column, names)} is {argument(value)[:60]}; pass a column's name as text, or "
                            "None.")
    check_preset(settings.preset, setting(_setting("preset", names), argument(settings.preset)[:60]))
    return settings


# What each output format may be named; "": no suffix (the input's format, or out_format's).
OUT_SUFFIXES = {"jsonl": (".jsonl",), "tsv": (".tsv", ".txt"), "csv": (".csv",)}
FORMAT_NAMES = {"jsonl": "JSON lines", "tsv": "TSV", "csv": "CSV"}  # as messages name them


def _out_suffixes(out: Path, out_format: str | None, names: str) -> dict:
    """check_out_file's `suffixes` and `written` for grades written to `out` in `out_format` (None: as out's suffix
    says)."""
    if out_format is not None:
        return {"suffixes": (*OUT_SUFFIXES[out_format], ""),
                "written": f"{_setting('out_format', names)} is {out_format!r}, so grades are written as "
                           f"{FORMAT_NAMES[out_format]}"}
    if out.suffix.lower() == ".json":  # JSON lines under .json: json.load and other tools read one broken document
        return {"suffixes": (".jsonl",), "written": "grades are written as JSON lines, not one JSON document"}
    return {"suffixes": (".tsv", ".csv", ".jsonl", ".txt", ""),
            "written": "grades are written as TSV, CSV or JSON lines, as the suffix says"}


def _settings_named(names: str) -> str:
    """grade_file's `names`, with GradeSettings' fields as its caller wrote them: settings.workers from Python (also
    where iter_pairs and Grader name them), --workers from the command."""
    if names != "arguments":
        return names
    return Given(names, {f.name: f"settings.{f.name}" for f in fields(GradeSettings)})


def _setting(name: str, names: str) -> str:
    """A GradeSettings field as a message names it: settings.workers from Python, --workers from the command."""
    return said(name, _settings_named(names))


@contextmanager
def _removed_unless_counted(data: Path, state_path: Path, made: list[Path]):
    """A run stopped (Ctrl-C, a bad row, a full disk) before any state counted its rows removes its partial file:
    --resume could not use it (was: a Ctrl-C while the workers started left an empty partial file, which --resume
    refused as rows without a state), and the folders it made for OUT (`made`, deepest first) where they are empty
    (was: left behind, empty, by a text of no tokens in the first chunk)."""
    try:
        yield
    except BaseException:
        if not state_path.exists():
            data.unlink(missing_ok=True)
            for folder in made:
                try:
                    folder.rmdir()
                except OSError:  # something else was put there meanwhile: it stays
                    break
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """The folders that making `folder` with its parents would make, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


@contextmanager
def _removed_once_published(data: Path, state_path: Path, out: Path):
    """Once OUT is published, the partial file and its state go, whatever stops the run after that (was: a Ctrl-C
    between the publish and the state's removal left the state, and the rows it counted, for a rerun to take as
    unfinished work)."""
    try:
        yield
    finally:
        if published(data, out):
            data.unlink(missing_ok=True)
            state_path.unlink(missing_ok=True)


def _lock(f, out: Path, out_said: str) -> None:
    """One grade at a time writes OUT's partial file: a second one (--resume or --overwrite) would truncate it under
    the first, which then renames a file with a hole of NUL bytes to OUT. The kernel drops the lock with its process."""
    import fcntl

    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UserError(f"{out}: another grade is writing it; wait for it to finish, or choose another "
                        f"{out_said}.") from None


def _no_link(data: Path, *, resuming: bool, names: str) -> None:
    """Never write through a link at the partial file's place: it may point at an input. A new run removes it; a
    resume cannot trust it."""
    if not data.is_symlink():
        return
    if resuming:
        raise UserError(f"{data} is a link, not a partial file this command wrote; rerun with "
                        f"{said('overwrite', names)} to grade from the start.")
    data.unlink()


def _task(grader_dir) -> tuple[str, dict]:
    """The grader's task and its gold's options for iter_pairs, read before the file so that its gold column is read
    as that task's (a one-score grader's as numbers, kept as true_score) against the grader's own grades. A folder
    that cannot say is reported by Grader, after the file."""
    try:
        record = read_record(grader_dir)  # checked: its grades are two or more different whole numbers
    except UserError:
        return "grades", {}
    task = record.get("task", "grades")
    return task, {"grades": tuple(record["grades"])} if task == "grades" else {}


def _chunks(source: Path, settings: GradeSettings, task: str, gold: dict, *, start: Position | None = None,
            names: str):
    # GradeSettings' fields are named as grade_file's caller names them; label_map as "", since grade takes no label
    # map: a gold label it cannot read is the row's to fix (was: "pass --label-map to map it", a flag grade lacks)
    names = Given(names, {**getattr(names, "spellings", {}), "label_map": ""})
    return iter_pairs(source, chunk_rows=settings.chunk_rows, preset=settings.preset, query_col=settings.query_col,
                      title_col=settings.title_col, label_col=settings.label_col, start=start, task=task,
                      require_labels=settings.label_col is not None,  # a named gold column must be there
                      names=names, **gold)


def _grader_id(grader: Grader) -> str:
    """The graph that grades (another backend's graph gives other bytes, so a resume must not mix them)."""
    return grader.graph_sha256


def _another_graph(out: Path, grader: Grader, recorded: str, names: str) -> UserError:
    """The sentence for a resume whose interrupted run graded with another graph: another grader's, or another
    backend's graph of this same folder (another --backend, or auto's choice on another CPU), which only that
    backend continues."""
    backend = next((b for b in graphs(grader.record) if graph_sha256(grader.record, b) == recorded), None)
    if backend is None:
        return UserError(f"{out}: the interrupted run used another grader; resume with the same "
                         f"{said('grader_dir', names)}, or run {afresh(names)}.")
    return UserError(f"{out}: the interrupted run graded with this grader's {backend} graph, and this run with its "
                     f"{grader.backend.name} one; resume with {setting(_setting('backend', names), backend)}, or run "
                     f"{afresh(names)}.")


STATE_FIELDS = {"rows": int, "bytes": int, "grader_sha256": str, "settings": dict, "position": dict, "counts": dict,
                "check": str}


def _checksum(state: dict) -> str:
    """sha256 of the state without its "check": a value changed after writing (an offset, a byte count) would
    otherwise pass for a changed input or resume into a broken file."""
    rest = {k: v for k, v in state.items() if k != "check"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode("utf-8")).hexdigest()


def _checked(state: dict) -> dict:
    return {**state, "check": _checksum(state)}


def _read_state(path: Path) -> tuple[object, str | None]:
    """A state file's JSON, or None and why it cannot be read."""
    try:
        text = read_small_text(path)
    except UnicodeDecodeError:
        return None, "it is not UTF-8 text"
    except UserError:
        return None, f"it is over {counted(MAX_RECORD_BYTES, 'byte')}"
    except OSError as e:
        return None, f"it cannot be read ({e.strerror})"
    if not text.strip():
        return None, "it is empty"
    try:
        return json.loads(text), None
    except (ValueError, RecursionError):
        return None, "it is not complete JSON"


def state_problem(state, grades) -> str | None:
    """What makes a partial run's state unusable (a field missing or of the wrong kind, counts that are not one
    per grade adding up to rows (none for a score grader: `grades` empty), settings other than
    `GradeSettings.output_keys`, a checksum that does not match), or None; checked whole before any row is graded."""
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        return "not a state this version of headcut writes"
    for key, kind in STATE_FIELDS.items():
        value = state.get(key)
        if isinstance(value, bool) or not isinstance(value, kind) or (kind is int and value < 0):
            return f"'{key}' is missing or not a {'whole number >= 0' if kind is int else kind.__name__}"
    if problem := _boundary_problem(state, grades) or _earlier_problem(state, grades):
        return problem
    if set(state["settings"]) != set(GradeSettings().output_keys()):
        return f"'settings' does not name the settings {', '.join(GradeSettings().output_keys())}"
    if state["check"] != _checksum(state):
        return "its contents do not match its checksum"
    return None


def _boundary_problem(boundary: dict, grades) -> str | None:
    """What makes a chunk end's counts or position unusable (the state's own, or one of its "earlier"), or None."""
    counts, position = boundary["counts"], boundary["position"]
    if (set(counts) != {str(g) for g in grades} or any(isinstance(n, bool) or not isinstance(n, int) or n < 0
                                                        for n in counts.values())
            or sum(counts.values()) != (boundary["rows"] if grades else 0)):
        return "'counts' is not one count per grade adding up to 'rows'" if grades else "'counts' is not empty"
    if set(position) != {"offset", "line", "sha256"} or not _is_sha256(position["sha256"]) or any(
            isinstance(position[k], bool) or not isinstance(position[k], int) or position[k] < 0
            for k in ("offset", "line")):
        return "'position' is not an offset, a line and a sha256"
    return None


def _earlier_problem(state: dict, grades) -> str | None:
    """What makes the state's earlier chunk ends unusable (absent is fine: a state written before they were kept):
    each a rows, bytes, position and counts, in the order written, before the state's own."""
    earlier = state.get("earlier", [])
    said = "'earlier' is not a list of chunk ends (rows, bytes, position, counts), in order"
    if not isinstance(earlier, list):
        return said
    ends = [*earlier, state]
    for end, after in zip(ends, ends[1:]):
        if not isinstance(end, dict) or set(end) != set(BOUNDARY) or any(
                isinstance(end[k], bool) or not isinstance(end[k], int) or end[k] < 0 for k in ("rows", "bytes")) or (
                not isinstance(end["position"], dict) or not isinstance(end["counts"], dict)):
            return said
        if end["rows"] >= after["rows"] or end["bytes"] >= after["bytes"]:
            return said
        if problem := _boundary_problem(end, grades):
            return f"an earlier chunk end's {problem}"
    return None


def _whole_chunks(state: dict, data: Path, names: str) -> dict:
    """The state to resume from where `data` is shorter than `state` says (cut short): its last chunk end that `data`
    still holds whole (the rows after it are graded again, and `data` truncated to it); else one sentence."""
    size = data.stat().st_size
    whole = [end for end in state.get("earlier", []) if end["bytes"] <= size]
    if not whole:
        kept = "records no earlier chunk end" if not state.get("earlier") else "records no chunk end it holds whole"
        raise UserError(f"{data} is shorter than its state says ({counted(size, 'byte')} of {state['bytes']:,}), "
                        f"and its state {kept}; run again {afresh(names)}.")
    return {**state, **whole[-1], "earlier": whole[:-1]}


def _is_sha256(text) -> bool:
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def _resumable_state(state_path: Path, data: Path, out: Path, grader: Grader, settings: GradeSettings, *,
                     resume: bool, overwrite: bool, names: str) -> dict | None:
    """The interrupted run's state when --resume continues it; None to start from the first row."""
    if resume and data.exists() and not state_path.exists():
        raise UserError(f"{out}: {said('resume', names)} has nothing to continue: {data.name} holds graded rows but "
                        f"its state file {state_path.name} is missing; run {afresh(names)} to start again.")
    if not state_path.exists() or not data.exists():
        return None
    state, problem = _read_state(state_path)
    if not resume:
        if overwrite:
            return None
        rows = state.get("rows", "some") if isinstance(state, dict) else "some"
        raise UserError(f"{out}: an interrupted run left {rows} graded rows in {data.name}; pass "
                        f"{said('resume', names)} to continue it, or {said('overwrite', names)} to start again.")
    recorded = state.get("grader_sha256") if isinstance(state, dict) else None
    # before the counts: another grader counts otherwise
    if isinstance(recorded, str) and recorded != _grader_id(grader):
        raise _another_graph(out, grader, recorded, names)
    problem = problem or state_problem(state, grader.record.get("grades") or ())
    if problem:
        raise UserError(f"the state file {state_path} is damaged ({problem}); start afresh: run again "
                        f"{afresh(names)}, or delete {state_path.name} and {data.name}.")
    wanted = settings.output_keys()
    for key, value in state["settings"].items():
        # the backend is judged by the graph it grades with (above): auto's choice resumes by that runtime's name
        if key != "backend" and wanted.get(key) != value:
            raise UserError(f"{out}: {said(key, names)} is {wanted.get(key)!r} but the interrupted run used "
                            f"{value!r}; resume with the same {'flags' if names == 'flags' else 'settings'}, or "
                            f"run {afresh(names)}.")
    if data.stat().st_size < state["bytes"]:  # cut short: resume after the last chunk it holds whole
        return _whole_chunks(state, data, names)
    return state


def _graded(chunks, grader: Grader, settings: GradeSettings, progress):
    """(chunk, logits) in file order; with several workers a few chunks are in flight, so memory stays bounded."""
    columns = dict(zip(("query", "title"), text_columns(settings.preset, settings.query_col, settings.title_col)))
    if settings.workers == 1:
        for chunk in chunks:
            yield chunk, _placed(lambda: grader.logits(chunk.pairs, progress=progress), chunk, columns)
        return
    import multiprocessing

    grader.close()  # checked, and its record serves here; each worker grades with its own, so this one would sit idle
    # spawn: a forked ONNX Runtime thread pool can deadlock; each worker loads its own session
    with ProcessPoolExecutor(settings.workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_start_worker,
                             initargs=(str(grader.folder), settings.threads, settings.batch_size,
                                       grader.backend.name)) as pool:
        try:
            pending = deque()
            for chunk in chunks:
                with _sigint_held():  # submit starts the workers: they inherit the held signal
                    pending.append((chunk, pool.submit(_worker_logits, chunk.pairs.queries, chunk.pairs.titles)))
                if len(pending) >= 2 * settings.workers:
                    yield _finished(pending.popleft(), progress, columns)
            while pending:
                yield _finished(pending.popleft(), progress, columns)
        except BaseException:  # Ctrl-C, a bad row: stop now, not once the workers finish the chunks they hold
            _stop_workers(pool)
            raise


def _placed(graded, chunk, columns: dict):
    """`graded()`, a text of `chunk` that gave no tokens said as a file's empty text is: its file, line and column."""
    try:
        return graded()
    except NoTokens as e:
        raise UserError(f"{chunk.pairs.where(e.index)}, column {quoted(columns[e.side])}: {e.problem}; remove the "
                        "row or fill it in.") from None


@contextmanager
def _sigint_held():
    """Hold SIGINT back from this thread inside: a process starts with its parent's signal mask, so a worker started
    here never takes the terminal's Ctrl-C (each would print a traceback, even while starting up); the parent takes
    it once the block ends. (Where signal masks are missing, _start_worker's SIG_IGN still covers a started worker.)"""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """End the workers at once: a plain shutdown waits for every chunk already handed to them (a few, each up to
    --chunk-rows pairs), so a Ctrl-C would take as long. (Python 3.14 names this terminate_workers.)"""
    if hasattr(pool, "terminate_workers"):
        pool.terminate_workers()
        return
    processes = list((pool._processes or {}).values())  # shutdown forgets them
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()


def _finished(item, progress, columns: dict):
    chunk, future = item
    logits = _placed(future.result, chunk, columns)
    if progress:
        progress(len(chunk.pairs))
    return chunk, logits


_WORKER: dict = {}


def _start_worker(folder: str, threads: int, batch_size: int, backend: str) -> None:
    exit_with_parent()  # a killed `grade` must not leave its workers waiting on the task queue forever
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers (_graded)
    _WORKER["grader"] = Grader(folder, threads=threads, batch_size=batch_size, backend=backend)


def _worker_logits(queries: list[str], titles: list[str]) -> np.ndarray:
    return _WORKER["grader"].logits(list(zip(queries, titles)))


def grade_rows(pairs, result) -> dict[str, list]:
    """Output columns: query, title, true_grade (labelled input only), grade, expected_grade, p<grade>...; a score
    grader's (Scores): query, title, true_score (scored input only), score."""
    columns = {"query": pairs.queries, "title": pairs.titles}
    if pairs.scores is not None:
        columns["true_score"] = pairs.scores
    elif pairs.labels is not None and isinstance(result, Grades):
        columns["true_grade"] = [pairs.grades[y] for y in pairs.labels]
    return columns | result.columns()


def format_rows(columns: dict[str, list], fmt: str, *, header: bool) -> str:
    names = list(columns)
    rows = zip(*columns.values())
    if fmt == "jsonl":
        return "".join(json.dumps(dict(zip(names, r)), ensure_ascii=False) + "\n" for r in rows)
    buf = io.StringIO()
    separator = "\t" if fmt == "tsv" else ","
    writer = csv.writer(buf, delimiter=separator, lineterminator="\n")
    if header:
        writer.writerow(names)
    if not any("\r" in text for side in ("query", "title") for text in columns.get(side, ())):
        writer.writerows(rows)
        return buf.getvalue()
    # csv quotes a field for the characters of its line terminator alone, so a text holding a bare CR (which csv
    # readers, ours too, take for a line end) was written unquoted: such a row is written by a writer whose
    # terminator holds CR, and its CRLF made LF as every other row's
    with_cr = csv.writer(buf, delimiter=separator, lineterminator="\r\n")
    for row in rows:
        if any(isinstance(value, str) and "\r" in value for value in row):
            with_cr.writerow(row)
            buf.seek(buf.tell() - 2)
            buf.write("\n")
            buf.truncate()
        else:
            writer.writerow(row)
    return buf.getvalue()
