"""GitHub Actions workflow commands: one annotation per finding, shown on the
pull request's diff and in the run summary.

``::error title=HKL102 legacy-hook-grad-input,file=a.py,line=7,col=7,endLine=7,endColumn=29::message``

The message is escaped as the Actions toolkit does (``%`` -> ``%25``, CR ->
``%0D``, LF -> ``%0A``); property values additionally escape ``:`` and ``,``
(``%3A``, ``%2C``), which would otherwise end the value.  ``file`` is
relative to the repository root, where GitHub looks for it.
"""

from __future__ import annotations

from pathlib import Path

from hooklint.findings import Finding, Report, Severity
from hooklint.report import SourceLoader, file_location
from hooklint.report.escape import printable
from hooklint.report.paths import repo_relative, repository_root

_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(f: Finding, root: Path, sources: SourceLoader | None = None) -> str:
    """In a notebook the annotation is placed on the line of the .ipynb file
    (what the pull request's diff shows) and its title names the cell."""
    start = file_location(sources, f.path, f.cell, f.location)
    end = file_location(sources, f.path, f.cell, f.end_location) if start is not None else None
    title = f"{f.code} {f.name}" if f.cell is None else \
        f"{f.code} {f.name} (cell {f.cell}, line {f.location.row}, column {f.location.column})"
    props = [("title", title), ("file", repo_relative(f.path, root) or f.path.replace("\\", "/"))]
    if start is not None:
        end = end if end is not None and (end.row, end.column) >= (start.row, start.column) else start
        props += [("line", str(start.row)), ("col", str(start.column)), ("endLine", str(end.row))]
        if end.row == start.row and end.column > start.column:
            props.append(("endColumn", str(end.column)))
    body = [f.message if f.cell is None else f"cell {f.cell}:{f.location.row}:{f.location.column}: {f.message}"]
    if f.help:
        body.append(f.help)
    if f.fix is not None:
        body.append(f"Fix ({f.fix.applicability.value}): {f.fix.message}")
    if f.url:
        body.append(f"Docs: {f.url}")
    head = ",".join(f"{key}={escape_property(printable(value))}" for key, value in props)
    return f"::{_COMMANDS[f.severity]} {head}::{escape_data(chr(10).join(printable(part, keep_newlines=True) for part in body))}\n"


def render_github(report: Report, root: Path | None = None, sources: SourceLoader | None = None) -> str:
    """``root``: the repository root (default: the nearest folder with ``.git``)."""
    root = root.resolve() if root else repository_root()
    return "".join(annotation(f, root, sources) for f in report.sorted_findings())
