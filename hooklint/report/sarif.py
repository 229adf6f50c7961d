"""SARIF 2.1.0, as GitHub code scanning and other SARIF viewers read it.

One run; ``tool.driver.rules`` lists every rule from the catalog (their full
documentation as ``help``), each result points at its rule by ``ruleId`` and
``ruleIndex``.  Paths are relative to the repository root (the nearest folder
holding ``.git``, else the working folder) with ``uriBaseId`` ``%SRCROOT%``;
columns count Unicode code points (``columnKind``), as hooklint's do.
``tests/integrations/test_formats.py`` validates the output against the
published schema.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import quote

from hooklint import __version__
from hooklint.findings import Finding, Location, Notice, NoticeLevel, Report, Severity
from hooklint.report import RuleInfo, SourceLoader, file_location
from hooklint.report.paths import repo_relative, repository_root

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/os/schemas/sarif-schema-2.1.0.json"
INFORMATION_URI = "https://github.com/hooklint/hooklint"
SRCROOT = "%SRCROOT%"

_LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_NOTICE_LEVELS = {NoticeLevel.ERROR: "error", NoticeLevel.SKIP: "warning", NoticeLevel.WARNING: "warning",
                  NoticeLevel.INFO: "note"}


class _Paths:
    def __init__(self, root: Path):
        self.root = root

    def artifact(self, path: str) -> dict:
        rel = repo_relative(path, self.root)
        if rel is None:  # outside the repository: an absolute URI, no base
            try:
                return {"uri": Path(path).resolve().as_uri()}
            except (OSError, RuntimeError):  # a symlink loop: where the link itself is
                return {"uri": Path(os.path.abspath(path)).as_uri()}
        return {"uri": quote(rel, safe="/"), "uriBaseId": SRCROOT}


def _region(start: Location, end: Location) -> dict:
    if (end.row, end.column) < (start.row, start.column):
        end = start
    return {"startLine": start.row, "startColumn": start.column, "endLine": end.row, "endColumn": end.column}


def _rule_descriptor(info: RuleInfo) -> dict:
    sections = dict(info.sections)
    full = "\n\n".join(s for s in (sections.get("What it does", ""), sections.get("Why is this bad?", "")) if s)
    return {
        "id": info.code,
        "name": info.name,
        "shortDescription": {"text": info.summary},
        "fullDescription": {"text": full or info.summary, "markdown": full or info.summary},
        "help": {"text": info.docs, "markdown": info.docs},
        "helpUri": info.url,
        "defaultConfiguration": {"level": _LEVELS.get(Severity(info.severity), "warning")},
        "properties": {"tags": ["pytorch", "hooks"]},
    }


def _fallback_descriptor(f: Finding) -> dict:
    """A rule the catalog does not know (a formatter called without one)."""
    out = {"id": f.code, "name": f.name, "shortDescription": {"text": f.name},
           "defaultConfiguration": {"level": _LEVELS[f.severity]}}
    if f.url:
        out["helpUri"] = f.url
    return out


def _physical(path: str, cell: int | None, start: Location, end: Location, paths: _Paths,
              sources: SourceLoader | None) -> dict:
    """A region in the file's own text: in a notebook, lines and columns of its
    JSON (no region when they cannot be told)."""
    out: dict = {"artifactLocation": paths.artifact(path)}
    first = file_location(sources, path, cell, start)
    if first is not None:
        last = file_location(sources, path, cell, end) if cell is not None else end
        out["region"] = _region(first, last if last is not None else first)
    return out


def _result(f: Finding, rule_index: int, paths: _Paths, sources: SourceLoader | None) -> dict:
    artifact = paths.artifact(f.path)
    result: dict = {
        "ruleId": f.code,
        "ruleIndex": rule_index,
        "level": _LEVELS[f.severity],
        "message": {"text": f.message},
        "locations": [{"physicalLocation": _physical(f.path, f.cell, f.location, f.end_location, paths, sources)}],
        "properties": {"name": f.name, "origin": f.origin.value, "helpUri": f.url},
    }
    if f.cell is not None:  # SARIF has no cells: where the finding is in the cell, as hooklint prints it
        result["properties"].update({"cell": f.cell, "cellLine": f.location.row, "cellColumn": f.location.column})
    if f.help:
        result["properties"]["help"] = f.help
    if f.related:
        result["relatedLocations"] = [
            {"id": i, "message": {"text": r.message},
             "physicalLocation": _physical(r.path, r.cell, r.location, r.location, paths, sources)}
            for i, r in enumerate(f.related)
        ]
    if f.fix is not None:
        result["properties"]["fixApplicability"] = f.fix.applicability.value
        result["properties"]["fixMessage"] = f.fix.message
        if f.fix.edits and f.cell is None:  # a cell's edits are not edits of the .ipynb file's text
            result["fixes"] = [{
                "description": {"text": f"{f.fix.message} ({f.fix.applicability.value} fix)"},
                "artifactChanges": [{
                    "artifactLocation": artifact,
                    "replacements": [{"deletedRegion": _region(e.location, e.end_location),
                                      "insertedContent": {"text": e.content}} for e in f.fix.edits],
                }],
            }]
    return result


def _notification(n: Notice, paths: _Paths) -> dict:
    out: dict = {"level": _NOTICE_LEVELS[n.level], "message": {"text": n.message}}
    if n.path:
        out["locations"] = [{"physicalLocation": {"artifactLocation": paths.artifact(n.path)}}]
    return out


def sarif_log(report: Report, catalog: dict[str, RuleInfo], root: Path | None = None,
              sources: SourceLoader | None = None) -> dict:
    paths = _Paths(root.resolve() if root else repository_root())
    rules = [_rule_descriptor(catalog[code]) for code in sorted(catalog)]
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results = []
    for f in report.sorted_findings():
        if f.code not in index:
            index[f.code] = len(rules)
            rules.append(_fallback_descriptor(f))
        results.append(_result(f, index[f.code], paths, sources))
    errors = any(n.level is NoticeLevel.ERROR for n in report.notices)
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "hooklint", "version": __version__, "semanticVersion": __version__,
                                "informationUri": INFORMATION_URI, "rules": rules}},
            "invocations": [{
                "executionSuccessful": not errors,
                "toolExecutionNotifications": [_notification(n, paths) for n in
                                               report.unique_notices()],
            }],
            "originalUriBaseIds": {SRCROOT: {"uri": paths.root.as_uri().rstrip("/") + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": results,
            "properties": {"filesChecked": report.files_checked, "fixed": report.fixed},
        }],
    }


def render_sarif(report: Report, catalog: dict[str, RuleInfo], root: Path | None = None,
                 sources: SourceLoader | None = None) -> str:
    return json.dumps(sarif_log(report, catalog, root, sources), indent=2, ensure_ascii=False) + "\n"
