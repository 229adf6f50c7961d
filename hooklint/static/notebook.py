"""Jupyter notebooks (``.ipynb``, nbformat 4) as Python text with a cell map.

The rules read one Python text per file.  A notebook's code cells run in one
namespace, in order (a hook registered in cell 5 on a model built in cell 2),
so they are analysed together: the code cells are joined, each followed by a
:data:`CELL_BOUNDARY` comment line, into the notebook's *Python text*, and a
:class:`Notebook` maps its rows back to (cell, row in the cell).

IPython syntax that is not Python (``%magic``, ``!shell``, ``x = !cmd``,
``obj?``, a ``%%bash`` cell) is masked, line for line, so that rows and
columns elsewhere stay put: a masked line keeps its indentation and becomes
``pass`` (or ``x = None``), with a :data:`MAGIC_MARK` comment naming the line,
so that fixed text can be turned back into the original cells.  A cell whose
first line is a cell magic that runs Python (``%%time``, ``%%capture``...) keeps
its body; any other cell magic (``%%bash``, ``%%writefile``) masks the whole
cell.

Cells are numbered as the notebook shows them: 1-based, markdown and raw cells
included.  Fixed cells are written back by replacing only the text of their
``source`` value in the JSON, so indentation, key order, outputs, metadata and
the final newline stay byte for byte.

Nothing here imports torch or runs the notebook.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass, field
from json.decoder import scanstring  # type: ignore[attr-defined]

from hooklint.static.source import LINE_BREAK, SourceError

NOTEBOOK_SUFFIX = ".ipynb"
CELL_BOUNDARY = "# hooklint: end of cell"
MAGIC_MARK = "# hooklint: ipython "
_MAGIC_MARK_RE = re.compile(r"  # hooklint: ipython (\d+)$")

# Cell magics whose body is Python that runs in the kernel.
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

_ASSIGN_MAGIC = re.compile(r"^(\s*)([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)\s*=\s*[%!]")
_FUTURE = re.compile(r"^\s*from\s+__future__\s+import\b")
_WS = re.compile(r"[ \t\n\r]*")


def is_notebook(path: str) -> bool:
    return path.lower().endswith(NOTEBOOK_SUFFIX)


@dataclass(frozen=True)
class CodeCell:
    number: int  # 1-based among all cells
    first_row: int  # row of its first line in the notebook's Python text
    source: str  # the cell's source as stored
    lines: tuple[str, ...]  # its lines as Python sees them (masked), without line breaks
    masked: dict[int, str]  # 0-based line index -> the original line, for masked lines
    line_starts: tuple[int, ...]  # offset in ``source`` where each line starts
    newline: str  # the cell's own line break


@dataclass(frozen=True)
class _SourceValue:
    """Where a cell's ``source`` value is in the JSON text."""

    start: int
    end: int
    literals: tuple[tuple[int, int], ...]  # (offset of the opening quote, decoded offset it starts at)
    is_list: bool


@dataclass
class Notebook:
    raw: str  # the JSON text
    text: str  # the Python text: code cells, masked, each followed by a CELL_BOUNDARY line
    cells: tuple[CodeCell, ...]
    skip_reason: str | None = None  # set for a notebook that is not Python (an R kernel, say)
    _values: dict[int, _SourceValue] = field(default_factory=dict, repr=False)
    _raw_line_starts: list[int] | None = field(default=None, repr=False)

    # ------------------------------------------------------------ positions

    def _cell_index(self, row: int) -> int:
        firsts = [c.first_row for c in self.cells]
        return max(bisect.bisect_right(firsts, row) - 1, 0)

    def to_cell(self, row: int, column: int) -> tuple[int, int, int]:
        """A place in the Python text -> (cell number, row in the cell, column).

        A row on a boundary line (an error at the end of a cell) is the cell's
        last row."""
        if not self.cells:
            return 1, max(row, 1), max(column, 1)
        cell = self.cells[self._cell_index(row)]
        in_cell = row - cell.first_row + 1
        if in_cell > len(cell.lines):
            last = max(len(cell.lines), 1)
            return cell.number, last, (len(cell.lines[last - 1]) + 1 if cell.lines else 1)
        return cell.number, max(in_cell, 1), max(column, 1)

    def describe_rows(self, message: str) -> str:
        """Rows named in a message ("at line 58", "lines 12, 40"), which count
        in the Python text, as cells and rows in them."""
        if "line" not in message:
            return message

        def one(row: int) -> tuple[int, int] | None:
            if not self.cells or not 1 <= row <= self.cells[-1].first_row + len(self.cells[-1].lines):
                return None
            cell, in_cell, _col = self.to_cell(row, 1)
            return cell, in_cell

        def single(match: re.Match) -> str:
            found = one(int(match.group(1)))
            return match.group(0) if found is None else f"cell {found[0]}, line {found[1]}"

        def several(match: re.Match) -> str:
            rows = [int(n) for n in re.findall(r"\d+", match.group(1))]
            found = [one(row) for row in rows]
            if any(f is None for f in found):
                return match.group(0)
            return "lines " + ", ".join(f"{r} of cell {c}" for c, r in found)  # type: ignore[misc]

        message = re.sub(r"\blines (\d+(?:(?:, | and )\d+)+)\b", several, message)
        return re.sub(r"\bline (\d+)\b", single, message)

    def cell(self, number: int) -> CodeCell | None:
        for cell in self.cells:
            if cell.number == number:
                return cell
        return None

    def to_text(self, number: int, row: int, column: int) -> tuple[int, int] | None:
        """(cell, row, column) -> (row, column) in the Python text."""
        cell = self.cell(number)
        if cell is None:
            return None
        return cell.first_row + row - 1, column

    def cell_text(self, number: int) -> str | None:
        """The cell's source as the user wrote it (magics included)."""
        cell = self.cell(number)
        return None if cell is None else cell.source

    def file_location(self, number: int, row: int, column: int) -> tuple[int, int] | None:
        """(cell, row, column) -> (line, column) in the .ipynb file itself, 1-based
        (what SARIF regions and GitHub annotations address); None when unknown."""
        cell = self.cell(number)
        value = self._values.get(number)
        if cell is None or value is None or not value.literals or not 1 <= row <= len(cell.line_starts):
            return None
        offset = cell.line_starts[row - 1] + column - 1
        starts = [decoded for _quote, decoded in value.literals]
        index = max(bisect.bisect_right(starts, offset) - 1, 0)
        quote, decoded_start = value.literals[index]
        raw_offset = _raw_offset(self.raw, quote + 1, offset - decoded_start)
        if self._raw_line_starts is None:
            self._raw_line_starts = [0] + [m.end() for m in re.finditer(r"\n", self.raw)]
        line = bisect.bisect_right(self._raw_line_starts, raw_offset)
        return line, raw_offset - self._raw_line_starts[line - 1] + 1

    # ------------------------------------------------------------ writing back

    def split(self, text: str) -> dict[int, str]:
        """A new Python text (the fixed notebook) -> the new source of each
        code cell, magics restored.  Raises ValueError when the text no longer
        has one part per cell or a fix changed a masked line."""
        parts: list[list[str]] = [[]]
        for line in text.split("\n"):
            if line == CELL_BOUNDARY:
                parts.append([])
            else:
                parts[-1].append(line)
        if parts[-1] != [""] and parts[-1] != []:
            raise ValueError("text after the last cell")
        parts.pop()
        if len(parts) != len(self.cells):
            raise ValueError(f"{len(parts)} cells instead of {len(self.cells)}")
        out: dict[int, str] = {}
        for cell, lines in zip(self.cells, parts):
            restored = _restore(cell, lines)
            if restored is None:
                raise ValueError(f"cell {cell.number}: a fix changed an IPython magic line")
            new_source = cell.newline.join(restored)
            if lines and _ends_with_newline(cell.source):
                new_source += cell.newline
            if new_source != cell.source:
                out[cell.number] = new_source
        return out

    def with_sources(self, sources: dict[int, str]) -> str:
        """The JSON text with these cells' sources replaced, everything else
        (indentation, key order, outputs, metadata, final newline) unchanged."""
        missing = [n for n in sources if n not in self._values]
        if missing:
            raise ValueError(f"cell {missing[0]}: its source was not found in the JSON text")
        pieces, pos = [], 0
        for number in sorted(sources, key=lambda n: self._values[n].start):
            value = self._values[number]
            pieces.append(self.raw[pos:value.start])
            pieces.append(self._render_source(value, sources[number]))
            pos = value.end
        pieces.append(self.raw[pos:])
        return "".join(pieces)

    def _render_source(self, value: _SourceValue, source: str) -> str:
        ascii_only = self.raw.isascii() and "\\u" in self.raw
        if not value.is_list:
            return json.dumps(source, ensure_ascii=ascii_only)
        items = [json.dumps(line, ensure_ascii=ascii_only) for line in _keepends(source)]
        if not items:
            return "[]"
        # the indentation the file uses inside this list, and before its `]`
        original = self.raw[value.start:value.end]
        match = re.match(r"\[([ \t]*\r?\n)([ \t]*)", original)
        if match is None:  # a list on one line
            return "[" + ", ".join(items) + "]"
        newline = "\r\n" if match.group(1).endswith("\r\n") else "\n"
        inner = match.group(2)
        closing = re.search(r"\n([ \t]*)\]$", original)
        outer = closing.group(1) if closing else inner[:-1] if inner else ""
        return "[" + newline + ("," + newline).join(inner + item for item in items) + newline + outer + "]"


def _ends_with_newline(text: str) -> bool:
    return text.endswith(("\n", "\r"))


def _keepends(source: str) -> list[str]:
    """nbformat's split of a source into list items: one per line, breaks kept."""
    out, pos = [], 0
    for match in LINE_BREAK.finditer(source):
        out.append(source[pos:match.end()])
        pos = match.end()
    if pos < len(source):
        out.append(source[pos:])
    return out


def _restore(cell: CodeCell, lines: list[str]) -> list[str] | None:
    seen: set[int] = set()
    out = []
    for line in lines:
        match = _MAGIC_MARK_RE.search(line)
        if match is not None and int(match.group(1)) in cell.masked:
            index = int(match.group(1))
            if index in seen or line != cell.lines[index]:
                return None
            seen.add(index)
            out.append(cell.masked[index])
        else:
            out.append(line)
    if seen != set(cell.masked):
        return None
    return out


def _raw_offset(raw: str, start: int, chars: int) -> int:
    """The offset in ``raw`` of the ``chars``-th decoded character of the JSON
    string whose content starts at ``start``."""
    pos = start
    for _ in range(max(chars, 0)):
        if raw[pos] != "\\":
            pos += 1
        elif raw[pos + 1] != "u":
            pos += 2
        elif 0xD800 <= int(raw[pos + 2:pos + 6], 16) < 0xDC00 and raw.startswith("\\u", pos + 6):
            pos += 12  # a surrogate pair is one character in Python
        else:
            pos += 6
    return pos


# ---------------------------------------------------------------- reading


def read_notebook(raw: str) -> Notebook:
    """Parse a notebook's JSON text; raises SourceError (kind ``decode``) when it
    is not valid JSON or not an nbformat 4 notebook."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise SourceError("decode", f"not a valid notebook: invalid JSON ({exc.msg})", exc.lineno,
                          exc.colno) from None
    except RecursionError:
        raise SourceError("decode", "not a valid notebook: the JSON nests too deeply") from None
    if not isinstance(data, dict):
        raise SourceError("decode", "not a Jupyter notebook: the JSON is not an object with a `cells` list")
    cells = data.get("cells")
    if not isinstance(cells, list):
        if "worksheets" in data:
            raise SourceError("decode", "an nbformat 3 notebook, which hooklint does not read; convert it with "
                              "`jupyter nbconvert --to notebook --nbformat 4`")
        raise SourceError("decode", "not a Jupyter notebook: no `cells` list")
    values = _locate_sources(raw)
    code: list[tuple[int, str]] = []
    for index, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            raise SourceError("decode", f"not a valid notebook: cell {index} is not an object")
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            source = "".join(source)
        elif not isinstance(source, str):
            raise SourceError("decode", f"not a valid notebook: the `source` of cell {index} is not text")
        if cell.get("cell_type") == "code":
            code.append((index, source))
    skip = _not_python(data.get("metadata"))
    notebook = _build(raw, code, values)
    notebook.skip_reason = skip
    return notebook


def importable_text(notebook: Notebook) -> str:
    """The notebook's Python text with each code cell that does not parse on its
    own blanked (its rows kept): the definitions of the other cells, at their
    rows, for the graph layer to import (the static pass reports the broken cell)."""
    lines = notebook.text.split("\n")
    for cell in notebook.cells:
        body = "\n".join(cell.lines) + "\n"
        try:
            ast.parse(body)
        except (SyntaxError, ValueError):
            first = cell.first_row - 1
            for i in range(first, first + len(cell.lines)):
                lines[i] = ""
    return "\n".join(lines)


def analysis_text(path: str) -> str:
    """The Python text hooklint analyses for ``path``: for a notebook, its code
    cells joined (IPython syntax masked, broken cells blanked), whose rows map
    back to cells (:meth:`Notebook.to_cell`); otherwise the file's text.  Raises
    SourceError."""
    from hooklint.static.source import read_regular_file, read_source

    if not is_notebook(path):
        return read_source(path)
    try:
        raw = read_regular_file(path)[0].decode("utf-8-sig")
    except UnicodeDecodeError:
        raise SourceError("decode", "not a valid notebook: not utf-8 text") from None
    notebook = read_notebook(raw)
    if notebook.skip_reason:
        raise SourceError("decode", notebook.skip_reason)
    return importable_text(notebook)


def _not_python(metadata) -> str | None:
    if not isinstance(metadata, dict):
        return None
    for key, sub in (("kernelspec", "language"), ("language_info", "name")):
        table = metadata.get(key)
        language = table.get(sub) if isinstance(table, dict) else None
        if isinstance(language, str) and language and language.lower() not in ("python", "python3", "ipython"):
            return f"a {language} notebook, not Python: not checked"
    return None


def _build(raw: str, code: list[tuple[int, str]], values: dict[int, _SourceValue]) -> Notebook:
    out_lines: list[str] = []
    cells = []
    for position, (number, source) in enumerate(code):
        lines, starts, newline = _split_source(source)
        masked_lines, masked = mask_ipython(lines, first_code_cell=position == 0)
        cells.append(CodeCell(number, len(out_lines) + 1, source, tuple(masked_lines), masked, tuple(starts),
                              newline))
        out_lines.extend(masked_lines)
        out_lines.append(CELL_BOUNDARY)
    text = "".join(line + "\n" for line in out_lines)
    return Notebook(raw, text, tuple(cells), _values=values)


def _split_source(source: str) -> tuple[list[str], list[int], str]:
    lines, starts, pos = [], [], 0
    newline = "\n"
    for i, match in enumerate(LINE_BREAK.finditer(source)):
        if i == 0:
            newline = match.group()
        lines.append(source[pos:match.start()])
        starts.append(pos)
        pos = match.end()
    if pos < len(source):
        lines.append(source[pos:])
        starts.append(pos)
    return lines, starts, newline


# ---------------------------------------------------------------- IPython syntax


def mask_ipython(lines: list[str], first_code_cell: bool = True) -> tuple[list[str], dict[int, str]]:
    """The lines with IPython-only syntax masked (same count, same indentation),
    and the original of each masked line."""
    out = list(lines)
    masked: dict[int, str] = {}

    def mask(i: int, replacement: str) -> None:
        masked[i] = lines[i]
        out[i] = f"{replacement}  {MAGIC_MARK}{i}"

    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        name = lines[first].lstrip()[2:].split(None, 1)[0] if lines[first].strip() != "%%" else ""
        if name not in PYTHON_CELL_MAGICS:
            for i in range(len(lines)):
                if lines[i].strip():
                    mask(i, "#")
            return out, masked
        mask(first, "pass")
    scanner = _Scanner()
    continued = False
    for i, line in enumerate(lines):
        if i in masked:
            continue
        at_start = scanner.at_statement_start()
        if continued:  # the rest of a magic that a backslash continues: a comment, at any indentation
            mask(i, _indent(line) + "#")
            continued = line.rstrip().endswith("\\")
            continue
        stripped = line.strip()
        if at_start and stripped and not stripped.startswith("#"):
            assign = _ASSIGN_MAGIC.match(line)
            if stripped[0] in "%!?" or (stripped.endswith("?") and "#" not in stripped):
                mask(i, _indent(line) + "pass")
                continued = line.rstrip().endswith("\\")
                continue
            if assign is not None:
                mask(i, f"{assign.group(1)}{assign.group(2)} = None")
                continued = line.rstrip().endswith("\\")
                continue
            if not first_code_cell and _FUTURE.match(line):
                # `from __future__` is fine at the top of any cell, but not in the middle of the joined text
                mask(i, _indent(line) + "pass")
                continue
        scanner.feed(line)
    return out, masked


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


class _Scanner:
    """Tracks, line by line, whether the next line starts a statement (not
    inside brackets, a string or a backslash continuation)."""

    def __init__(self):
        self.depth = 0
        self.string: str | None = None  # the open triple quote
        self.continued = False

    def at_statement_start(self) -> bool:
        return self.depth == 0 and self.string is None and not self.continued

    def feed(self, line: str) -> None:
        i, n = 0, len(line)
        self.continued = False
        while i < n:
            if self.string is not None:
                end = _find_close(line, i, self.string)
                if end < 0:
                    return
                i = end
                self.string = None
                continue
            c = line[i]
            if c == "#":
                return
            if c in "([{":
                self.depth += 1
            elif c in ")]}":
                self.depth = max(self.depth - 1, 0)
            elif c in "'\"":
                quote = line[i:i + 3] if line[i:i + 3] in ('"""', "'''") else c
                end = _find_close(line, i + len(quote), quote)
                if end < 0:
                    if len(quote) == 3:
                        self.string = quote
                    return  # an unclosed one-line string: a syntax error, reported as such
                i = end
                continue
            elif c == "\\" and i == n - 1:
                self.continued = True
            i += 1


def _find_close(line: str, i: int, quote: str) -> int:
    """The offset just after the closing ``quote`` from ``i``, or -1."""
    n = len(line)
    while i < n:
        if line[i] == "\\":
            i += 2
            continue
        if line.startswith(quote, i):
            return i + len(quote)
        i += 1
    return -1


# ---------------------------------------------------------------- where the sources are in the JSON


def _locate_sources(raw: str) -> dict[int, _SourceValue]:
    """Cell number -> where its ``source`` value is in the JSON text.  The text
    is valid JSON (json.loads accepted it); other values are skipped by the C
    decoder, so a notebook with megabytes of outputs is scanned quickly."""
    decoder = json.JSONDecoder()
    out: dict[int, _SourceValue] = {}
    i = _WS.match(raw, 0).end()
    if raw[i:i + 1] != "{":
        return out
    i += 1
    while True:
        i = _WS.match(raw, i).end()
        if raw[i] == "}":
            return out
        key, i = scanstring(raw, i + 1)
        i = _WS.match(raw, i).end() + 1  # the colon
        i = _WS.match(raw, i).end()
        if key == "cells" and raw[i] == "[":
            out, i = _locate_in_cells(raw, i, decoder)
        else:
            i = decoder.raw_decode(raw, i)[1]
        i = _WS.match(raw, i).end()
        if raw[i] == ",":
            i += 1


def _locate_in_cells(raw: str, i: int, decoder: json.JSONDecoder) -> tuple[dict[int, _SourceValue], int]:
    out: dict[int, _SourceValue] = {}
    i += 1  # [
    number = 0
    while True:
        i = _WS.match(raw, i).end()
        if raw[i] == "]":
            return out, i + 1
        number += 1
        if raw[i] != "{":
            i = decoder.raw_decode(raw, i)[1]
        else:
            i += 1
            while True:
                i = _WS.match(raw, i).end()
                if raw[i] == "}":
                    i += 1
                    break
                key, i = scanstring(raw, i + 1)
                i = _WS.match(raw, i).end() + 1
                i = _WS.match(raw, i).end()
                if key == "source":
                    value, i = _locate_source(raw, i, decoder)
                    if value is not None:
                        out[number] = value
                else:
                    i = decoder.raw_decode(raw, i)[1]
                i = _WS.match(raw, i).end()
                if raw[i] == ",":
                    i += 1
        i = _WS.match(raw, i).end()
        if raw[i] == ",":
            i += 1


def _locate_source(raw: str, i: int, decoder: json.JSONDecoder) -> tuple[_SourceValue | None, int]:
    start = i
    if raw[i] == '"':
        _text, end = scanstring(raw, i + 1)
        return _SourceValue(start, end, ((i, 0),), False), end
    if raw[i] != "[":
        return None, decoder.raw_decode(raw, i)[1]
    literals = []
    decoded = 0
    i += 1
    while True:
        i = _WS.match(raw, i).end()
        if raw[i] == "]":
            return _SourceValue(start, i + 1, tuple(literals), True), i + 1
        if raw[i] != '"':
            return None, _skip_rest_of_list(raw, i, decoder)
        text, end = scanstring(raw, i + 1)
        literals.append((i, decoded))
        decoded += len(text)
        i = _WS.match(raw, end).end()
        if raw[i] == ",":
            i += 1


def _skip_rest_of_list(raw: str, i: int, decoder: json.JSONDecoder) -> int:
    while True:
        i = _WS.match(raw, i).end()
        if raw[i] == "]":
            return i + 1
        i = decoder.raw_decode(raw, i)[1]
        i = _WS.match(raw, i).end()
        if raw[i] == ",":
            i += 1
