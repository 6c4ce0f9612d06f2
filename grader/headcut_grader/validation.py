"""What a cell of a pairs file must hold: a query or title (text rules shared with the server), a grade
(through a label map) or a score, and what an input path must be; each problem is one UserError sentence."""
from __future__ import annotations

import errno
import json
import math
import os
import re
import unicodedata
from pathlib import Path

from headcut_grader.errors import UserError, check_names, counted, named, quoted, setting

FIX_ROW = "fix the row or drop it"  # what a grade outside the grades calls for where no flag or key sets them
# One rule for every format: a query or title may hold up to MAX_TEXT_CHARS characters (a grader reads only
# its first max_length tokens, so longer texts are almost surely a broken file).
MAX_TEXT_CHARS = 1_000_000
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tab, newline and carriage return are text
# Half of a UTF-16 pair on its own: what a JSON escape such as \udc80 or a str decoded with errors="surrogateescape"
# holds. It is no character: nothing can encode it, so the tokenizer and every hash of the text would fail on it.
_SURROGATE = re.compile("[\ud800-\udfff]")
_JSON_KINDS = {bool: "true/false", int: "number", float: "number", dict: "object", list: "array"}


def whole_number(text: str, *, digits: int = 18) -> int | None:
    """`text` as an int where it is written in ASCII digits (a leading sign allowed) and its value has at most
    `digits` of them ('+000000000000000003' is 3: a sign and leading zeros are no digits of its size), else None:
    str.isdigit() also passes '²' and other digits that int() refuses."""
    if not re.fullmatch(r"[+-]?[0-9]+", text) or len(significant_digits(text)) > digits:
        return None
    value = int(significant_digits(text) or "0")  # int() refuses a text of over 4,300 characters, zeros too
    return signed(text, value)


def signed(text: str, value: int) -> int:
    """`value`, the size of the whole number `text` writes, with the sign `text` writes."""
    return -value if text.startswith("-") else value


def significant_digits(text: str) -> str:
    """The digits of whole number `text` ('+0012' -> '12'): its sign and leading zeros are no digits of its size."""
    return text.lstrip("+-").lstrip("0")


def parse_label_map(text: str | None, *, names: str = "arguments") -> dict | str | None:
    """A label map's text as '0:1,1:3,2:5' (raw -> grade), 'round' (float score -> nearest grade), or None; `names`:
    who wrote it, as errors.named says (label_map, or a command's --label-map)."""
    check_names(names, "parse_label_map names")
    if text is None or text == "":
        return None
    if text == "round":
        return "round"
    out = {}
    for item in text.split(","):
        raw, sep, grade = item.partition(":")
        if not sep or not raw.strip() or whole_number(grade.strip()) is None:  # an empty label is refused before
            # any map reads it, so ':1' would be an entry no row ever meets
            said = named("label_map", names, section="data")
            raise UserError(f"{said} item {quoted(item)} is not RAW:GRADE; write e.g. {setting(said, '0:1,1:3,2:5')} "
                            f"or {setting(said, 'round')}.")
        if raw.strip() in out:
            raise UserError(f"{named('label_map', names, section='data')} maps {quoted(raw.strip())} twice; map each "
                            "raw label once.")
        out[raw.strip()] = whole_number(grade.strip())
    return out


# Linux's limits in bytes, which its file systems share: past them every call on the path fails with only
# "File name too long", from whichever call meets it first.
NAME_MAX_BYTES, PATH_MAX_BYTES = 255, 4096


def name_length_problem(path: str | Path, *, last_name_max: int = NAME_MAX_BYTES) -> str | None:
    """Why the file system would refuse `path` as too long (a name in it, or the whole), or None;
    `last_name_max`: the most its last name may have (an output leaves room for the names made beside it)."""
    raw = os.fsencode(path)
    names = raw.rstrip(b"/").split(b"/")
    for i, name in enumerate(names):
        most = last_name_max if i == len(names) - 1 else NAME_MAX_BYTES
        if len(name) > most:
            shown = name[:24].decode("utf-8", "replace") + "..."
            said = f"the name {quoted(shown)} is {counted(len(name), 'byte')}"
            if most < NAME_MAX_BYTES:
                return (f"{said}, and an output's name may have at most {most} ({NAME_MAX_BYTES} less room for the "
                        "files written beside it)")
            return f"{said}, and a file or folder name may have at most {most}"
    if len(raw) > PATH_MAX_BYTES:
        return f"the path is {counted(len(raw), 'byte')}, and a path may have at most {PATH_MAX_BYTES:,}"
    return None


def check_name_lengths(path: str | Path, flag: str = "", *, last_name_max: int = NAME_MAX_BYTES) -> None:
    """Refuse a path the file system would refuse as too long, naming `flag` (if any) and the name."""
    problem = name_length_problem(path, last_name_max=last_name_max)
    if problem:
        raise UserError(f"{setting(flag, path)}: {problem}; use a shorter name.")


LINK_LOOP = "a loop of symbolic links; remove the link or name another path"


def is_link_loop(path: str | Path) -> bool:
    """Whether `path` (or a folder on the way to it) is a loop of symbolic links."""
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ELOOP
    return False


def absent(path: str | Path, plain: str = "no such file; check the path") -> str:
    """Why a named input `path` is not there, to follow its name in a sentence: a loop of symbolic links, a
    symbolic link to nothing (naming its target), `path` itself or a folder on the way to it, or a file on the way,
    where `plain` (the caller's 'no such file; FIX') would send the user looking for a file that is there."""
    if is_link_loop(path):
        return LINK_LOOP
    if broken_link(path) == Path(path):
        return f"a broken symbolic link to {os.readlink(path)}; point the link at an existing path or name another"
    return on_the_way(path) or unexpanded_home(path) or plain


def unexpanded_home(path: str | Path) -> str | None:
    """Why `path`, starting with ~ or ~USER, is not in that home folder, to follow its name in a sentence: a shell
    expands ~ only at the start of a word (not in --out=~/x) and Python never, so it names a folder ~ here, which is
    made for an output; None where no such ~ starts it, or a file or folder of that name is here (meant, then)."""
    text = os.fspath(path)
    first = text.split(os.sep, 1)[0]
    home = os.path.expanduser(first)
    if not first.startswith("~") or home == first or os.path.lexists(first):
        return None
    return (f"{first} was not read as a home folder (a shell expands it only at the start of a word, not after "
            f"--flag=, and Python never); write the path in full: {os.path.expanduser(text)}")


def on_the_way(path: str | Path) -> str | None:
    """Why nothing can be at `path` for a folder above it, to follow its name in a sentence: a symbolic link to
    nothing (naming its target) or a file, where the system says only 'no such file', 'file exists' or 'not a
    directory'; else None."""
    link = broken_link(Path(path).parent)
    if link is not None:
        return (f"its folder {link} is a broken symbolic link to {os.readlink(link)}; point that link at an existing "
                "folder or name another path")
    for step in reversed(Path(path).parents):
        if os.path.exists(step) and not os.path.isdir(step):
            return f"{step} is a file, not a folder; name a path inside a folder"
    return None


def broken_link(path: str | Path) -> Path | None:
    """The first symbolic link to nothing along `path` (a folder on the way, or `path` itself), or None."""
    for step in (*reversed(Path(path).parents), Path(path)):
        if os.path.islink(step) and _missing(step):
            return step
    return None


def _missing(path: Path) -> bool:
    """Whether nothing is at `path`, links followed (not: a folder on the way that cannot be read)."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def irregular(path: Path) -> str | None:
    """What an existing `path` is where it is no regular file, as a sentence says it ('a folder'); None for a
    regular file (or a path that is not there)."""
    if path.is_dir():
        return "a folder"
    if path.exists() and not path.is_file():
        return "not a regular file (a pipe, device or socket)"
    return None


def check_regular(path: Path, *, what: str = "the pairs",
                  kind: str = "a data file (TSV, CSV, JSON lines or JSON)") -> None:
    """A user's input file must be a regular file: a FIFO would block a read, /dev/zero never ends. `what` the file
    holds and `kind` of file it is, for the sentences (a score file is no pairs file)."""
    check_name_lengths(path)
    if str(path) == "-" and not path.exists():  # as other tools would read it
        raise UserError("- would be standard input: inputs are read from files (pairs in chunks, and again to "
                        "resume); save it to a file and pass its path.")
    if not path.exists():
        raise UserError(f"{path}: {absent(path)}.")
    odd = irregular(path)
    if odd:
        fix = f"pass {kind}" if path.is_dir() else f"save {what} to a file and pass that"
        raise UserError(f"{path} is {odd}; {fix}.")
    try:  # said here, before a reader meets it as a traceback: another user's file (chmod 600)
        with open(path, "rb"):
            pass
    except OSError as e:
        fix = permission_fix([path], own="let this user read it", chmod="a+r", verb="read",
                             otherwise="pass another file")
        raise UserError(f"{path} cannot be read ({e.strerror or e}); {fix}.") from None


def permission_fix(paths: list, *, own: str, chmod: str, verb: str, otherwise: str) -> str:
    """How this user gets to `verb` (read, write) `paths`, where their modes forbid it: `own` with its chmod where
    this user owns them ('let this user read it (chmod a+r) or pass another file'); where one belongs to another
    user, whose mode only that user (or root) may change, asking them, or `otherwise` (the caller's other fix)."""
    foreign = another_users(paths)
    if foreign is None:
        return f"{own} (chmod {chmod}) or {otherwise}"
    return f"{foreign}, so only they can change its mode: ask them to let this user {verb} it, or {otherwise}"


def another_users(paths: list) -> str | None:
    """'P belongs to another user (bob, uid 1001)' for the first of `paths` that another user than this process's
    owns, where a chmod of this user's would fail; None where this user owns them all (or is root, who may change
    any mode) or they are not there."""
    if not hasattr(os, "geteuid") or os.geteuid() == 0:
        return None
    for path in paths:
        uid = _owner(path)
        if uid is not None and uid != os.geteuid():
            return f"{path} belongs to another user ({_user_said(uid)})"
    return None


def _owner(path) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:  # not there, or its folder unreadable: nobody's to ask about
        return None


def _user_said(uid: int) -> str:
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name}, uid {uid}"
    except (ImportError, KeyError):  # no such user here (a file from another machine's archive)
        return f"uid {uid}"


# A recipe is a page of YAML and a record (headcut.json, grader.json, config.json, a tokenizer, a score table, a
# run's state) a few MB even for a large model (a multilingual tokenizer.json: ~20 MB). A file past these is the
# wrong file, refused before it is read: a 6 MB YAML list took 1.4 GB and 53 s to parse.
MAX_RECIPE_BYTES = 1_000_000
MAX_RECORD_BYTES = 64_000_000


def read_small_text(path: str | Path, *, limit: int = MAX_RECORD_BYTES, what: str = "settings or record file",
                    bom_folder: str | None = None) -> str:
    """The UTF-8 text of a small file (a recipe, a record), refused in one sentence when it passes `limit`
    bytes, before it is read; OSError and UnicodeDecodeError as Path.read_text raises them. `bom_folder`: the
    folder whose JSON file this is (refuse_bom), its byte-order mark refused before the text is decoded, so that
    invalid UTF-8 later in the file does not hide the mark."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read(limit + 1) if size <= limit else b""
    if size > limit or len(data) > limit:  # a pipe or /proc file says size 0
        said = counted(size, "byte") if size > limit else f"over {counted(limit, 'byte')}"
        raise UserError(f"{path} is {said}, and a {what} is at most {counted(limit, 'byte')}; check that it is the "
                        "right file.")
    if bom_folder is not None:
        refuse_bom_start(data, path, folder=bom_folder)
    return data.decode("utf-8")


BOM = b"\xef\xbb\xbf"


def refuse_bom(path: Path, *, folder: str) -> None:
    """A JSON file of a model or grader folder (`folder`: which) that starts with a UTF-8 byte-order mark, refused in
    one sentence: transformers, tokenizers and json.loads all refuse the mark, each as if the file were damaged. A
    pairs file may have one (its readers skip it), but these are read by other libraries, from the user's folder."""
    try:
        with open(path, "rb") as f:
            start = f.read(len(BOM))
    except OSError:
        return  # missing or unreadable: its reader says so
    refuse_bom_start(start, path, folder=folder)


def refuse_bom_start(start: bytes, path: Path, *, folder: str) -> None:
    """refuse_bom for a file whose first bytes (or all of them) were read already, so that it is not opened again."""
    if start.startswith(BOM):
        raise UserError(f"{path} starts with a UTF-8 byte-order mark (BOM), which {folder}'s JSON files cannot have; "
                        "save it again as UTF-8 without a BOM.")


def _invisible(text: str) -> bool:
    """Whether `text` is only spaces and format characters (category Cf: zero-width space U+200B, soft hyphen
    U+00AD, joiners, a byte-order mark), which a tokenizer drops: the grader would see an empty text. Stops at
    the first visible character, so a real text costs one or two looks."""
    return all(ch.isspace() or unicodedata.category(ch) == "Cf" for ch in text)


def text_problem(text: str, *, max_chars: int = MAX_TEXT_CHARS) -> str | None:
    """Why a query or title is not one ("empty text", ...), or None; the server applies the same rule."""
    if not text.strip():
        return "empty text"
    if len(text) > max_chars:
        return f"the text is longer than {max_chars:,} characters ({len(text):,})"
    if _invisible(text):
        shown = next(ch for ch in text if not ch.isspace())
        return f"empty text (only invisible characters, such as U+{ord(shown):04X})"
    bad = _CONTROL.search(text)
    if bad:
        return f"control character U+{ord(bad.group()):04X} at character {bad.start() + 1}"
    return surrogate_problem(text)


def surrogate_problem(text: str) -> str | None:
    """Where `text` holds a lone surrogate, which no encoding can write (UTF-8 raises on it), or None."""
    bad = _SURROGATE.search(text)
    if bad:
        return f"lone surrogate U+{ord(bad.group()):04X} at character {bad.start() + 1}, which is not a character"
    return None


def to_text(value, where: str) -> str:
    if value is None:
        raise UserError(f"{where}: empty text; remove the row or fill it in.")
    if not isinstance(value, str):  # JSON: 123, true or {"a": 1} is not a query someone typed
        raise UserError(f"{where}: got a JSON {_JSON_KINDS.get(type(value), type(value).__name__)} "
                        f"({json.dumps(value)[:40]}), but it must be text; put it in quotes or fix the row.")
    problem = text_problem(value)
    if problem:
        fix = ("remove the row or fill it in" if problem.startswith("empty text") else
               "shorten it (a grader reads only its first max_length tokens)" if problem.startswith("the text is")
               else "remove it (a binary or corrupt file?)")
        raise UserError(f"{where}: {problem}; {fix}.")
    return value.strip()


def cell_number(value, kind: type = float, *, ascii_only: bool = False):
    """A cell's or flag's number as `kind` (float, int) reads it, but for Python's digit grouping: float('1_5') is 15,
    and a cell '1_5' is a typo or two values run together (ValueError, as float raises for other text).
    `ascii_only`: digits of other scripts too (int('５') is 5), which nobody types for a flag meaning them."""
    if isinstance(value, str) and ("_" in value or ascii_only and not value.isascii()):
        raise ValueError(value)
    return kind(value)


def to_grade(value, label_map, grades, where: str, grades_fix, map_said: str = "label_map") -> int:
    """The grade of a label cell; `map_said`: how the caller's user names the label map (label_map, --label-map;
    "": they have none to set, so a label it cannot read is the row's to fix). `grades_fix`: what a grade outside
    `grades` calls for, or a function of (grade, grades) saying it, for a fix whose example fits the grade."""
    if value is None or str(value).strip() == "":
        raise UserError(f"{where}: empty label; fill it in or drop the row.")
    if isinstance(value, (bool, dict, list)):
        raise UserError(f"{where}: got a JSON {_JSON_KINDS[type(value)]} ({json.dumps(value)[:40]}), but it must be "
                        "a number or text; fix the row.")
    text = str(value).strip()
    if isinstance(label_map, dict):
        if text not in label_map:
            fix = f"extend {map_said}" if map_said else FIX_ROW
            raise UserError(f"{where}: label {quoted(text)} is not in the label map {sorted(label_map)}; {fix}.")
        grade = label_map[text]
    else:
        try:
            number = cell_number(text)
        except ValueError:
            fix = f"pass {map_said} to map it to a grade" if map_said else "write a grade such as 3, or drop the row"
            raise UserError(f"{where}: label {quoted(text)} is not a number; {fix}.") from None
        if not math.isfinite(number):
            raise UserError(f"{where}: label {quoted(text)} is not a finite number; write a grade such as 3 or drop "
                            "the row.")
        if label_map == "round":
            grade = int(math.floor(number + 0.5))  # round half up, like the Home Depot grades
        elif number != int(number):
            fix = f"pass {setting(map_said, 'round')} to round scores" if map_said else FIX_ROW
            raise UserError(f"{where}: label {text} is not a whole grade; {fix}.")
        else:
            grade = int(number)
    if grade not in grades:
        fix = grades_fix(grade, grades) if callable(grades_fix) else grades_fix
        raise UserError(f"{where}: grade {grade} is not one of the grades {list(grades)}; {fix}.")
    return grade


# A gold score's bound: models train and score in 32-bit floats, where a larger score's square (its squared
# error) overflows to inf and training turns every weight to NaN.
MAX_SCORE = 1e15


def to_score(value, where: str) -> float:
    """A gold score: any finite number within +-MAX_SCORE."""
    if value is None or str(value).strip() == "":
        raise UserError(f"{where}: empty score; fill it in or drop the row.")
    try:
        number = cell_number(value) if not isinstance(value, (bool, dict, list)) else None
    except ValueError:
        number = None
    if number is None or not math.isfinite(number):  # text ('abc', '1_5', a JSON true) is no number at all
        kind = "a number" if number is None else "a finite number"
        raise UserError(f"{where}: score {str(value)[:40]!r} is not {kind}; fix the row or drop it.")
    if abs(number) > MAX_SCORE:
        raise UserError(f"{where}: score {str(value)[:40]!r} is beyond +-{MAX_SCORE:.0e}, where its square overflows "
                        "the 32-bit floats models compute in; fix the row or rescale the column.")
    return number
