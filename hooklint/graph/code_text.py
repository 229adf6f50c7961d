"""What of a Python file can change the model the graph layer builds from it.

The graph layer's facts hold line numbers (where an op ran, where a class
starts) and the text of those lines (``Op.code``), so what they depend on is
each line that holds code, at its number: :func:`code_digest`.  Comments and
blank lines are left out, so adding a comment at the end of a model file, a
comment after the code on a line, or rewording a comment line keeps the
digest; anything that moves a line of code to another number changes it (the
facts would point at the wrong lines).

Kept as code: docstrings and every other string (code can read them), and
``# type:`` comments (TorchScript reads them).  A file that does not tokenize
has no code digest: its bytes decide.  Never imports torch.
"""

from __future__ import annotations

import hashlib
import io
import re
import tokenize

from hooklint.static.source import python_lines

# comments that code reads: TorchScript's `# type: (Tensor) -> Tensor`
_READ_COMMENT = re.compile(r"#\s*type\s*:")
_NOT_CODE = frozenset({tokenize.COMMENT, tokenize.NL, tokenize.DEDENT, tokenize.ENDMARKER, tokenize.ENCODING})


def without_comment(line: str) -> str:
    """``line`` without its trailing comment (``x = f(y)  # why`` -> ``x = f(y)``),
    as tokenizing the line alone finds it; the line as it is when that finds
    none (or a comment code reads)."""
    if "#" not in line:
        return line
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.type == tokenize.COMMENT:
                if _READ_COMMENT.match(token.string):
                    return line
                return line[:token.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        pass  # a line of a longer statement: the tokens before the error were seen
    return line


def code_lines(text: str) -> list[tuple[int, str]] | None:
    """(number, text) of each line of ``text`` that holds code, without its
    trailing comment (lines inside a string spanning several lines are kept
    whole); None when ``text`` does not tokenize."""
    lines = python_lines(text, keepends=True)
    rows: set[int] = set()
    spanned: set[int] = set()  # inside a token over several lines: kept whole
    try:
        for token in tokenize.generate_tokens(iter(lines).__next__):
            if token.type in _NOT_CODE:
                if token.type == tokenize.COMMENT and _READ_COMMENT.match(token.string):
                    rows.add(token.start[0])
                    spanned.add(token.start[0])
                continue
            rows.update(range(token.start[0], token.end[0] + 1))
            if token.end[0] > token.start[0]:
                spanned.update(range(token.start[0], token.end[0] + 1))
    except (tokenize.TokenError, SyntaxError):
        return None
    out = []
    for row in sorted(rows):
        if row > len(lines):
            continue
        line = lines[row - 1].rstrip("\r\n")
        out.append((row, line if row in spanned else without_comment(line)))
    return out


def code_digest(text: str) -> str | None:
    """A digest of :func:`code_lines`; None when ``text`` does not tokenize."""
    rows = code_lines(text)
    if rows is None:
        return None
    digest = hashlib.sha256()
    for row, kept in rows:
        digest.update(f"{row}\t{kept}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()
