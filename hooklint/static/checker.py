"""Run the static rules over one file: read, prefilter, parse, check, apply noqa.

This module and everything it imports must not import torch: the static pass
runs in pre-commit environments that have no torch, and it never executes the
code it reads.
"""

from __future__ import annotations

import ast
import os
import re
import unicodedata
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


# Python's AST can take 240 bytes of memory per character of source: 12 GB and
# a minute of parsing for a 50 MB generated file.  The largest file among the
# 15,000 of torch, its dependencies and 19 hook-heavy packages is 1.4 MB.
MAX_PARSED_CHARS = 4 * 2 ** 20


@dataclass
class FileResult:
    path: str
    findings: list[Finding] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    parsed: bool = False  # False when the text prefilter showed no rule can fire
    # For the project pass (hooklint.parallel), not part of the stored result:
    # the file's call-graph summary, and the questions its rules asked about
    # other files with the answers they got (hooklint.static.project).
    summary: dict[str, Any] | None = None
    asked: dict[str, Any] | None = None

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


@dataclass(frozen=True)
class _Prefilter:
    anchor: str  # a substring of every word (checked first: one scan rules most files out)
    words: tuple[str, ...]  # any one admits the file
    patterned: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...]  # (words, pattern) of rules with a pattern


@lru_cache(maxsize=64)
def _prefilter(codes: frozenset[str]) -> _Prefilter:
    words: set[str] = set()
    patterned: dict[tuple[tuple[str, ...], str], re.Pattern[str]] = {}
    for rule in _static_rules(codes):
        if rule.trigger_pattern is None:
            words.update(rule.triggers)
        else:
            key = (tuple(sorted(rule.triggers)), rule.trigger_pattern)
            patterned.setdefault(key, re.compile(rule.trigger_pattern))
    return _Prefilter(_common_substring(words), tuple(sorted(words)),
                      tuple((key[0], rx) for key, rx in sorted(patterned.items(), key=lambda kv: kv[0])))


def _common_substring(words: set[str]) -> str:
    """The longest substring of every word (``_hook`` for the hook APIs)."""
    if not words:
        return ""
    shortest = min(words, key=len)
    for size in range(len(shortest), 0, -1):
        for start in range(len(shortest) - size + 1):
            piece = shortest[start:start + size]
            if all(piece in word for word in words):
                return piece
    return ""


def may_contain_findings(text: str, codes: frozenset[str]) -> bool:
    """The text shortcut: a file that contains none of the enabled rules'
    trigger words (or whose words are there but not the rule's pattern) cannot
    produce a finding, so it need not be parsed."""
    if _admits(text, codes):
        return True
    # Python reads identifiers in NFKC form: a fullwidth `ｒegister_hook` is `register_hook`
    if not text.isascii() and not unicodedata.is_normalized("NFKC", text):
        return _admits(unicodedata.normalize("NFKC", text), codes)
    return False


def _admits(text: str, codes: frozenset[str]) -> bool:
    pre = _prefilter(codes)
    if pre.anchor in text and any(word in text for word in pre.words):
        return True
    return any(any(word in text for word in rule_words) and rx.search(text) for rule_words, rx in pre.patterned)


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
    project_answers: dict[str, Any] | None = None,
    summarize: bool = False,
) -> FileResult:
    display = display_path or path
    result = FileResult(display)
    active = frozenset(codes - ignored)
    if not active:
        return result
    if prefilter and graph is None and not may_contain_findings(text, active):
        return result
    if len(text) > MAX_PARSED_CHARS:
        result.notices.append(Notice(display, f"the file has {len(text) / 2 ** 20:.1f} M characters, more than the "
                                     f"{MAX_PARSED_CHARS // 2 ** 20} M hooklint parses (generated code?); not checked",
                                     NoticeLevel.SKIP))
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
    ctx = FileContext(path, text, tree, display_path=display, graph=graph, project_answers=project_answers)
    try:
        findings = _run_rules(ctx, active, result)
        if summarize:
            result.summary = _summary_of(ctx, result)
        if "project" in ctx.__dict__:
            result.asked = ctx.project.asked
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


def _summary_of(ctx: FileContext, result: FileResult) -> dict[str, Any] | None:
    try:
        return ctx.summary
    except RecursionError:
        return None
    except Exception as exc:  # noqa: BLE001 - the file's findings stand without it
        if os.environ.get("HOOKLINT_STRICT"):
            raise
        result.notices.append(Notice(ctx.display_path, f"internal error in the call-graph summary "
                                     f"({type(exc).__name__}: {exc}); please report it", NoticeLevel.ERROR))
        return None


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
    project_answers: dict[str, Any] | None = None,
    summarize: bool = False,
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
    return check_text(path, text, codes, display_path=display, ignored=ignored, graph=graph, prefilter=prefilter,
                      project_answers=project_answers, summarize=summarize)
