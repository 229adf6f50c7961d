"""Fixes on files: read a file as Python does, fix its text, write it back
atomically in the same encoding (byte-order mark and line endings kept), and
render unified diffs.

A Jupyter notebook is fixed through its Python text (its code cells joined,
see :mod:`hooklint.static.notebook`): the fixes apply there as in any file,
then the changed cells are written back into the notebook's JSON, which keeps
everything else byte for byte.  A fix whose edits leave its cell is not
applied; the rebuilt notebook is read again and must give the fixed text
before it is written."""

from __future__ import annotations

import bisect
import difflib
import io
import os
import re
import tokenize
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Collection, Iterable

from hooklint.findings import Applicability, Edit, Finding, Location
from hooklint.fix.apply import LINE_BREAK, FixOutcome, Recheck, applicable, fix_text
from hooklint.fsutil import atomic_write_text
from hooklint.static.notebook import CELL_BOUNDARY, Notebook, is_notebook, read_notebook
from hooklint.static.source import SourceError, decode_source


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise SourceError("io", f"cannot read file: {exc.strerror or exc}") from None


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str
    encoding: str  # as Python detects it; "utf-8-sig" when the file starts with a BOM

    @classmethod
    def read(cls, path: str) -> "SourceFile":
        return cls.from_bytes(path, _read_bytes(path))

    @classmethod
    def from_bytes(cls, path: str, data: bytes) -> "SourceFile":
        text = decode_source(data)  # raises SourceError with the checker's own wording
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return cls(path, text, encoding)

    def write(self, text: str) -> None:
        """Replace the file's content; through a symlink, the file it points to
        is rewritten and the link stays."""
        target = Path(os.path.realpath(self.path))
        atomic_write_text(target, text, encoding=self.encoding, newline="")

    # the same interface as NotebookFile: a plain file's text is its Python text

    def in_text(self, findings: list[Finding]) -> list[Finding]:
        return findings

    def recheck(self, recheck: Recheck) -> Recheck:
        return recheck

    def render(self, text: str) -> str:
        return text

    def diff(self, display: str, before: str, after: str) -> str:
        return unified_diff(display, before, after)


_MARK_NUMBER = re.compile(r"(  # hooklint: ipython )\d+$", re.M)


@dataclass(frozen=True)
class NotebookFile:
    """A notebook being fixed: its Python text, and the way back to JSON."""

    path: str
    notebook: Notebook
    encoding: str  # "utf-8", or "utf-8-sig" when the file starts with a byte-order mark

    @classmethod
    def read(cls, path: str) -> "NotebookFile":
        return cls.from_bytes(path, _read_bytes(path))

    @classmethod
    def from_bytes(cls, path: str, data: bytes) -> "NotebookFile":
        encoding = "utf-8-sig" if data.startswith(b"\xef\xbb\xbf") else "utf-8"
        try:
            raw = data.decode(encoding)
        except UnicodeDecodeError as exc:
            raise SourceError("decode", f"not a valid notebook: not utf-8 text (byte {data[exc.start]:#04x})") \
                from None
        return cls(path, read_notebook(raw), encoding)

    @property
    def text(self) -> str:
        return self.notebook.text

    def in_text(self, findings: list[Finding]) -> list[Finding]:
        """Findings placed in cells -> findings on the Python text (their fixes
        included); findings without a cell have nothing to fix here."""
        out = []
        for f in findings:
            if f.cell is None:
                continue
            moved = self._move(f.cell, f.location)
            end = self._move(f.cell, f.end_location)
            if moved is None or end is None:
                continue
            fix = f.fix
            if fix is not None and fix.edits:
                edits = []
                for edit in fix.edits:
                    a, b = self._move(f.cell, edit.location), self._move(f.cell, edit.end_location)
                    if a is None or b is None:
                        fix = None
                        break
                    edits.append(Edit(edit.content, a, b))
                if fix is not None:
                    fix = replace(fix, edits=tuple(edits))
            out.append(replace(f, cell=None, location=moved, end_location=end, fix=fix))
        return out

    def _move(self, cell: int, location: Location) -> Location | None:
        found = self.notebook.to_text(cell, location.row, location.column)
        return None if found is None else Location(*found)

    def recheck(self, recheck: Recheck) -> Recheck:
        """The findings of a new Python text, without the fixes that reach
        outside their cell (a cell boundary line, or another cell)."""

        def within_cells(text: str) -> list[Finding]:
            boundaries = [i for i, line in enumerate(LINE_BREAK.split(text), start=1) if line == CELL_BOUNDARY]
            return [f if _fix_in_one_cell(f, boundaries) else replace(f, fix=None) for f in recheck(text)]

        return within_cells

    def render(self, text: str) -> str:
        """The notebook's JSON with the fixed cells; raises ValueError when the
        fixed text cannot be put back into the notebook exactly."""
        sources = self.notebook.split(text)
        raw = self.notebook.with_sources(sources)
        again = read_notebook(raw).text
        if _MARK_NUMBER.sub(r"\1", again) != _MARK_NUMBER.sub(r"\1", text):
            raise ValueError("the rebuilt notebook does not read back as the fixed code")
        return raw

    def write(self, text: str) -> None:
        target = Path(os.path.realpath(self.path))
        atomic_write_text(target, self.render(text), encoding=self.encoding, newline="")

    def diff(self, display: str, before: str, after: str) -> str:
        """One unified diff per changed cell (``--- nb.ipynb:cell 3``)."""
        old = self.notebook.split(before)
        new = self.notebook.split(after)
        out = []
        for cell in self.notebook.cells:
            a = old.get(cell.number, cell.source)
            b = new.get(cell.number, cell.source)
            if a != b:
                if not a.endswith(("\n", "\r")) and not b.endswith(("\n", "\r")):
                    # a cell's last line has no line break in nbformat, and a cell is not a file:
                    # no "No newline at end of file" marker for what is the norm
                    a, b = a + "\n", b + "\n"
                out.append(unified_diff(f"{display}:cell {cell.number}", a, b))
        return "".join(out)


def _fix_in_one_cell(f: Finding, boundaries: list[int]) -> bool:
    if f.fix is None or not f.fix.edits:
        return True
    cells = set()
    for edit in f.fix.edits:
        start, end = edit.location, edit.end_location
        # the edit changes a boundary line when it overlaps [(b, 1), (b + 1, 1))
        for b in boundaries:
            if (start.row, start.column) < (b + 1, 1) and (end.row, end.column) > (b, 1):
                return False
        cells.add(bisect.bisect_left(boundaries, start.row))
    return len(cells) == 1


def open_for_fixing(path: str, data: bytes | None = None) -> SourceFile | NotebookFile:
    """The file (``data``: its bytes, already read) as fixes see it; raises SourceError."""
    kind = NotebookFile if is_notebook(path) else SourceFile
    return kind.read(path) if data is None else kind.from_bytes(path, data)


@dataclass
class FileFix:
    path: str  # as findings name it
    outcome: FixOutcome
    error: str | None = None  # why the fixed text could not be written
    source: SourceFile | NotebookFile | None = None

    @property
    def changed(self) -> bool:
        return self.outcome.changed and self.error is None

    def diff(self) -> str:
        """The unified diff of the fixes (per cell in a notebook)."""
        if not self.changed:
            return ""
        if self.source is None:
            return unified_diff(self.path, self.outcome.original, self.outcome.text)
        return self.source.diff(self.path, self.outcome.original, self.outcome.text)


def fix_files(
    findings: Iterable[Finding],
    *,
    allowed: Collection[Applicability],
    locate: Callable[[str], str],
    recheck_for: Callable[[str], Recheck],
    write: bool,
) -> list[FileFix]:
    """Fix every file that has an applicable fix, in path order.

    ``locate`` maps a finding's path to the file to open; ``recheck_for(path)``
    gives the function that checks a new text of that file.  Files without an
    applicable fix are not opened, let alone written.
    """
    by_path: dict[str, list[Finding]] = defaultdict(list)
    for finding in findings:
        by_path[finding.path].append(finding)
    results = []
    for path in sorted(by_path):
        own = by_path[path]
        if not any(applicable(f, allowed) for f in own):
            continue
        real = locate(path)
        try:
            source = open_for_fixing(real)
        except SourceError as err:
            empty = FixOutcome("", "")
            results.append(FileFix(path, empty, f"cannot read it for fixing: {err.message}"))
            continue
        results.append(fix_source(path, source, own, allowed=allowed, recheck=recheck_for(real), write=write))
    return results


def fix_source(path: str, source: SourceFile | NotebookFile, findings: list[Finding], *,
               allowed: Collection[Applicability], recheck: Recheck, write: bool) -> FileFix:
    """Fix one opened file (``findings`` are those reported for it); write it when asked."""
    outcome = fix_text(source.text, source.in_text(findings), allowed=allowed, recheck=source.recheck(recheck))
    result = FileFix(path, outcome, source=source)
    if not outcome.changed:
        return result
    try:
        rendered = source.render(outcome.text)
        rendered.encode(source.encoding)
    except UnicodeEncodeError as exc:
        result.error = f"the fixed text cannot be written as {source.encoding} ({exc.reason})"
        return result
    except ValueError as exc:
        result.error = f"the fixes cannot be written back into the notebook ({exc}); nothing was changed"
        return result
    if write:
        try:
            source.write(outcome.text)
        except OSError as exc:
            result.error = f"cannot write the fixes: {exc.strerror or exc}"
    return result


def split_lines(text: str) -> list[str]:
    """Lines with their own line breaks, split only where Python splits them."""
    lines, pos = [], 0
    for match in LINE_BREAK.finditer(text):
        lines.append(text[pos:match.end()])
        pos = match.end()
    if pos < len(text):
        lines.append(text[pos:])
    return lines


def unified_diff(path: str, before: str, after: str) -> str:
    out = []
    for line in difflib.unified_diff(split_lines(before), split_lines(after), fromfile=path, tofile=path):
        if not line.endswith(("\n", "\r")):
            line += "\n\\ No newline at end of file\n"  # as diff and git print it
        out.append(line)
    return "".join(out)
