"""``# noqa`` comments, flake8's syntax, and file-level ``# hooklint: noqa``.

* ``# noqa`` on a line suppresses every finding that starts on that line;
* ``# noqa: HKL101,HKL201`` (case-insensitive, commas or spaces) only those codes;
  a ``# noqa: E501`` that names no HKL code leaves hooklint's findings alone;
* ``# hooklint: noqa`` anywhere in a file, on a line of its own, suppresses
  the whole file; ``# hooklint: noqa: HKL101`` only those codes in the file.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_LINE_RE = re.compile(r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?", re.I)
_FILE_RE = re.compile(r"^#\s*hooklint\s*:\s*noqa(?:\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?\s*$",
                      re.I)
_CODE_RE = re.compile(r"[A-Z]+[0-9]+", re.I)

ALL = "*"


@dataclass
class NoqaMap:
    lines: dict[int, frozenset[str]] = field(default_factory=dict)  # row -> codes or {ALL}
    file_codes: frozenset[str] = frozenset()  # {ALL} for the whole file

    def suppresses(self, code: str, row: int) -> bool:
        if ALL in self.file_codes or code in self.file_codes:
            return True
        codes = self.lines.get(row)
        return codes is not None and (ALL in codes or code in codes)


def parse_noqa(text: str) -> NoqaMap:
    result = NoqaMap()
    if "noqa" not in text.lower():
        return result
    for row, comment in _comments(text):
        file_match = _FILE_RE.match(comment.strip())
        if file_match:
            codes = file_match.group("codes")
            new = frozenset({ALL}) if not codes else frozenset(c.upper() for c in _CODE_RE.findall(codes))
            result.file_codes = result.file_codes | new
            continue
        match = _LINE_RE.search(comment)
        if match:
            codes = match.group("codes")
            result.lines[row] = (
                frozenset({ALL}) if not codes else frozenset(c.upper() for c in _CODE_RE.findall(codes))
            )
    return result


def _comments(text: str):
    """(row, comment text) of real comments; strings that merely contain
    ``# noqa`` do not count.  Falls back to a line scan if tokenizing fails."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and "noqa" in tok.string.lower():
                yield tok.start[0], tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        for row, line in enumerate(text.splitlines(), start=1):
            index = line.find("#")
            if index >= 0 and "noqa" in line[index:].lower():
                yield row, line[index:]
