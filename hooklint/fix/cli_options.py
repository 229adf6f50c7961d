"""``hooklint check --fix / --unsafe-fixes / --diff / --show-fixes``.

``hooklint check`` calls :func:`add_check_options` and :func:`configure_check`;
the latter registers :func:`post_check`, which runs after the check with its
report:

* ``--diff`` prints the unified diff of every fix that would apply, changes
  no file, and exits 1 when there is a diff (0 otherwise);
* ``--fix`` writes the fixes, then checks the files again and returns that
  report (with ``fixed`` set), so the exit code says whether findings remain;
* ``--verify`` (with either) first proves each fix on the model the graph
  layer builds (:mod:`hooklint.fix.verify`) and drops the fixes that fail
  their proof, or that have none and are not safe by construction.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooklint.engine import CheckOptions, discover, display_path, rel_to_root, run_check
from hooklint.findings import Applicability, Finding, Notice, NoticeLevel, Report
from hooklint.static.checker import check_text

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.fix.files import FileFix


@dataclass(frozen=True)
class FixSettings:
    diff: bool
    unsafe: bool
    show: bool
    quiet: bool
    verify: bool = False
    use_cache: bool = True

    @property
    def allowed(self) -> frozenset[Applicability]:
        if self.unsafe:
            return frozenset({Applicability.SAFE, Applicability.UNSAFE})
        return frozenset({Applicability.SAFE})


def add_check_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("fixes")
    g.add_argument("--fix", action="store_true",
                   help="Apply the safe fixes, then report the findings that remain.")
    g.add_argument("--unsafe-fixes", action="store_true",
                   help="With --fix or --diff: also apply the fixes that may change behaviour (review them).")
    g.add_argument("--diff", action="store_true",
                   help="Print the fixes as a unified diff and change no file; exit 1 if there is any.")
    g.add_argument("--show-fixes", action="store_true",
                   help="With --fix or --diff: list the fixed findings per file on stderr.")
    g.add_argument("--fix-only", action="store_true",
                   help="Apply the safe fixes (with --unsafe-fixes, those too) and report nothing else: the "
                        "findings that remain do not fail the run (errors in the analysis still do). Implies --fix.")
    g.add_argument("--exit-non-zero-on-fix", action="store_true",
                   help="With --fix or --fix-only: exit 1 when a fix was applied, even if no finding remains.")
    g.add_argument("--verify", action="store_true",
                   help="With --fix or --diff: prove each fix first by running the model hooklint builds with the "
                        "original and the fixed hook (in a subprocess); apply only the fixes that pass, and those "
                        "that cannot be proven but are safe by construction.")


def configure_check(options: CheckOptions, args: argparse.Namespace) -> None:
    if getattr(args, "fix_only", False):
        args.fix = True
    if getattr(args, "exit_non_zero_on_fix", False) and not (getattr(args, "fix", False) or getattr(args, "diff", False)):
        from hooklint.engine import UsageError

        raise UsageError("--exit-non-zero-on-fix says whether fixes were applied: use it with --fix or --fix-only")
    if not (getattr(args, "fix", False) or getattr(args, "diff", False)):
        if getattr(args, "verify", False):
            from hooklint.engine import UsageError

            raise UsageError("--verify proves fixes: use it with --fix or --diff")
        return
    settings = FixSettings(diff=args.diff, unsafe=args.unsafe_fixes, show=args.show_fixes,
                           quiet=getattr(args, "quiet", False), verify=getattr(args, "verify", False),
                           use_cache=not getattr(args, "no_cache", False))
    if settings.verify and options.static_only:
        from hooklint.engine import UsageError

        raise UsageError("--verify runs the models hooklint builds: it cannot be used with --static-only")
    _fixes_see_the_graph(options, args)
    # What the check is about to read: a file saved after this moment may not
    # match the findings' positions, so it is not fixed (see post_check).
    options.extra["states_before_check"] = _states_before_check(options)
    options.extra["post_check"] = functools.partial(post_check, settings)


def _states_before_check(options: CheckOptions) -> dict[str, tuple[int, ...] | None]:
    from hooklint.engine import UsageError

    try:
        return {path: _state(path) for path in discover(options)}
    except UsageError:  # stdin (`-`), or a missing path: the check says so itself
        return {}


def _state(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)


# Rules whose fix depends on graph facts (HKL101: is an in-place op after the module?).
_GRAPH_FIXES = frozenset({"HKL101"})


def _fixes_see_the_graph(options: CheckOptions, args: argparse.Namespace) -> None:
    """Give the fixes the graph facts their safety rests on, and keep those
    facts for --verify: the graph layer runs even when only HKL101 is selected."""
    if options.static_only:
        return
    if options.graph_provider is None and options.codes & _GRAPH_FIXES:
        from hooklint.graph.cli_options import make_provider

        options.graph_provider = make_provider(args, use_cache=not getattr(args, "no_cache", False))
    inner = options.graph_provider
    if inner is None:
        return

    def remembering(files, config):
        facts, notices = inner(files, config)
        options.extra["graph_facts"] = facts
        return facts, notices

    options.graph_provider = remembering


def post_check(settings: FixSettings, report: Report, options: CheckOptions, args: argparse.Namespace):
    files = {display_path(path): path for path in discover(options)}
    from hooklint.fix.files import fix_files  # only when fixing: keeps `check` start-up light

    findings = report.findings
    before = options.extra.get("states_before_check") or {}
    recheck_for = functools.partial(_recheck, options)
    verification = None
    if settings.verify:
        from hooklint.fix.verify import verify_fixes

        def announce(line: str) -> None:
            if not settings.quiet:
                sys.stderr.write(line + "\n")
                sys.stderr.flush()

        verification = verify_fixes(findings, allowed=settings.allowed, locate=lambda shown: files.get(shown, shown),
                                    graph_facts=options.extra.get("graph_facts") or {}, config=options.config,
                                    use_cache=settings.use_cache, announce=announce)
        findings = verification.keep(findings)
        recheck_for = verification.recheck_for(recheck_for)
    results = fix_files(
        findings,
        allowed=settings.allowed,
        locate=lambda shown: files.get(shown, shown),
        recheck_for=recheck_for,
        write=not settings.diff,
        changed_since_check=lambda real: real in before and _state(real) != before[real],
    )
    notices = fix_notices(results)
    fixed = [f for r in results if r.changed for f in r.outcome.applied]
    if verification is not None:
        notices = verification.notices(fixed) + notices
    if settings.diff:
        return _print_diff(settings, report, results, notices, fixed)
    if settings.show and not settings.quiet:
        sys.stderr.write(fixed_listing(fixed, "Fixed"))
    if not fixed:
        report.notices.extend(notices)
        return report
    after = run_check(options)  # the files changed: what remains is what counts
    after.fixed = len(fixed)
    after.notices.extend(notices)
    return after


def _recheck(options: CheckOptions, path: str):
    """The static check of a new text of ``path``, with the run's rule selection.

    Graph facts are not recomputed between rounds; the final report after
    ``--fix`` comes from a full new check."""
    cfg = options.config
    ignored = frozenset(cfg.ignored_for(rel_to_root(path, cfg.root))) if cfg.per_file_ignores else frozenset()

    def recheck(text: str) -> list[Finding]:
        return check_text(path, text, options.codes, display_path=display_path(path), ignored=ignored,
                          prefilter=options.prefilter, noqa=not options.ignore_noqa).findings

    return recheck


def _print_diff(settings: FixSettings, report: Report, results: list[FileFix], notices: list[Notice],
                fixed: list[Finding]) -> int:
    from hooklint.cli import EXIT_FINDINGS, EXIT_OK
    from hooklint.report.text import render_notices, use_color

    changed = [r for r in results if r.changed]
    sys.stdout.write("".join(r.diff() for r in changed))
    sys.stdout.flush()
    all_notices = report.notices + notices
    # -q keeps the errors (and drops the rest)
    sys.stderr.write(render_notices(Report(notices=all_notices), color=use_color(sys.stderr),
                                    levels=frozenset({NoticeLevel.ERROR}) if settings.quiet else None))
    if not settings.quiet:
        if settings.show:
            sys.stderr.write(fixed_listing(fixed, "Would fix"))
        sys.stderr.write(_diff_summary(report, fixed, len(changed), settings))
    errors = any(n.level is NoticeLevel.ERROR for n in all_notices)
    return EXIT_FINDINGS if changed or errors else EXIT_OK


def _diff_summary(report: Report, fixed: list[Finding], files: int, settings: FixSettings) -> str:
    if fixed:
        line = (f"Would fix {len(fixed)} finding{'s' if len(fixed) != 1 else ''} in {files} "
                f"file{'s' if files != 1 else ''}.")
    else:
        line = "No fixes to apply."
    if not settings.unsafe:
        unsafe = sum(1 for f in report.findings if f.fix and f.fix.applicability is Applicability.UNSAFE)
        if unsafe:
            line += f" {unsafe} more with `--unsafe-fixes`."
    return line + "\n"


def fixed_listing(fixed: list[Finding], verb: str) -> str:
    """ruff's ``--show-fixes`` list: per file, how many findings of each rule."""
    if not fixed:
        return f"{'No findings fixed' if verb == 'Fixed' else 'No fixes to apply'}.\n"
    lines = [f"{verb} {len(fixed)} finding{'s' if len(fixed) != 1 else ''}:"]
    by_file: dict[str, Counter] = {}
    for finding in fixed:
        by_file.setdefault(finding.path, Counter())[(finding.code, finding.name)] += 1
    for path in sorted(by_file):
        lines.append(f"- {path}:")
        for (code, name), count in sorted(by_file[path].items()):
            lines.append(f"    {count} \u00d7 {code} ({name})")
    return "\n".join(lines) + "\n"


def fix_notices(results: list[FileFix]) -> list[Notice]:
    out = []
    for result in results:
        if result.error:
            out.append(Notice(result.path, result.error, NoticeLevel.ERROR))
            continue
        for rejected in result.outcome.rejected:
            f = rejected.finding
            out.append(Notice(result.path, f"{f.code} fix at {f.location.row}:{f.location.column} not applied: "
                              f"{rejected.reason}", NoticeLevel.SKIP))
        if not result.outcome.converged:
            out.append(Notice(result.path, f"the fixes did not settle after {result.outcome.rounds} rounds; "
                              "please review the result and report it", NoticeLevel.INFO))
    return out
