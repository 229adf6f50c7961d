"""Reading source files the way Python does (PEP 263 encodings, BOMs), without
ever raising on bad input: every problem becomes a :class:`SourceError`."""

from __future__ import annotations

import codecs
import io
import os
import re
import stat
import tokenize
from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class SourceError(Exception):
    """A file that cannot be read or decoded.  ``kind`` is ``io`` or ``decode``."""

    kind: str
    message: str
    row: int = 1
    column: int = 1


def decode_source(data: bytes) -> str:
    """Decode bytes as Python would, raising SourceError on failure."""
    if b"\x00" in data[:8192] and not data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise SourceError("decode", "file contains null bytes; it looks binary, not Python source")
    plain = _plain_utf8(data)
    if plain is not None:
        return plain
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as exc:
        # detect_encoding also fails on undecodable bytes in the first two
        # lines; name the byte rather than a declaration that is not there
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as bad:
            row, column = _error_position(data, bad.start)
            raise SourceError("decode", f"file is not valid utf-8 text (byte {data[bad.start]:#04x}) and declares "
                              f"no other encoding", row, column) from None
        raise SourceError("decode", f"invalid encoding declaration: {exc.msg}") from None
    try:
        text = data.decode(encoding)
    except (UnicodeDecodeError, LookupError) as exc:
        row, column = _error_position(data, getattr(exc, "start", 0))
        if isinstance(exc, UnicodeDecodeError):
            detail = f"byte {data[exc.start]:#04x}: {exc.reason}"
        else:
            detail = str(exc)
        raise SourceError("decode", f"file is not valid {encoding} text ({detail})", row, column) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def _plain_utf8(data: bytes) -> str | None:
    """The text of a file that is plainly UTF-8, as tokenize.detect_encoding
    and decoding would give it (a fifth of the cost: this runs on every file
    of a run); None when the file may say otherwise (a BOM, the word `coding`
    in its first two lines) or does not decode, for the full treatment."""
    if data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return None
    first = data.find(b"\n")
    second = data.find(b"\n", first + 1) if first != -1 else -1
    if b"coding" in (data if second == -1 else data[:second]):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def read_regular_file(path: str) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file and its stat, raising SourceError otherwise.

    Opened without blocking and checked before reading: a FIFO named
    ``x.py`` would block the run forever, ``/dev/zero`` would never end."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError as exc:
        raise SourceError("io", f"cannot read file: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SourceError("io", f"cannot read file: it is {_file_kind(st.st_mode)}, not a regular file")
            return handle.read(), st
        except OSError as exc:
            raise SourceError("io", f"cannot read file: {exc.strerror or exc}") from None


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


def read_source(path: str) -> str:
    return decode_source(read_regular_file(path)[0])


def _error_position(data: bytes, offset: int) -> tuple[int, int]:
    before = data[:offset]
    row = before.count(b"\n") + 1
    column = offset - (before.rfind(b"\n") + 1) + 1
    return row, column


# Python's own line breaks.  str.splitlines() also splits on \x0c, \x1c, \x85,
# \u2028 and more, which would shift every row after such a character.
LINE_BREAK = re.compile(r"\r\n|\r|\n")


def python_lines(text: str, keepends: bool = False) -> list[str]:
    """The lines of a text as Python (and ast line numbers) count them."""
    if not keepends:
        lines = LINE_BREAK.split(text)
        if lines and not lines[-1]:
            lines.pop()
        return lines
    out, start = [], 0
    for match in LINE_BREAK.finditer(text):
        out.append(text[start : match.end()])
        start = match.end()
    if start < len(text):
        out.append(text[start:])
    return out


def _byte_slice(line: str, start: int, end: int | None) -> str:
    """``line[start:end]`` in UTF-8 byte offsets, as the ast counts columns."""
    if line.isascii():
        return line[start:end]
    return line.encode("utf-8")[start:end].decode("utf-8", errors="replace")


class LineIndex:
    """Converts ast positions (1-based rows, UTF-8 byte columns) to 1-based
    character columns for one text."""

    def __init__(self, text: str):
        self.text = text

    @cached_property
    def lines(self) -> list[str]:
        # only needed where a finding is reported: most parsed files have none
        return python_lines(self.text, keepends=True) or [""]

    def line(self, row: int) -> str:
        if 1 <= row <= len(self.lines):
            return self.lines[row - 1].rstrip("\r\n")
        return ""

    def segment(self, node) -> str:
        """``ast.get_source_segment(text, node)``, from the lines split once:
        the ast function splits the whole text on every call, which made a
        file with thousands of findings quadratic (5,000 legacy hooks: 300 s)."""
        row, col = getattr(node, "lineno", None), getattr(node, "col_offset", None)
        end_row, end_col = getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)
        if row is None or col is None or end_row is None or end_col is None:
            return ""
        lines = self.lines
        if not 1 <= row <= end_row <= len(lines):
            return ""
        first, last = lines[row - 1], lines[end_row - 1]
        if row == end_row:
            return _byte_slice(first, col, end_col)
        return _byte_slice(first, col, None) + "".join(lines[row:end_row - 1]) + _byte_slice(last, 0, end_col)

    def char_column(self, row: int, byte_col: int) -> int:
        line = self.line(row)
        if line.isascii():
            return byte_col + 1
        return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="replace")) + 1
