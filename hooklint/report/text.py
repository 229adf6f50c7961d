"""Terminal output: ``full`` (code frames, help, fixes) and ``concise``, plus the
summary table by rule that goes to stderr."""

from __future__ import annotations

import os
import re
import sys
from collections import Counter

from hooklint.findings import Applicability, Finding, NoticeLevel, Report, Severity
from hooklint.report import frame_text
from hooklint.report.escape import printable
from hooklint.report.paths import place
from hooklint.static.source import python_lines

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_RED = "\x1b[31m"
_YELLOW = "\x1b[33m"
_CYAN = "\x1b[36m"
_BLUE = "\x1b[34m"
_DIM = "\x1b[2m"


# `--color`: "auto" decides per stream; "always" and "never" win over the environment.
_color_choice = "auto"


def set_color_choice(choice: str) -> None:
    global _color_choice
    _color_choice = choice


def use_color(stream) -> bool:
    """Colour for ``stream``: ``--color always/never`` first; then NO_COLOR
    (set and not empty: no colour, https://no-color.org), then FORCE_COLOR
    (set, not empty and not ``0``: colour even when not a terminal), then
    whether the stream is a terminal."""
    if _color_choice != "auto":
        return _color_choice == "always"
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR", "") not in ("", "0"):
        return True
    return hasattr(stream, "isatty") and stream.isatty()


class _Style:
    def __init__(self, color: bool):
        self.color = color

    def __call__(self, text: str, *codes: str) -> str:
        if not self.color or not codes:
            return text
        return "".join(codes) + text + _RESET


def _fix_marker(f: Finding) -> str:
    if f.fix is None:
        return ""
    if f.fix.applicability is Applicability.SAFE:
        return " [*]"
    if f.fix.applicability is Applicability.UNSAFE:
        return " [-]"
    return ""


def header(f: Finding, style: _Style) -> str:
    sev = _RED if f.severity is Severity.ERROR else _YELLOW
    where = place(f.path, f.location, f.cell)[len(f.path):]
    return (f"{style(printable(f.path), _BOLD)}{where}: {style(f.code, _BOLD, sev)}{_fix_marker(f)} "
            f"{printable(f.message)}")


def render_concise(report: Report, color: bool = False) -> str:
    style = _Style(color)
    return "".join(header(f, style) + "\n" for f in report.sorted_findings())


def code_frame(text: str | None, f: Finding, style: _Style, context: int = 1) -> list[str]:
    if text is None:
        return []
    lines = python_lines(text)
    row = f.location.row
    if not 1 <= row <= len(lines):
        return []
    first = max(1, row - context)
    last = min(len(lines), row + context)
    width = len(str(last))
    out = [style(" " * width + " |", _BLUE)]
    for n in range(first, last + 1):
        raw = lines[n - 1].expandtabs(1)
        line = printable(raw)
        out.append(style(f"{n:>{width}} |", _BLUE) + (" " + line if line else ""))
        if n == row:
            # columns on the printed line: an escape is wider than the character it shows
            start = len(printable(raw[:f.location.column - 1])) + 1
            if f.end_location.row == row and f.end_location.column > f.location.column:
                length = len(printable(raw[:f.end_location.column - 1])) + 1 - start
            else:
                length = max(1, len(line) - start + 1)
            marker = " " * (start - 1) + "^" * max(1, length)
            sev = _RED if f.severity is Severity.ERROR else _YELLOW
            out.append(style(" " * width + " |", _BLUE) + " " + style(marker + " " + f.code, sev))
    out.append(style(" " * width + " |", _BLUE))
    return out


def render_full(report: Report, sources, color: bool = False) -> str:
    style = _Style(color)
    chunks: list[str] = []
    for f in report.sorted_findings():
        lines = [header(f, style)]
        lines.extend(code_frame(frame_text(sources, f.path, f.cell), f, style))
        pad = "  "
        if f.help:
            lines.append(f"{pad}{style('= help:', _CYAN, _BOLD)} {printable(f.help, keep_newlines=True)}")
        for rel in f.related:
            lines.append(f"{pad}{style('= note:', _CYAN, _BOLD)} {printable(rel.message, keep_newlines=True)} "
                         f"({printable(place(rel.path, rel.location, rel.cell))})")
        if f.fix is not None:
            label = {
                Applicability.SAFE: "fix (safe, --fix)",
                Applicability.UNSAFE: "fix (unsafe, --unsafe-fixes)",
                Applicability.DISPLAY_ONLY: "suggested fix (not applied automatically)",
            }[f.fix.applicability]
            lines.append(f"{pad}{style('= ' + label + ':', _CYAN, _BOLD)} {printable(f.fix.message, keep_newlines=True)}")
        if f.url:
            lines.append(f"{pad}{style('= docs:', _DIM)} {style(f.url, _DIM)} (or `hooklint rule {f.code}`)")
        chunks.append("\n".join(lines) + "\n")
    return "\n".join(chunks)


def summary_table(report: Report, *, fix_hint: bool = True, unsafe_hint: bool = True, table: bool = True,
                  fail_on: str | None = None) -> str:
    """Counts by rule (unless ``table`` is False) and one closing line, for stderr.

    "All checks passed" only when there is nothing to say: no finding, no
    error (a file or model that could not be analysed) and nothing skipped."""
    parts: list[str] = []
    if report.findings and table:
        parts.append(_rule_table(report))
    parts.append(summary_line(report, fix_hint=fix_hint, unsafe_hint=unsafe_hint, fail_on=fail_on))
    if report.fixed:
        parts.insert(0, f"Fixed {report.fixed} finding{'s' if report.fixed != 1 else ''}.")
    return "\n".join(parts) + "\n"


def _rule_table(report: Report) -> str:
    from tabulate import tabulate

    findings = report.findings
    counts = Counter((f.code, f.name) for f in findings)
    fixable = Counter(f.code for f in findings if f.fix is not None and f.fix.applicability is Applicability.SAFE)
    unsafe = Counter(f.code for f in findings if f.fix is not None and f.fix.applicability is Applicability.UNSAFE)
    rows = [(code, name, n, fixable.get(code, 0) or "", unsafe.get(code, 0) or "")
            for (code, name), n in sorted(counts.items())]
    return tabulate(rows, headers=("code", "rule", "count", "fixable", "unsafe fix"), tablefmt="simple")


_FIX_LEFT = re.compile(r"HKL\d{3} fix at \d+:\d+ not applied")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


def _passing(findings: list[Finding], fail_on: str | None) -> int:
    """How many findings are below `fail-on` (printed, not failing the run)."""
    if fail_on is None:
        return 0
    floor = _SEVERITY_RANK[Severity(fail_on)]
    return sum(1 for f in findings if _SEVERITY_RANK[f.severity] < floor)


def summary_line(report: Report, *, fix_hint: bool = True, unsafe_hint: bool = True,
                 fail_on: str | None = None) -> str:
    findings = report.findings
    checked = f"{report.files_checked} checked" if findings else f"{_plural(report.files_checked, 'file')} checked"
    errors = report.count_notices(NoticeLevel.ERROR)
    # a fix that --fix/--verify left out is a SKIP notice too, but its file was checked
    fixes_left = sum(1 for n in report.unique_notices() if n.level is NoticeLevel.SKIP and _FIX_LEFT.match(n.message))
    skipped = report.count_notices(NoticeLevel.SKIP) - fixes_left
    problems = []
    if errors:
        problems.append(f"{_plural(errors, 'error')} in the analysis")
    if skipped:
        problems.append(f"{skipped} not checked")
    if fixes_left:
        problems.append(f"{_plural(fixes_left, 'fix')} not applied".replace("fixs", "fixes"))
    if findings:
        files = len({f.path for f in findings})
        line = f"Found {_plural(len(findings), 'finding')} in {_plural(files, 'file')} ({checked})."
        n_fix = sum(1 for f in findings if f.fix is not None and f.fix.applicability is Applicability.SAFE)
        n_unsafe = sum(1 for f in findings if f.fix is not None and f.fix.applicability is Applicability.UNSAFE)
        if fix_hint and n_fix:
            line += f" {n_fix} fixable with `--fix`."
        if fix_hint and unsafe_hint and n_unsafe:
            line += f" {n_unsafe} more with `--unsafe-fixes`."
        if problems:
            line += f" Also {' and '.join(problems)} (see above)."
        passing = _passing(findings, fail_on)
        if passing:
            everything = "none fails" if passing == len(findings) else \
                f"{passing} of them {'does' if passing == 1 else 'do'} not fail"
            line += f" Below `fail-on = \"{fail_on}\"`: {everything} the run."
        return line
    if errors:
        return f"No findings, but the results are incomplete: {' and '.join(problems)} (see above; {checked})."
    if skipped:
        return f"No findings; {' and '.join(problems)} (see above; {checked})."
    return f"All checks passed ({checked})."


def statistics_table(report: Report) -> str:
    from tabulate import tabulate

    counts = Counter((f.code, f.name) for f in report.findings)
    fixable = Counter(f.code for f in report.findings if f.fix is not None
                      and f.fix.applicability is Applicability.SAFE)
    rows = [(n, code, name, "[*]" if fixable.get(code) else "") for (code, name), n in
            sorted(counts.items(), key=lambda kv: (-kv[1], kv[0][0]))]
    if not rows:
        return ""
    return tabulate(rows, tablefmt="plain") + "\n"


_NOTICE_COLORS = {NoticeLevel.INFO: _CYAN, NoticeLevel.WARNING: _YELLOW, NoticeLevel.SKIP: _YELLOW,
                  NoticeLevel.ERROR: _RED}


def render_notices(report: Report, color: bool = False, levels: frozenset[NoticeLevel] | None = None) -> str:
    """One line per notice (each ``once_key`` once); ``levels``: only those."""
    style = _Style(color)
    out = []
    for n in report.unique_notices():
        if levels is not None and n.level not in levels:
            continue
        out.append(f"hooklint: {style(n.level.value, _NOTICE_COLORS[n.level])}: {printable(n.path)}: "
                   f"{printable(n.message)}\n")
    return "".join(out)


def stderr_is_tty() -> bool:
    return use_color(sys.stderr)
