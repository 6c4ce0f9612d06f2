"""A JSON array of rows read one item at a time, like the lines of the other formats: memory holds one item and
a block read ahead, whatever the file's size (json.loads of the whole file took ~4 times its size).

Each item is decoded with json's own decoder (`raw_decode`) from a window of text read in blocks; an item the
window cuts off is decoded again once the next block is in. `lines` counts what has been decoded (bytes, items,
a hash of those bytes), so a later run can resume after any item as it does after a line."""
from __future__ import annotations

import json
import re
from pathlib import Path

from headcut_grader.errors import UserError, counted
from headcut_grader.lines import MAX_LINE_BYTES, Lines, utf8_fix

BLOCK_BYTES = 1 << 20
# One item is one row: the JSON lines cap on a line's bytes holds for an item too.
MAX_ITEM_BYTES = MAX_LINE_BYTES
# A decoding error this close to the window's end may only mean the window cut the item (a number, `true` or a
# \uXXXX\uXXXX escape cut in two), so it is judged again with more text.
_CUT_MARGIN = 16
_SPACE = re.compile(r"[ \t\n\r]*")
_CONTINUATION = bytes(range(0x80, 0xC0))  # the bytes of a UTF-8 character after its first


class _Window:
    """Text of the file read ahead in blocks; `text[:done]` is decoded and counted in `lines`."""

    def __init__(self, lines: Lines):
        self.lines, self.text, self.done, self.eof = lines, "", 0, False
        self.read = lines.offset  # bytes read from the file so far

    def more(self) -> bool:
        """Read the next block onto the text; False at the end of the file."""
        raw = self.lines.file.read(BLOCK_BYTES)
        if not raw:
            self.lines.check_unchanged()
            self.eof = True
            return False
        raw += self.lines.file.read(_missing_bytes(raw))  # a block may end inside a character
        try:
            self.text += raw.decode("utf-8")  # a BOM stays, so that each piece encodes back to its bytes
        except UnicodeDecodeError as e:
            line, column = where(self.lines.path, self.read + e.start, chars=False)
            raise UserError(f"{self.lines.path}, line {line}, byte column {column}: not UTF-8 (byte "
                            f"0x{raw[e.start]:02x}); {utf8_fix(self.lines.path)}.") from None
        self.read += len(raw)
        return True

    def consume(self, end: int) -> int:
        """Count text[done:end] as read (bytes and hash), drop what is counted once it passes a block, and return
        where `end` now is."""
        piece = self.text[self.done:end].encode("utf-8")
        self.lines.hash.update(piece)
        self.lines.offset += len(piece)
        if end > BLOCK_BYTES:
            self.text, end = self.text[end:], 0
        self.done = end
        return end

    def byte(self, i: int) -> int:
        """The file offset of text[i]."""
        return self.lines.offset + len(self.text[self.done:i].encode("utf-8"))

    def next_char(self, i: int) -> tuple[int, str]:
        """The first character at or after `i` that is not a space, and where it is ("" at the end); spaces
        are counted as read on the way, so that a run of them does not fill the memory."""
        while True:
            i = _SPACE.match(self.text, i).end()
            if i < len(self.text):
                return i, self.text[i]
            i = self.consume(i)
            if not self.more():
                return i, ""


def _missing_bytes(raw: bytes) -> int:
    """How many bytes the character `raw` ends in still needs (0 if it ends whole)."""
    start = len(raw) - 1
    while start > 0 and len(raw) - start < 4 and raw[start] in _CONTINUATION:
        start -= 1
    lead = raw[start]
    size = 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return max(0, size - (len(raw) - start))


def where(path: Path, offset: int, *, chars: bool = True) -> tuple[int, int]:
    """The line and column (in characters, or in bytes) of byte `offset` of the file, counted by reading it in
    blocks: asked only for a message, so that reading never tracks it."""
    line, column, start_bom = 1, 0, False
    with open(path, "rb") as f:
        start_bom = f.read(3) == b"\xef\xbb\xbf"
        f.seek(0)
        while offset > 0:
            block = f.read(min(offset, BLOCK_BYTES))
            if not block:
                break
            offset -= len(block)
            newlines = block.count(b"\n")
            if newlines:
                line += newlines
                block, column = block[block.rfind(b"\n") + 1:], 0
            column += len(block.translate(None, _CONTINUATION)) if chars else len(block)
    if chars and line == 1 and start_bom:
        column -= 1  # the BOM is no character of the text
    return line, column + 1


def json_array_items(lines: Lines, decoder: json.JSONDecoder):
    """(item number, object) of each item of the JSON array in `lines`, from the array's start or, where `lines`
    was moved past some items (a resume), from after them."""
    path, window, fresh = lines.path, _Window(lines), lines.offset == 0
    i, char = window.next_char(0)
    if fresh:
        if char == "\ufeff":
            i, char = window.next_char(i + 1)
        if char != "[":
            raise UserError(f"{path}: expected a JSON array of objects (or JSON lines); fix the file's shape.")
        i, char = window.next_char(i + 1)
        if char == "]":
            return _check_end(window, i + 1)
    elif char == "":  # the run before read the whole array
        return
    elif char == "]":
        return _check_end(window, i + 1)
    elif char == ",":
        i, char = window.next_char(i + 1)
    else:
        _invalid(window, i, "Expecting ',' delimiter")
    number = lines.number
    while True:
        number += 1
        item, i = _decode(window, decoder, i)
        if not isinstance(item, dict):
            raise UserError(f"{path}: item {number} of the array is not an object; the file must be a JSON array "
                            "of objects (or JSON lines): fix the file's shape.")
        lines.number = number
        i = window.consume(i)
        yield number, item
        i, char = window.next_char(i)
        if char == "]":
            return _check_end(window, i + 1)
        if char != ",":
            _invalid(window, i, "Expecting ',' delimiter")
        i, char = window.next_char(i + 1)


def _decode(window: _Window, decoder: json.JSONDecoder, i: int):
    """The item at text[i] and where it ends, reading more text while the window cuts it off."""
    while True:
        try:
            return decoder.raw_decode(window.text, i)
        except json.JSONDecodeError as e:
            cut = e.msg.startswith("Unterminated string") or e.pos + _CUT_MARGIN > len(window.text)
            if window.eof or not cut:
                _invalid(window, e.pos, e.msg)
            if window.byte(len(window.text)) - window.byte(i) > MAX_ITEM_BYTES:
                line, _ = where(window.lines.path, window.byte(i))
                raise UserError(f"{window.lines.path}, line {line}: an item of the array is longer than "
                                f"{counted(MAX_ITEM_BYTES, 'byte')}; an item holds one query, title and grade: is "
                                "this the right file?") from None
            window.more()
        except RecursionError:
            raise UserError(f"{window.lines.path}: JSON nested too deeply; fix the file's shape.") from None


def _check_end(window: _Window, i: int) -> None:
    """After the array's closing bracket: only spaces."""
    i, char = window.next_char(i)
    if char:
        _invalid(window, i, "Extra data")


def _invalid(window: _Window, i: int, msg: str):
    line, column = where(window.lines.path, window.byte(i))
    raise UserError(f"{window.lines.path}, line {line}, column {column}: invalid JSON ({msg}); fix it.")
