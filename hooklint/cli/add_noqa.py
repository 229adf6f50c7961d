"""``hooklint check --add-noqa``: silence every current finding in place, as
ruff's ``--add-noqa`` does, to adopt hooklint on a code base and fix the
findings over time.

Each line with a finding gets ``# noqa: HKLxxx`` (merged into a ``# noqa``
comment already on it, other tools' codes kept).  Files are written
atomically and must still parse; notebooks get the comment in their cells.
Running it again changes nothing.  Syntax errors (HKL001) and unreadable
files (HKL002) cannot be silenced this way and are left alone.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from hooklint.cli import EXIT_FINDINGS, EXIT_OK
from hooklint.engine import CheckOptions, discover, display_path, run_check
from hooklint.findings import Notice, NoticeLevel, Report

NOT_SILENCEABLE = frozenset({"HKL001", "HKL002"})


def add_noqa(options: CheckOptions, args: argparse.Namespace) -> int:
    from hooklint.fix.apply import parse_error
    from hooklint.fix.files import open_for_fixing
    from hooklint.fsutil import FileChanged
    from hooklint.report.text import render_notices, use_color
    from hooklint.static.noqa import add_noqa_comments
    from hooklint.static.source import SourceError

    report = run_check(options)
    located = {display_path(path): path for path in discover(options)}
    by_file: dict[str, list] = defaultdict(list)
    for f in report.findings:
        if f.code not in NOT_SILENCEABLE:
            by_file[f.path].append(f)
    notices = [n for n in report.notices if n.level is NoticeLevel.ERROR]
    total = 0
    for shown in sorted(by_file):
        path = located.get(shown, shown)
        try:
            source = open_for_fixing(path)
        except SourceError as err:
            notices.append(Notice(shown, f"cannot add noqa comments: {err.message}", NoticeLevel.ERROR))
            continue
        rows: dict[int, set[str]] = defaultdict(set)
        for f in source.in_text(by_file[shown]):
            rows[f.location.row].add(f.code)
        new_text, added, impossible = add_noqa_comments(source.text, rows)
        for row in impossible:
            notices.append(Notice(shown, f"no noqa comment added for line {_where(source, row)}: the line ends "
                                         "inside a string or continues with a backslash", NoticeLevel.SKIP))
        if not added:
            continue
        error = parse_error(new_text) if parse_error(source.text) is None else None
        if error is not None:
            notices.append(Notice(shown, f"noqa comments not added: the file would not parse ({error}); "
                                         "please report it", NoticeLevel.ERROR))
            continue
        try:
            source.write(new_text)
        except FileChanged:
            notices.append(Notice(shown, "noqa comments not added: the file changed since hooklint read it; "
                                         "nothing was written, run hooklint again", NoticeLevel.ERROR))
            continue
        except (OSError, ValueError) as exc:
            notices.append(Notice(shown, f"cannot write the noqa comments: {getattr(exc, 'strerror', None) or exc}",
                                  NoticeLevel.ERROR))
            continue
        total += added
    quiet = getattr(args, "quiet", False)
    sys.stderr.write(render_notices(Report(notices=notices), color=use_color(sys.stderr),
                                    levels=frozenset({NoticeLevel.ERROR}) if quiet else None))
    if not quiet:
        sys.stderr.write(f"Added {total} noqa directive{'s' if total != 1 else ''}.\n")
    return EXIT_FINDINGS if any(n.level is NoticeLevel.ERROR for n in notices) else EXIT_OK


def _where(source, row: int) -> str:
    notebook = getattr(source, "notebook", None)
    if notebook is None:
        return str(row)
    cell, in_cell, _col = notebook.to_cell(row, 1)
    return f"{in_cell} of cell {cell}"
