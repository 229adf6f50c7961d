"""Run the static rules over one file: read, prefilter, parse, check, apply noqa.

This module and everything it imports must not import torch: the static pass
runs in pre-commit environments that have no torch, and it never executes the
code it reads.
"""

from __future__ import annotations

import ast
import os
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from hooklint.findings import Finding, Location, Notice, NoticeLevel
from hooklint.rules import all_rules
from hooklint.rules.base import Rule
from hooklint.static.context import FileContext
from hooklint.static.noqa import parse_noqa
from hooklint.static.source import SourceError, read_source


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    parsed: bool = False  # False when the text prefilter showed no rule can fire

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "findings": [f.to_dict() for f in self.findings],
            "notices": [n.to_dict() for n in self.notices],
            "parsed": self.parsed,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "FileResult":
        return cls(
            data["path"],
            [Finding.from_dict(f) for f in data["findings"]],
            [Notice.from_dict(n) for n in data["notices"]],
            data["parsed"],
        )


@lru_cache(maxsize=64)
def _static_rules(codes: frozenset[str]) -> tuple[Rule, ...]:
    return tuple(rule() for rule in all_rules() if rule.code in codes and rule.check is not Rule.check)


@lru_cache(maxsize=64)
def triggers_for(codes: frozenset[str]) -> tuple[str, ...]:
    words: set[str] = set()
    for rule in _static_rules(codes):
        words.update(rule.triggers)
    return tuple(sorted(words))


def may_contain_findings(text: str, codes: frozenset[str]) -> bool:
    """The text shortcut: a file that contains none of the enabled rules' trigger
    words cannot produce a finding, so it need not be parsed."""
    return any(word in text for word in triggers_for(codes))


def _syntax_finding(display_path: str, message: str, row: int, column: int) -> Finding:
    from hooklint.rules.syntax import SyntaxErrorRule

    return SyntaxErrorRule.make(path=display_path, location=Location(max(row, 1), max(column, 1)),
                                message=message)


def check_text(
    path: str,
    text: str,
    codes: frozenset[str],
    *,
    display_path: str | None = None,
    ignored: frozenset[str] = frozenset(),
    graph: Any = None,
    prefilter: bool = True,
) -> FileResult:
    display = display_path or path
    result = FileResult(display)
    active = frozenset(codes - ignored)
    if not active:
        return result
    if prefilter and graph is None and not may_contain_findings(text, active):
        return result
    try:
        with warnings.catch_warnings():
            # invalid escape sequences etc. in user code are not our business
            warnings.simplefilter("ignore")
            tree = ast.parse(text, filename=display)
    except SyntaxError as exc:
        if "HKL001" in active:
            row = exc.lineno or 1
            col = exc.offset or 1
            result.findings.append(_syntax_finding(display, f"SyntaxError: {exc.msg}", row, col))
        return result
    except (ValueError, MemoryError, RecursionError) as exc:  # null bytes, absurd nesting
        if "HKL001" in active:
            result.findings.append(_syntax_finding(display, f"cannot parse: {exc}", 1, 1))
        return result
    result.parsed = True
    ctx = FileContext(path, text, tree, display_path=display, graph=graph)
    try:
        findings = _run_rules(ctx, active, result)
    finally:
        ctx.close()
    result.findings = apply_noqa(text, findings)
    return result


def _run_rules(ctx: FileContext, active: frozenset[str], result: FileResult) -> list[Finding]:
    display = ctx.display_path
    findings: list[Finding] = []
    for rule in _static_rules(active):
        try:
            findings.extend(rule.check(ctx))
        except RecursionError:
            result.notices.append(Notice(display, f"{rule.code}: skipped, the file nests too deeply to analyse",
                                         NoticeLevel.SKIP))
        except Exception as exc:  # noqa: BLE001 - one rule's bug must not hide the others' findings
            if os.environ.get("HOOKLINT_STRICT"):
                raise
            result.notices.append(Notice(
                display, f"internal error in {rule.code} ({type(exc).__name__}: {exc}); please report it",
                NoticeLevel.ERROR))
    return findings


def apply_noqa(text: str, findings: list[Finding]) -> list[Finding]:
    if not findings:
        return findings
    noqa = parse_noqa(text)
    return [f for f in findings if not noqa.suppresses(f.code, f.location.row)]


def check_file(
    path: str,
    codes: frozenset[str],
    *,
    display_path: str | None = None,
    ignored: frozenset[str] = frozenset(),
    graph: Any = None,
    prefilter: bool = True,
) -> FileResult:
    display = display_path or path
    try:
        text = read_source(path)
    except SourceError as err:
        result = FileResult(display)
        code = "HKL002" if err.kind == "io" else "HKL001"
        if code in codes and code not in ignored:
            from hooklint.rules.syntax import IoErrorRule, SyntaxErrorRule

            rule = IoErrorRule if code == "HKL002" else SyntaxErrorRule
            result.findings.append(rule.make(path=display, location=Location(err.row, err.column),
                                             message=err.message))
        return result
    return check_text(path, text, codes, display_path=display, ignored=ignored, graph=graph, prefilter=prefilter)
