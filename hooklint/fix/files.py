"""Fixes on files: read a file as Python does, fix its text, write it back
atomically in the same encoding (byte-order mark and line endings kept), and
render unified diffs."""

from __future__ import annotations

import difflib
import io
import os
import tokenize
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Iterable

from hooklint.findings import Applicability, Finding
from hooklint.fix.apply import LINE_BREAK, FixOutcome, Recheck, applicable, fix_text
from hooklint.fsutil import atomic_write_text
from hooklint.static.source import SourceError, decode_source


@dataclass(frozen=True)
class SourceFile:
    path: str
    text: str
    encoding: str  # as Python detects it; "utf-8-sig" when the file starts with a BOM

    @classmethod
    def read(cls, path: str) -> "SourceFile":
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as exc:
            raise SourceError("io", f"cannot read file: {exc.strerror or exc}") from None
        text = decode_source(data)  # raises SourceError with the checker's own wording
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return cls(path, text, encoding)

    def write(self, text: str) -> None:
        """Replace the file's content; through a symlink, the file it points to
        is rewritten and the link stays."""
        target = Path(os.path.realpath(self.path))
        atomic_write_text(target, text, encoding=self.encoding, newline="")


@dataclass
class FileFix:
    path: str  # as findings name it
    outcome: FixOutcome
    error: str | None = None  # why the fixed text could not be written

    @property
    def changed(self) -> bool:
        return self.outcome.changed and self.error is None


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
            source = SourceFile.read(real)
        except SourceError as err:
            empty = FixOutcome("", "")
            results.append(FileFix(path, empty, f"cannot read it for fixing: {err.message}"))
            continue
        outcome = fix_text(source.text, own, allowed=allowed, recheck=recheck_for(real))
        result = FileFix(path, outcome)
        if outcome.changed:
            try:
                outcome.text.encode(source.encoding)
            except UnicodeEncodeError as exc:
                result.error = f"the fixed text cannot be written as {source.encoding} ({exc.reason})"
            else:
                if write:
                    try:
                        source.write(outcome.text)
                    except OSError as exc:
                        result.error = f"cannot write the fixes: {exc.strerror or exc}"
        results.append(result)
    return results


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
