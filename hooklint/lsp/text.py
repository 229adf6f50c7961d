"""Buffers and positions.

An LSP position is a 0-based line and a 0-based offset counted in the code
units of the negotiated encoding (UTF-16 unless the client offers another);
hooklint's are a 1-based row and a 1-based column counted in code points.
Both count lines the same way, at ``\\r\\n``, ``\\r`` and ``\\n`` only
(``str.splitlines`` also splits at form feeds and ``\\u2028``, which would
shift every later row), so the buffers are kept here rather than in pygls'
workspace, whose documents split lines with ``splitlines``.

Nothing here imports pygls: positions are plain ``(line, character)`` pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

from hooklint.static.source import LINE_BREAK

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"


def units(text: str, encoding: str) -> int:
    """The length of ``text`` in the encoding's code units."""
    if encoding == UTF32 or text.isascii():
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def chars_in(line: str, count: int, encoding: str) -> int:
    """How many code points of ``line`` the first ``count`` code units cover
    (a count that ends inside a character stops before it; past the line's
    end, the line's length, as the protocol asks)."""
    if count <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(count, len(line))
    used = 0
    for index, char in enumerate(line):
        size = units(char, encoding)
        if used + size > count:
            return index
        used += size
    return len(line)


class LineIndex:
    """Where each line of a text starts and where its content ends."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        self.ends: list[int] = []
        for match in LINE_BREAK.finditer(text):
            self.ends.append(match.start())
            self.starts.append(match.end())
        self.ends.append(len(text))

    @property
    def line_count(self) -> int:
        return len(self.starts)

    def line(self, index: int) -> str:
        return self.text[self.starts[index]:self.ends[index]]

    # ---------------------------------------------------------------- LSP -> text

    def offset(self, line: int, character: int, encoding: str) -> int:
        """The text offset of an LSP position (clamped into the text)."""
        if line < 0:
            return 0
        if line >= self.line_count:
            return len(self.text)
        return self.starts[line] + chars_in(self.line(line), character, encoding)

    def to_hooklint(self, line: int, character: int, encoding: str) -> tuple[int, int]:
        """An LSP position -> (row, column), both 1-based, in code points."""
        if line < 0:
            return 1, 1
        if line >= self.line_count:
            last = self.line_count - 1
            return last + 1, len(self.line(last)) + 1
        return line + 1, chars_in(self.line(line), character, encoding) + 1

    # ---------------------------------------------------------------- text -> LSP

    def to_lsp(self, row: int, column: int, encoding: str) -> tuple[int, int]:
        """A 1-based (row, column) in code points -> an LSP (line, character),
        clamped into the text (a finding past the end sits at the end)."""
        if row < 1:
            return 0, 0
        if row > self.line_count:
            last = self.line_count - 1
            return last, units(self.line(last), encoding)
        text = self.line(row - 1)
        return row - 1, units(text[:max(column - 1, 0)], encoding)


def apply_change(text: str, start: tuple[int, int] | None, end: tuple[int, int] | None, new_text: str,
                 encoding: str) -> str:
    """The text after one ``contentChanges`` entry: a range replaced, or (no
    range) the whole text."""
    if start is None or end is None:
        return new_text
    index = LineIndex(text)
    a = index.offset(start[0], start[1], encoding)
    b = index.offset(end[0], end[1], encoding)
    if b < a:
        a, b = b, a
    return text[:a] + new_text + text[b:]


@dataclass(frozen=True)
class LineEdit:
    """Replace columns [start, end) of one line (1-based row, 0-based code-point
    columns) with ``content``."""

    row: int
    start: int
    end: int
    content: str


def minimal_line_edit(row: int, old: str, new: str) -> LineEdit:
    """The smallest edit that turns line ``old`` into ``new``: the cursor and
    the user's undo history stay where they were on the rest of the line."""
    prefix = 0
    limit = min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]:
        suffix += 1
    return LineEdit(row, prefix, len(old) - suffix, new[prefix:len(new) - suffix])


def changed_span(old: str, new: str) -> tuple[int, int, str]:
    """(start, end, replacement): the part of ``old`` that differs from ``new``,
    as one replacement (for fix-all: one edit instead of a whole-buffer one)."""
    prefix = 0
    limit = min(len(old), len(new))
    while prefix < limit and old[prefix] == new[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and old[len(old) - 1 - suffix] == new[len(new) - 1 - suffix]:
        suffix += 1
    # never split a \r\n: an edit that ends between the two would leave a bare \r
    while prefix > 0 and old[prefix - 1] == "\r" and old[prefix:prefix + 1] == "\n":
        prefix -= 1
    while suffix > 0 and old[len(old) - suffix:len(old) - suffix + 1] == "\n" \
            and old[len(old) - suffix - 1:len(old) - suffix] == "\r":
        suffix -= 1
    return prefix, len(old) - suffix, new[prefix:len(new) - suffix]


def offset_to_lsp(index: LineIndex, offset: int, encoding: str) -> tuple[int, int]:
    """A text offset -> an LSP (line, character)."""
    import bisect

    line = max(bisect.bisect_right(index.starts, offset) - 1, 0)
    column = min(offset, index.ends[line]) - index.starts[line]
    return line, units(index.line(line)[:column], encoding)
