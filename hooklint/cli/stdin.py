"""``hooklint check -`` (or ``--stdin-filename PATH`` alone): check the source
on stdin, as editors run linters.

``--stdin-filename`` names the file the text stands for: its configuration
is the one found from there, its ``per-file-ignores`` apply, a name ending in
``.ipynb`` reads a notebook, and with ``--force-exclude`` an excluded name is
not checked.  The text is never imported (static rules only: the graph layer
imports files from disk).  Findings are printed as for files; with ``--fix``
the source goes to stdout (fixed, or unchanged when nothing applies) and the
findings that remain to stderr; with ``--diff`` the diff goes to stdout.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hooklint.cli import EXIT_FINDINGS, EXIT_OK
from hooklint.engine import CheckOptions, display_path, ignored_codes
from hooklint.findings import Applicability, Notice, NoticeLevel, Report
from hooklint.static.checker import check_file, check_text, read_checkable
from hooklint.static.source import SourceError

STDIN_NAME = "-"


def check_stdin(options: CheckOptions, args: argparse.Namespace) -> int:
    from hooklint.cli.check import emit, exit_code

    data = sys.stdin.buffer.read()
    name = args.stdin_filename or STDIN_NAME
    shown = display_path(name) if args.stdin_filename else STDIN_NAME
    fix = getattr(args, "fix", False)
    diff = getattr(args, "diff", False)
    if args.stdin_filename and _excluded(name, options):
        if fix and not diff:
            _write_stdout(data)  # an editor replaces its buffer with stdout: give the text back unchanged
        return EXIT_OK
    ignored = ignored_codes(name, options) if args.stdin_filename else frozenset()
    report = _check(name, shown, data, options, ignored)
    if not (fix or diff):
        emit(report, options, args, sources=_sources(name, shown, data))
        return exit_code(report, args.exit_zero, options.config)

    fixed = _fix(name, shown, data, report, options, ignored, unsafe=args.unsafe_fixes)
    if diff:
        _write_stdout(fixed.diff().encode("utf-8") if fixed is not None else b"")
        notices = report.notices + _fix_errors(shown, fixed)
        _write_notices(Report(notices=notices), args)
        changed = fixed is not None and fixed.changed
        return EXIT_FINDINGS if changed or any(n.level is NoticeLevel.ERROR for n in notices) else EXIT_OK
    if fixed is not None and fixed.changed:
        new_data = fixed.source.render(fixed.outcome.text).encode(fixed.source.encoding)  # type: ignore[union-attr]
        remaining = _check(name, shown, new_data, options, ignored)
        remaining.fixed = len(fixed.outcome.applied)
    else:
        new_data = data
        remaining = report
        remaining.notices.extend(_fix_errors(shown, fixed))
    _write_stdout(new_data)
    if getattr(args, "fix_only", False):
        from hooklint.cli.check import emit_fix_only

        return emit_fix_only(remaining, args)
    # stdout is the source: the findings that remain go to stderr
    from hooklint.report import render
    from hooklint.report.text import summary_table, use_color

    sys.stderr.write(render(remaining, options.config.output_format, sources=_sources(name, shown, new_data),
                            catalog={}, color=use_color(sys.stderr)))
    _write_notices(remaining, args)
    if not getattr(args, "quiet", False):
        sys.stderr.write(summary_table(remaining, fail_on=options.config.fail_on))
    sys.stderr.flush()
    code = exit_code(remaining, args.exit_zero, options.config)
    if code == EXIT_OK and remaining.fixed and getattr(args, "exit_non_zero_on_fix", False):
        return EXIT_FINDINGS
    return code


def _check(name: str, shown: str, data: bytes, options: CheckOptions, ignored: frozenset[str]) -> Report:
    result = check_file(name, options.codes, display_path=shown, ignored=ignored, prefilter=options.prefilter,
                        target=options.config.target(), data=data, noqa=not options.ignore_noqa)
    return Report(findings=list(result.findings), notices=list(result.notices), files_checked=1)


def _fix(name: str, shown: str, data: bytes, report: Report, options: CheckOptions, ignored: frozenset[str],
         unsafe: bool):
    from hooklint.fix.files import fix_source, open_for_fixing

    try:
        source = open_for_fixing(name, data)
    except SourceError:
        return None  # reported by the check (HKL001)

    def recheck(text: str):
        return check_text(name, text, options.codes, display_path=shown, ignored=ignored,
                          prefilter=options.prefilter, on_disk=False).findings

    allowed = {Applicability.SAFE, Applicability.UNSAFE} if unsafe else {Applicability.SAFE}
    return fix_source(shown, source, report.findings, allowed=allowed, recheck=recheck, write=False)


def _fix_errors(shown: str, fixed) -> list[Notice]:
    return [Notice(shown, fixed.error, NoticeLevel.ERROR)] if fixed is not None and fixed.error else []


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _write_notices(report: Report, args: argparse.Namespace) -> None:
    from hooklint.report.text import render_notices, use_color

    quiet = getattr(args, "quiet", False)
    sys.stderr.write(render_notices(report, color=use_color(sys.stderr),
                                    levels=frozenset({NoticeLevel.ERROR}) if quiet else None))


def _excluded(name: str, options: CheckOptions) -> bool:
    """Excludes apply to stdin only with --force-exclude, as in ruff."""
    from hooklint.files import Walker

    cfg = options.config
    if not cfg.force_exclude:
        return False
    return Walker(cfg.root, cfg.excludes(), cfg.respect_gitignore, force_exclude=True).excludes_file(Path(name))


def _sources(name: str, shown: str, data: bytes):
    from hooklint.report.sources import FileSources

    try:
        return FileSources({shown: read_checkable(name, data)})
    except SourceError:
        return FileSources()


__all__ = ["check_stdin"]
