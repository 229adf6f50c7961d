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
        for tok in tokenize.generate_tokens(io.StringIO(_with_newlines(text)).readline):
            if tok.type == tokenize.COMMENT and "noqa" in tok.string.lower():
                yield tok.start[0], tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        from hooklint.static.source import python_lines

        for row, line in enumerate(python_lines(text), start=1):
            index = line.find("#")
            if index >= 0 and "noqa" in line[index:].lower():
                yield row, line[index:]


_CODES_IN_NOQA = re.compile(r"#\s*(?:hooklint\s*:\s*)?noqa\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*)",
                            re.I)


def unknown_noqa_codes(text: str, known: frozenset[str]) -> list[tuple[int, str]]:
    """(row, code) of each HKL code named in a ``# noqa`` comment that is not a
    rule: a typo there silently suppresses nothing.  Other tools' codes (E501)
    are theirs.  Fast on the files that name no HKL code at all."""
    if "HKL" not in text and "hkl" not in text:
        return []
    if not any(_has_unknown(m.group("codes"), known) for m in _CODES_IN_NOQA.finditer(text)):
        return []
    out = []
    for row, comment in _comments(text):  # only real comments count, not strings
        for match in _CODES_IN_NOQA.finditer(comment):
            for code in _CODE_RE.findall(match.group("codes")):
                code = code.upper()
                if code.startswith("HKL") and code not in known:
                    out.append((row, code))
    return out


def _has_unknown(codes: str, known: frozenset[str]) -> bool:
    return any(c.upper().startswith("HKL") and c.upper() not in known for c in _CODE_RE.findall(codes))


# ---------------------------------------------------------------- --add-noqa


def add_noqa_comments(text: str, codes_by_row: dict[int, set[str]]) -> tuple[str, int, list[int]]:
    """Append ``# noqa: CODES`` to the given rows (merged into a ``# noqa``
    comment already there, keeping other tools' codes).  Returns the new text,
    how many rows got a comment, and the rows where a comment cannot go (the
    line ends inside a string, or continues with a backslash)."""
    comments, blocked = _comment_layout(text)
    lines = _split_keepends(text)
    added = 0
    impossible: list[int] = []
    for row in sorted(codes_by_row):
        if not 1 <= row <= len(lines) or row in blocked:
            impossible.append(row)
            continue
        line = lines[row - 1]
        body = line.rstrip("\r\n")
        ending = line[len(body):]
        new_codes = {c.upper() for c in codes_by_row[row]}
        comment = comments.get(row)
        if comment is not None:
            start, comment_text = comment
            merged = _merge_into_comment(comment_text, new_codes)
            if merged is None:
                continue  # a bare `# noqa` already silences the line
            body = body[:start] + merged + body[start + len(comment_text):]
        else:
            body = body.rstrip(" \t") + "  # noqa: " + ", ".join(sorted(new_codes))
        if body + ending != line:
            lines[row - 1] = body + ending
            added += 1
    return "".join(lines), added, impossible


def _merge_into_comment(comment: str, new_codes: set[str]) -> str | None:
    match = _LINE_RE.search(comment)
    if match is None:
        return comment + "  # noqa: " + ", ".join(sorted(new_codes))
    codes = match.group("codes")
    if not codes:
        return None
    existing = [c for c in re.split(r"[,\s]+", codes) if c]
    have = {c.upper() for c in existing}
    extra = sorted(c for c in new_codes if c not in have)
    if not extra:
        return comment
    start, end = match.span("codes")
    return comment[:start] + ", ".join(existing + extra) + comment[end:]


def _with_newlines(text: str) -> str:
    """``text`` with every line break Python knows (``\\r\\n``, ``\\r``,
    ``\\n``) written as ``\\n``: rows and columns stay, and the tokenizer,
    which splits lines on ``\\n`` only, sees the rows Python sees (a file
    with old Mac line ends is otherwise one long line to it)."""
    if "\r" not in text:
        return text
    lines = _split_keepends(text)
    return "".join(line.rstrip("\r\n") + "\n" if line.endswith(("\r", "\n")) else line for line in lines)


def _split_keepends(text: str) -> list[str]:
    from hooklint.static.source import python_lines

    return python_lines(text, keepends=True)


def _comment_layout(text: str) -> tuple[dict[int, tuple[int, str]], set[int]]:
    """(row -> (column offset, text) of its comment; rows whose end is inside a
    string or a backslash continuation)."""
    comments: dict[int, tuple[int, str]] = {}
    blocked: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(_with_newlines(text)).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = (tok.start[1], tok.string)
            elif tok.start[0] < tok.end[0] and tok.type not in (tokenize.NEWLINE, tokenize.NL):
                blocked.update(range(tok.start[0], tok.end[0]))  # a multi-line string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return {}, set(range(1, len(_split_keepends(text)) + 2))
    from hooklint.static.source import python_lines

    for row, line in enumerate(python_lines(text), start=1):
        if row not in comments and line.rstrip().endswith("\\") and row not in blocked:
            blocked.add(row)
    return comments, blocked


# ---------------------------------------------------------------- unused `# noqa` codes (HKL003)


@dataclass(frozen=True)
class NoqaDirective:
    """A line-level ``# noqa: CODES`` comment; columns are 0-based character
    offsets in its line, ends exclusive."""

    row: int
    line: str
    comment: tuple[int, int]  # the whole comment token
    span: tuple[int, int]  # the `# noqa: CODES` part
    codes: tuple[tuple[str, int, int], ...]  # each code as written, with its columns


@dataclass(frozen=True)
class UnusedNoqa:
    directive: NoqaDirective
    unused: tuple[str, ...]  # the codes as written, in order
    start: int  # the edit that removes them: columns in the line, and the new text
    end: int
    replacement: str


def noqa_directives(text: str) -> list[NoqaDirective]:
    """Every line-level ``# noqa`` comment that names codes (a bare ``# noqa``
    and the file-level ``# hooklint: noqa`` are not included)."""
    if "noqa" not in text.lower():
        return []
    from hooklint.static.source import python_lines

    lines = python_lines(text)
    out = []
    try:
        tokens = [tok for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                  if tok.type == tokenize.COMMENT and "noqa" in tok.string.lower()]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return []  # only files that parse get here; be silent rather than guess
    for tok in tokens:
        row, col = tok.start
        if _FILE_RE.match(tok.string.strip()) or not 1 <= row <= len(lines):
            continue
        match = _LINE_RE.search(tok.string)
        if match is None or not match.group("codes"):
            continue
        base = col + match.start("codes")
        codes = tuple((m.group(0), base + m.start(), base + m.end()) for m in _CODE_RE.finditer(match.group("codes")))
        out.append(NoqaDirective(row, lines[row - 1], (col, col + len(tok.string)),
                                 (col + match.start(), col + match.end()), codes))
    return out


def unused_noqa(text: str, used: dict[int, set[str]], checkable: frozenset[str],
                never: frozenset[str] = frozenset()) -> list[UnusedNoqa]:
    """The ``# noqa`` codes that silence nothing: an HKL code in
    ``checkable`` (enabled, and decided by this run) with no finding of that
    code starting on the line (``used``: row -> codes found there before
    ``# noqa`` applied), or named twice.  Other tools' codes are theirs."""
    out = []
    for directive in noqa_directives(text):
        found = used.get(directive.row, set())
        seen: set[str] = set()
        unused = []
        for code, start, end in directive.codes:
            upper = code.upper()
            if upper.startswith("HKL") and upper not in never:
                if upper in seen or (upper in checkable and upper not in found):
                    unused.append((code, start, end))
            seen.add(upper)
        if unused:
            start, end, replacement = _removal(directive, unused)
            out.append(UnusedNoqa(directive, tuple(c for c, _s, _e in unused), start, end, replacement))
    return out


def _removal(directive: NoqaDirective, unused: list[tuple[str, int, int]]) -> tuple[int, int, str]:
    """(start, end, new text) in the line: the codes left, or the directive gone."""
    gone = {(start, end) for _code, start, end in unused}
    kept = [code for code, start, end in directive.codes if (start, end) not in gone]
    codes_start, codes_end = directive.codes[0][1], directive.codes[-1][2]
    if kept:
        return codes_start, codes_end, ", ".join(kept)
    line = directive.line
    comment_start, comment_end = directive.comment
    start, end = directive.span
    before, after = line[comment_start:start], line[end:comment_end]
    after_ws = len(after) - len(after.lstrip())
    if not before.strip():
        if not after.strip():  # the comment is the directive: remove it and the spaces before it
            return len(line[:comment_start].rstrip()), comment_end, ""
        if after.lstrip().startswith("#"):  # `# noqa: HKL101  # type: ignore`
            return start, end + after_ws, ""
        return start, end + after_ws, "# "  # `# noqa: HKL101 because ...` stays a comment
    if not after.strip():  # `# type: ignore  # noqa: HKL101`
        return start - (len(before) - len(before.rstrip())), end, ""
    return start, end + after_ws, ""
