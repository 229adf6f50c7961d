"""Rendering findings.  Formatters see :class:`~hooklint.findings.Report` values
and plain rule metadata (:class:`RuleInfo`), never rule classes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hooklint.findings import Location, Report


@dataclass(frozen=True)
class RuleInfo:
    """What a formatter may know about a rule: data, not behaviour."""

    code: str
    name: str
    summary: str
    severity: str
    url: str
    docs: str  # the full markdown documentation
    sections: tuple[tuple[str, str], ...] = ()  # (heading, markdown), in order


# ``sources(path)``: a file's text for code frames.  A loader may also offer
# ``cell_text(path, cell)`` (a notebook cell's source) and ``file_location(path,
# cell, location)`` (where a cell position is in the .ipynb file's own text):
# see :class:`hooklint.report.sources.FileSources`.
SourceLoader = Callable[[str], "str | None"]


def frame_text(sources: SourceLoader | None, path: str, cell: int | None = None) -> str | None:
    """The text a finding's rows index into: the file's, or its notebook cell's."""
    if sources is None:
        return None
    if cell is None:
        return sources(path)
    cell_text = getattr(sources, "cell_text", None)
    return cell_text(path, cell) if cell_text is not None else None


def file_location(sources: SourceLoader | None, path: str, cell: int | None, location: Location) -> Location | None:
    """A place as the file's own text has it: the location itself outside
    notebooks; in a notebook, the line and column in its JSON (None when the
    loader cannot tell)."""
    if cell is None:
        return location
    find = getattr(sources, "file_location", None) if sources is not None else None
    return find(path, cell, location) if find is not None else None


def rule_catalog() -> dict[str, RuleInfo]:
    """Built by the CLI from the rule classes and handed to formatters."""
    from hooklint.docs import render_rule_markdown
    from hooklint.rules import all_rules

    return {
        r.code: RuleInfo(r.code, r.name, r.summary, r.severity.value, r.url(), render_rule_markdown(r),
                         tuple(r.doc_sections().items()))
        for r in all_rules()
    }


def render(report: Report, fmt: str, *, sources: SourceLoader, catalog: dict[str, RuleInfo],
           color: bool = False, show_fixes: bool = True) -> str:
    if fmt == "full":
        from hooklint.report.text import render_full

        return render_full(report, sources, color=color)
    if fmt == "concise":
        from hooklint.report.text import render_concise

        return render_concise(report, color=color)
    if fmt == "json":
        from hooklint.report.jsonfmt import render_json

        return render_json(report)
    if fmt == "json-lines":
        from hooklint.report.jsonfmt import render_json_lines

        return render_json_lines(report)
    if fmt == "sarif":
        from hooklint.report.sarif import render_sarif

        return render_sarif(report, catalog, sources=sources)
    if fmt == "github":
        from hooklint.report.github import render_github

        return render_github(report, sources=sources)
    if fmt == "junit":
        from hooklint.report.junit import render_junit

        return render_junit(report, sources=sources)
    raise ValueError(f"unknown output format {fmt!r}")
