"""Terminal output: ``full`` (code frames, help, fixes) and ``concise``, plus the
summary table by rule that goes to stderr."""

from __future__ import annotations

import os
import sys
from collections import Counter

from hooklint.findings import Applicability, Finding, Report, Severity
from hooklint.static.source import python_lines

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_RED = "\x1b[31m"
_YELLOW = "\x1b[33m"
_CYAN = "\x1b[36m"
_BLUE = "\x1b[34m"
_DIM = "\x1b[2m"


def use_color(stream) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
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
    return (f"{style(f.path, _BOLD)}:{f.location.row}:{f.location.column}: "
            f"{style(f.code, _BOLD, sev)}{_fix_marker(f)} {f.message}")


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
        line = lines[n - 1].expandtabs(1)
        out.append(style(f"{n:>{width}} |", _BLUE) + (" " + line if line else ""))
        if n == row:
            start = f.location.column
            if f.end_location.row == row and f.end_location.column > start:
                length = f.end_location.column - start
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
        lines.extend(code_frame(sources(f.path), f, style))
        pad = "  "
        if f.help:
            lines.append(f"{pad}{style('= help:', _CYAN, _BOLD)} {f.help}")
        for rel in f.related:
            lines.append(f"{pad}{style('= note:', _CYAN, _BOLD)} {rel.message} "
                         f"({rel.path}:{rel.location.row}:{rel.location.column})")
        if f.fix is not None:
            label = {
                Applicability.SAFE: "fix (safe, --fix)",
                Applicability.UNSAFE: "fix (unsafe, --unsafe-fixes)",
                Applicability.DISPLAY_ONLY: "suggested fix (not applied automatically)",
            }[f.fix.applicability]
            lines.append(f"{pad}{style('= ' + label + ':', _CYAN, _BOLD)} {f.fix.message}")
        if f.url:
            lines.append(f"{pad}{style('= docs:', _DIM)} {style(f.url, _DIM)} (or `hooklint rule {f.code}`)")
        chunks.append("\n".join(lines) + "\n")
    return "\n".join(chunks)


def summary_table(report: Report, *, fix_hint: bool = True) -> str:
    """Counts by rule, for stderr; empty when there is nothing to say."""
    from tabulate import tabulate

    findings = report.findings
    parts: list[str] = []
    if findings:
        counts = Counter((f.code, f.name) for f in findings)
        fixable = Counter(
            f.code for f in findings if f.fix is not None and f.fix.applicability is Applicability.SAFE
        )
        unsafe = Counter(
            f.code for f in findings if f.fix is not None and f.fix.applicability is Applicability.UNSAFE
        )
        rows = [
            (code, name, n, fixable.get(code, 0) or "", unsafe.get(code, 0) or "")
            for (code, name), n in sorted(counts.items())
        ]
        parts.append(tabulate(rows, headers=("code", "rule", "count", "fixable", "unsafe fix"),
                              tablefmt="simple"))
        files = len({f.path for f in findings})
        n_fix = sum(fixable.values())
        n_unsafe = sum(unsafe.values())
        line = (f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''} in {files} "
                f"file{'s' if files != 1 else ''} ({report.files_checked} checked).")
        if fix_hint and n_fix:
            line += f" {n_fix} fixable with `--fix`."
        if fix_hint and n_unsafe:
            line += f" {n_unsafe} more with `--unsafe-fixes`."
        parts.append(line)
    else:
        parts.append(f"All checks passed ({report.files_checked} file{'s' if report.files_checked != 1 else ''} "
                     f"checked).")
    if report.fixed:
        parts.insert(0, f"Fixed {report.fixed} finding{'s' if report.fixed != 1 else ''}.")
    return "\n".join(parts) + "\n"


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


def render_notices(report: Report, color: bool = False) -> str:
    style = _Style(color)
    out = []
    for n in sorted(report.notices, key=lambda n: (n.path, n.message)):
        tag = {"info": style("info", _CYAN), "skip": style("skip", _YELLOW), "error": style("error", _RED)}[
            n.level.value]
        out.append(f"hooklint: {tag}: {n.path}: {n.message}\n")
    return "".join(out)


def stderr_is_tty() -> bool:
    return use_color(sys.stderr)
