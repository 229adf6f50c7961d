"""Fixes applied to one text, with no file access.

A round takes the findings of one check of a text, keeps the fixes whose
applicability is allowed, and applies as many as it can at once: fixes are
taken in source order and one whose edits touch the span of an already
accepted fix waits for the next round (the text is re-checked in between, so
its edits are recomputed against the new text); an edit that two fixes share
exactly is made once.  The result must still parse:
a fix that would break the syntax is dropped and reported, never written.
:func:`fix_text` runs rounds until nothing more applies, a text repeats, or
the round limit is hit.
"""

from __future__ import annotations

import ast
import bisect
import warnings
from dataclasses import dataclass, field
from typing import Callable, Collection, Iterable

from hooklint.findings import Applicability, Finding, Location
from hooklint.static.source import LINE_BREAK

# ruff stops at 100 rounds; hooklint's fixes are few per file and rarely
# enable one another, so a handful of rounds is plenty and bounds the cost of
# a fix that keeps producing new findings.
MAX_ROUNDS = 10


@dataclass(frozen=True)
class RejectedFix:
    finding: Finding
    reason: str


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    content: str


class LineStarts:
    """Character offsets of 1-based (row, column) locations in one text."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0]
        self.content_ends: list[int] = []
        for match in LINE_BREAK.finditer(text):
            self.content_ends.append(match.start())
            self.starts.append(match.end())
        self.content_ends.append(len(text))

    def offset(self, location: Location) -> int | None:
        """None when the location is not in the text (column 1 past the
        last line break, and one column past a line's end, are in it)."""
        row, column = location.row, location.column
        if not (1 <= row <= len(self.starts)) or column < 1:
            return None
        offset = self.starts[row - 1] + column - 1
        return offset if offset <= self.content_ends[row - 1] else None


def newline_of(text: str) -> str:
    """The text's line ending, from its first line break (\\n when it has none)."""
    match = LINE_BREAK.search(text)
    return match.group() if match else "\n"


def parse_error(text: str) -> str | None:
    """Why ``text`` does not parse as Python, or None when it does."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes etc. are not ours to report
            ast.parse(text)
    except SyntaxError as exc:
        return f"{exc.msg} (line {exc.lineno})"
    except (ValueError, MemoryError, RecursionError) as exc:
        return str(exc) or type(exc).__name__
    return None


def applicable(finding: Finding, allowed: Collection[Applicability]) -> bool:
    fix = finding.fix
    return fix is not None and bool(fix.edits) and fix.applicability in allowed \
        and fix.applicability is not Applicability.DISPLAY_ONLY


def _overlap(a: _Span, b: _Span) -> bool:
    # Two edits at the same point have no defined order; edits that merely
    # touch (one ends where the other starts) do.
    return (a.start < b.end and b.start < a.end) or a.start == b.start


def _conflict(a: tuple[_Span, ...], b: tuple[_Span, ...]) -> bool:
    # An edit that two fixes share exactly (HKL101's helper function, written
    # once for every registration it fixes) is made once and is no conflict.
    return any(_overlap(x, y) and x != y for x in a for y in b)


def _build(text: str, spans: Iterable[_Span]) -> str:
    out, pos = [], 0
    for span in sorted(set(spans), key=lambda s: (s.start, s.end)):
        out.append(text[pos:span.start])
        out.append(span.content)
        pos = span.end
    out.append(text[pos:])
    return "".join(out)


@dataclass
class RoundResult:
    text: str
    applied: list[Finding] = field(default_factory=list)
    rejected: list[RejectedFix] = field(default_factory=list)


def apply_round(text: str, findings: Iterable[Finding], allowed: Collection[Applicability]) -> RoundResult:
    """Apply every allowed fix that does not collide with an earlier one."""
    result = RoundResult(text)
    lines = LineStarts(text)
    newline = newline_of(text)
    candidates: list[tuple[tuple[_Span, ...], Finding]] = []
    for finding in findings:
        if not applicable(finding, allowed):
            continue
        spans = _spans(finding, lines, newline)
        if isinstance(spans, str):
            result.rejected.append(RejectedFix(finding, spans))
        else:
            candidates.append((spans, finding))
    if not candidates:
        return result
    before = parse_error(text)
    if before is not None:
        result.rejected.extend(RejectedFix(f, f"the file does not parse before fixing: {before}")
                               for _, f in candidates)
        return result
    candidates.sort(key=lambda c: (c[0][0].start, c[1].sort_key()))
    accepted: dict[tuple[_Span, ...], list[Finding]] = {}  # insertion order is source order
    taken = _TakenSpans()
    for spans, finding in candidates:
        same = accepted.get(spans)
        if same is not None:  # two findings, one identical fix: apply it once, both are fixed
            same.append(finding)
        elif not taken.conflicts(spans):
            accepted[spans] = [finding]
            taken.add(spans)
        # else: it waits for the next round, re-computed on the new text
    groups = list(accepted.items())
    new_text = _build(text, (s for group in groups for s in group[0]))
    if parse_error(new_text) is not None:
        groups, new_text = _drop_breaking(text, groups, result)
    result.text = new_text
    result.applied = [f for group in groups for f in group[1]]
    return result


class _TakenSpans:
    """The spans of the fixes accepted in a round, sorted: does a new fix
    collide with one of them?  Accepted spans never overlap one another
    (identical ones, a helper several fixes share, are kept once), so a
    collision is found next to where the new span would sort: a file with
    thousands of fixes is not compared pair by pair."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.spans: list[_Span] = []

    def conflicts(self, spans: tuple[_Span, ...]) -> bool:
        for x in spans:
            j = bisect.bisect_right(self.keys, (x.end, x.end)) - 1
            while j >= 0:
                y = self.spans[j]
                if y.end < x.start:
                    break
                if y != x and _overlap(x, y):
                    return True
                j -= 1
        return False

    def add(self, spans: tuple[_Span, ...]) -> None:
        for x in spans:
            key = (x.start, x.end)
            i = bisect.bisect_left(self.keys, key)
            if any(self.spans[k] == x for k in range(i, min(i + 1, len(self.spans)))):
                continue  # shared with a fix accepted before
            self.keys.insert(i, key)
            self.spans.insert(i, x)


def _drop_breaking(text, accepted, result: RoundResult):
    """Keep, in source order, each fix whose addition leaves the text parseable."""
    kept: list = []
    new_text = text
    for group in accepted:
        trial = _build(text, (s for g in kept + [group] for s in g[0]))
        error = parse_error(trial)
        if error is None:
            kept.append(group)
            new_text = trial
        else:
            result.rejected.extend(
                RejectedFix(f, f"the fixed code would not parse ({error}); the fix was dropped, please report it")
                for f in group[1])
    return kept, new_text


def _spans(finding: Finding, lines: LineStarts, newline: str) -> tuple[_Span, ...] | str:
    """The fix's edits as text offsets, or the reason they cannot be applied."""
    spans = []
    for edit in finding.fix.edits:  # type: ignore[union-attr]
        start, end = lines.offset(edit.location), lines.offset(edit.end_location)
        if start is None or end is None or end < start:
            return (f"its edit {edit.location.row}:{edit.location.column}-{edit.end_location.row}:"
                    f"{edit.end_location.column} is outside the file; please report it")
        # Rules write "\n"; a CRLF file must stay CRLF.
        spans.append(_Span(start, end, LINE_BREAK.sub(lambda _m: newline, edit.content)))
    spans.sort(key=lambda s: (s.start, s.end))
    for a, b in zip(spans, spans[1:]):
        if _overlap(a, b):
            return "its edits overlap each other; please report it"
    return tuple(spans)


@dataclass
class FixOutcome:
    original: str
    text: str
    applied: list[Finding] = field(default_factory=list)
    # Fixes still not applied when the rounds ended, with the reason.
    rejected: list[RejectedFix] = field(default_factory=list)
    rounds: int = 0
    # False when the round limit was hit or the text came back to an earlier
    # state: the fixes did not settle and the result should be looked at.
    converged: bool = True

    @property
    def changed(self) -> bool:
        return self.text != self.original


Recheck = Callable[[str], Iterable[Finding]]


def fix_text(text: str, findings: Iterable[Finding], *, allowed: Collection[Applicability], recheck: Recheck,
             max_rounds: int = MAX_ROUNDS) -> FixOutcome:
    """Apply fixes in rounds: ``findings`` are those of ``text``; ``recheck``
    gives the findings of each new text."""
    outcome = FixOutcome(text, text)
    seen = {text}
    current_findings = list(findings)
    for _ in range(max_rounds):
        round_ = apply_round(outcome.text, current_findings, allowed)
        outcome.rounds += 1
        outcome.rejected = round_.rejected
        if not round_.applied:
            return outcome
        outcome.applied.extend(round_.applied)
        outcome.text = round_.text
        if round_.text in seen:
            outcome.converged = False
            return outcome
        seen.add(round_.text)
        current_findings = list(recheck(outcome.text))
    # The limit was hit: settled only if nothing more would apply.
    outcome.converged = not any(applicable(f, allowed) for f in current_findings)
    outcome.rejected = [RejectedFix(f, f"not applied after {max_rounds} rounds of fixes; run --fix again")
                        for f in current_findings if applicable(f, allowed)]
    return outcome


def preview(text: str, finding: Finding) -> str | None:
    """The text with this one finding's fix applied, whatever its applicability
    (display-only fixes included): what reports show.  None when it has no
    edits or they do not fit the text."""
    if finding.fix is None or not finding.fix.edits:
        return None
    spans = _spans(finding, LineStarts(text), newline_of(text))
    return None if isinstance(spans, str) else _build(text, spans)
