"""The benchmark scripts' numeric flags, checked as the commands' flags are: each reads the range headcut declares for
what it sets (headcut_grader.ranges' THREADS, BATCH, SEQ_LEN, REPEATS; a settings field's), so `--threads 0` or
`--rows -1` stops before any work with one sentence naming the flag and exit code 2 (argparse's error)."""
from __future__ import annotations

import argparse
from pathlib import Path

from headcut_grader.errors import UserError
from headcut_grader.files import PAIRS_FILE, check_out_dir, check_out_file, folder_spelled
from headcut_grader.ranges import Range

COUNT = Range(1)  # rows, pairs, requests, steps: at least one, where headcut declares no range of its own


def whole(valid: Range = COUNT):
    """An argparse `type`: a whole number in `valid`."""
    return _number_in(valid, int, "a whole number")


def real(valid: Range):
    """An argparse `type`: a number in `valid`."""
    return _number_in(valid, float, "a number")


def several(parse):
    """An argparse `type`: a comma list ('1,8,32') of values each read by `parse` (whole(...) or real(...))."""
    return lambda text: [parse(item.strip()) for item in text.split(",")]


def joined(form: str, *parses, example: str):
    """An argparse `type`: values joined by 'x' (`form` 'WxT' names each: 2x1 is W=2, T=1), each read by its parse
    (whole(...)); a refusal names the part, as `--layouts 1x0`: "1x0: T 0 is out of range; it must be in [1, 256]"."""
    names = form.split("x")

    def parse(text: str):
        items = text.split("x")
        if len(items) != len(parses):
            raise argparse.ArgumentTypeError(f"{text!r} is not {form}; write {' and '.join(names)} joined by x, e.g. "
                                             f"{example}.")
        read = []
        for name, part, item in zip(names, parses, items):
            try:
                read.append(part(item.strip()))
            except argparse.ArgumentTypeError as error:
                raise argparse.ArgumentTypeError(f"{text}: {name} {error}") from None
        return tuple(read)

    return parse


def _number_in(valid: Range, read, kind: str):
    def parse(text: str):
        try:
            value = read(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}; it must be {valid.describe(kind)}.") from None
        problem = valid.problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{text} {problem}.")
        return value

    return parse


def file_to_read(what: str = PAIRS_FILE):
    """An argparse `type`: a file to read, as a Path once its text is checked: text that names a folder (p.tsv/,
    p.tsv/.) is refused (files.folder_spelled), as the commands refuse it; type=Path dropped the / and read p.tsv."""

    def parse(text: str) -> Path:
        if problem := folder_spelled(text, "", reading=True, what=what):
            raise argparse.ArgumentTypeError(problem)
        return Path(text)

    return parse


def out_file(parser: argparse.ArgumentParser, path, *, overwrite: bool = True, flag: str = "--out", inputs=(),
             example: str = "results.json") -> Path:
    """A file to write, checked as the commands check theirs (files.check_out_file: a place this process can make a
    file in, not a folder, an input or, without `overwrite`, an existing file) before any work: was a traceback only
    when the finished run wrote it (`--out /proc/x.json`). `path`: the flag's text as written (its flag takes no
    type=Path, which drops a trailing /: `--out x.json/` wrote the file x.json). A refusal is argparse's error
    (exit 2)."""
    try:
        return check_out_file(str(path), overwrite=overwrite, flag=flag, inputs=inputs, example=example)
    except UserError as error:
        parser.error(str(error))


def out_dir(parser: argparse.ArgumentParser, path, *, flag: str = "--out", inputs=()) -> Path:
    """A folder to write files into (files.check_out_dir: a place this process can make files in, not a file nor an
    input), checked before any work; the files in it are replaced, as a benchmark's rerun does. `path`: the flag's
    text as written, as out_file's. A refusal is argparse's error (exit 2)."""
    try:
        return check_out_dir(str(path), overwrite=True, flag=flag, inputs=inputs)
    except UserError as error:
        parser.error(str(error))
