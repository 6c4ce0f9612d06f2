"""A pairs file read line by line with a cap on a line's bytes, and the `Position` after a row that lets a
later run resume there (refusing when the bytes before it have changed)."""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from headcut_grader.errors import UserError, counted, named

# Lines of TSV/CSV/JSON lines are read with a cap, so a file without newlines cannot fill the memory before the
# text rule (validation.MAX_TEXT_CHARS) is reached.
MAX_LINE_BYTES = 8_000_000

# how a resumed grade's caller spells its switches otherwise than NAME or --NAME (headcut_grader.errors.named)
RESUME_SPELLED = {"resume": "resume=True", "overwrite": "overwrite=True"}


def afresh(names: str) -> str:
    """How the caller of an interrupted grade (grade_file) starts it again from its first row, after "run":
    `names` "arguments" a Python call's (resume=True, overwrite=True), "flags" `headcut grade`'s."""
    said = {name: named(name, names, section="", spelled={"arguments": RESUME_SPELLED}) for name in RESUME_SPELLED}
    return f"without {said['resume']} and with {said['overwrite']}"


@dataclass(frozen=True)
class Position:
    """After a row: `offset` bytes of the file read, on line `line` (JSON arrays: after item `line`); `sha256` of
    those bytes, so a resumed run can tell that the rows before it are unchanged."""

    offset: int = 0
    line: int = 0
    sha256: str = ""


# How a file that is not UTF-8 text starts, where its first bytes say what it is: re-saving it would not help
_KINDS = ((b"\x1f\x8b", "gzip-compressed", "decompress it (gunzip)"), (b"PK\x03\x04", "a zip archive", "extract it"),
          (b"BZh", "bzip2-compressed", "decompress it (bunzip2)"),
          (b"\xfd7zXZ", "xz-compressed", "decompress it (unxz)"),
          (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it (unzstd)"),
          (b"\xff\xfe\x00\x00", "UTF-32 text", "re-save it as UTF-8"),
          (b"\x00\x00\xfe\xff", "UTF-32 text", "re-save it as UTF-8"),
          (b"\xff\xfe", "UTF-16 text", "re-save it as UTF-8"), (b"\xfe\xff", "UTF-16 text", "re-save it as UTF-8"))


def utf8_fix(path: Path) -> str:
    """What to do with `path`, which is not UTF-8: what its first bytes say it is (a gzip file, UTF-16 text) and how
    to make it UTF-8 text, else 're-save the file as UTF-8'."""
    return packed_fix(path) or "re-save the file as UTF-8"


def packed_fix(path: Path) -> str | None:
    """What `path`'s first bytes say it is, where that is no text to read as it is (a gzip file, a zip archive,
    UTF-16 text), and how to make it text: 'the file is gzip-compressed: decompress it (gunzip) and pass that'; else
    None."""
    try:
        with open(path, "rb") as f:
            start = f.read(6)
    except OSError:
        start = b""
    said = next(((kind, fix) for magic, kind, fix in _KINDS if start.startswith(magic)), None)
    return f"the file is {said[0]}: {said[1]} and pass that" if said else None


def unmarked_wide(start: bytes) -> str | None:
    """'UTF-16' or 'UTF-32' where `start`, a file's first bytes, is text of that encoding without a byte-order mark:
    each character of a header's plain letters is one byte beside NULs, which read as UTF-8 without an error (a
    header of NULs, then data rows refused one by one); else None."""
    for width in (4, 2):
        chars = [start[i:i + width] for i in range(0, len(start) - width + 1, width)]
        for at in (0, width - 1):  # little- or big-endian
            if len(chars) >= 4 and all(c[at] and c.count(0) == width - 1 for c in chars):
                return f"UTF-{8 * width}"
    return None


class Lines:
    """A file's lines as text, read one at a time with a cap on a line's bytes; it knows how far it has read
    (bytes, lines, and a hash of those bytes) so a reader can resume after any row. A JSON array's reader
    (json_array) reads `file` itself, in blocks, and keeps these counts by items."""

    def __init__(self, path: Path):
        self.path = path
        self.number, self.offset, self.first_text = 0, 0, ""
        self.hash = hashlib.sha256()
        self.file = open(path, "rb")
        blank = True
        for raw in iter(lambda: self.file.readline(MAX_LINE_BYTES + 1), b""):
            if raw.strip():
                blank = False
                break
        if blank:
            self.file.close()
            raise UserError(f"{path} is empty; pass a file with a header and data rows.")
        self.file.seek(0)
        self.mark = _mark(self.file)
        if kind := unmarked_wide(self.file.read(32)):
            self.file.close()
            raise UserError(f"{path} is {kind} text without a byte-order mark (its letters are padded with NUL "
                            "bytes); re-save it as UTF-8 and pass that.")
        self.file.seek(0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()

    def __iter__(self):
        while True:
            at_start = self.file.tell() == 0
            raw = self.file.readline(MAX_LINE_BYTES + 1)
            if not raw:
                self.check_unchanged()
                return
            self.number += 1
            if len(raw) > MAX_LINE_BYTES:
                raise UserError(f"{self.path}, line {self.number} is longer than {counted(MAX_LINE_BYTES, 'byte')}; "
                                "a row holds one query, title and grade: is this the right file?")
            self.offset += len(raw)
            self.hash.update(raw)
            try:
                text = raw.decode("utf-8-sig" if at_start else "utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{self.path}, line {self.number}, byte column {e.start + 1}: not UTF-8 (byte "
                                f"0x{raw[e.start]:02x}); {utf8_fix(self.path)}.") from None
            if not self.first_text and text.strip():
                self.first_text = text
            yield text

    def check_unchanged(self) -> None:
        """At the end of the file: refuse a file written to while it was read (a download or export not yet done,
        a file rewritten in place), whose rows are some of one version and some of another, or cut short."""
        now = _mark(self.file)
        if now == self.mark:
            return
        how = (f"{self.mark[0]:,} bytes when opened, {now[0]:,} at the end" if now[0] != self.mark[0] else
               "its modification time changed while it was read")  # rewritten in place at the same size
        raise UserError(f"{self.path} changed while it was read ({how}); wait until whatever writes it has finished, "
                        "then read it again.")

    def position(self) -> Position:
        return Position(self.offset, self.number, self.hash.hexdigest())

    def seek(self, start: Position, names: str = "arguments") -> "Lines":
        """Continue after `start`, which a run over these same bytes reported; refuse if they have changed, saying
        how to start again as `names` (afresh) says."""
        self.hash = _prefix_hash(self.path, start.offset)
        if self.hash.hexdigest() != start.sha256:
            raise UserError(f"{self.path} has changed since the interrupted run read it; grade it from the start "
                            f"(run {afresh(names)}).")
        self.file.seek(start.offset)
        self.number, self.offset = start.line, start.offset
        return self


def _mark(file) -> tuple[int, int]:
    """The size and modification time of an open file, which writing to it changes."""
    found = os.fstat(file.fileno())
    return found.st_size, found.st_mtime_ns


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
