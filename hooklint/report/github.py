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
from hooklint.report.paths import repo_relative, repository_root

_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(f: Finding, root: Path) -> str:
    props = [
        ("title", f"{f.code} {f.name}"),
        ("file", repo_relative(f.path, root) or f.path.replace("\\", "/")),
        ("line", str(f.location.row)),
        ("col", str(f.location.column)),
        ("endLine", str(max(f.end_location.row, f.location.row))),
    ]
    if f.end_location.row == f.location.row and f.end_location.column > f.location.column:
        props.append(("endColumn", str(f.end_location.column)))
    body = [f.message]
    if f.help:
        body.append(f.help)
    if f.fix is not None:
        body.append(f"Fix ({f.fix.applicability.value}): {f.fix.message}")
    if f.url:
        body.append(f"Docs: {f.url}")
    head = ",".join(f"{key}={escape_property(value)}" for key, value in props)
    return f"::{_COMMANDS[f.severity]} {head}::{escape_data(chr(10).join(body))}\n"


def render_github(report: Report, root: Path | None = None) -> str:
    """``root``: the repository root (default: the nearest folder with ``.git``)."""
    root = root.resolve() if root else repository_root()
    return "".join(annotation(f, root) for f in report.sorted_findings())
