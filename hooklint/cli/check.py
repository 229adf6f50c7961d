"""``hooklint check [PATHS]``: lint files for hook bugs."""

from __future__ import annotations

import argparse
import sys

from hooklint.cli import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, SUBCOMMANDS
from hooklint.cli.options import (
    add_fail_on_option,
    add_file_options,
    add_output_options,
    add_selection_options,
    config_from_args,
    write_output,
)
from hooklint.config import Config
from hooklint.engine import CheckOptions, UsageError, find_project_root, run_check
from hooklint.findings import NoticeLevel, Report


def add_parser(sub) -> None:
    p = sub.add_parser(
        "check",
        help=SUBCOMMANDS["check"],
        description="Check Python files for PyTorch hook bugs. Without --static-only, nn.Module classes in "
        "the files are also imported (in a subprocess, with a timeout) and traced with torch.fx when torch "
        "is installed.",
    )
    p.add_argument("paths", nargs="*", default=None, metavar="PATH",
                   help="Files (Python files, Jupyter notebooks) or folders (default: .); `-` reads stdin.")
    add_selection_options(p)
    add_file_options(p)
    add_output_options(p)
    g = p.add_argument_group("behaviour")
    add_target_version_option(g)
    g.add_argument("--stdin-filename", metavar="PATH",
                   help="With `-` (or no path): the name of the file read from stdin, for configuration, "
                        "per-file-ignores, excludes (with --force-exclude) and messages; a name ending in .ipynb "
                        "reads a notebook. With --fix, the fixed source goes to stdout.")
    g.add_argument("--add-noqa", action="store_true",
                   help="Append `# noqa: HKLxxx` to every line with a finding (merged with an existing noqa "
                        "comment), then exit 0.")
    g.add_argument("--show-settings", action="store_true",
                   help="Print the resolved configuration for the first PATH (which file, every key, the enabled "
                        "rules) and exit.")
    g.add_argument("--show-files", action="store_true",
                   help="Print the files that would be checked (after excludes and .gitignore) and exit.")
    g.add_argument("--static-only", action="store_true",
                   help="Never import or run the checked code (no graph analysis).")
    g.add_argument("--no-prefilter", dest="prefilter", action="store_false",
                   help="Parse every file, even those whose text cannot hold a finding.")
    g.add_argument("--statistics", action="store_true", help="Print counts per rule instead of findings.")
    g.add_argument("--exit-zero", action="store_true", help="Exit 0 even when there are findings.")
    add_fail_on_option(g)
    g.add_argument("-q", "--quiet", action="store_true",
                   help="Print findings and errors only: no summary, no informational notices.")
    g.add_argument("--ignore-noqa", action="store_true",
                   help="Ignore every `# noqa` and `# hooklint: noqa` comment: report what they silence.")
    g.add_argument("-w", "--watch", action="store_true",
                   help="Check, then check again whenever a checked file (or the configuration) changes, "
                        "until Ctrl-C.")
    p.set_defaults(handler=run)
    _extend_parser(p)


# Layers that add options to `check` (graph analysis, fixes, parallelism).  Each
# may define add_check_options(parser) and configure_check(options, args).
_PLUGIN_MODULES = ("hooklint.graph.cli_options", "hooklint.fix.cli_options", "hooklint.parallel")


def plugins():
    import importlib

    for modname in _PLUGIN_MODULES:
        try:
            yield importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name == modname or (exc.name and modname.startswith(exc.name + ".")):
                continue  # that layer is not part of this build
            raise


def _extend_parser(p: argparse.ArgumentParser) -> None:
    for module in plugins():
        add = getattr(module, "add_check_options", None)
        if add is not None:
            add(p)


def reads_stdin(args: argparse.Namespace) -> bool:
    paths = args.paths or []
    if "-" in paths:
        if len(paths) > 1:
            raise UsageError("`-` (read stdin) cannot be combined with other paths")
        return True
    return not paths and bool(getattr(args, "stdin_filename", None))


def build_options(args: argparse.Namespace) -> CheckOptions:
    cfg = config_from_args(args)
    options = CheckOptions(
        paths=args.paths or ["."],
        config=cfg,
        codes=frozenset(cfg.enabled_codes()),
        static_only=args.static_only or cfg.static_only,
        prefilter=args.prefilter,
        jobs=getattr(args, "jobs", None) or 1,
        ignore_noqa=getattr(args, "ignore_noqa", False),
    )
    options.project_root = find_project_root(cfg, options.paths)
    for module in plugins():
        configure = getattr(module, "configure_check", None)
        if configure is not None:
            configure(options, args)
    return options


def exit_code(report: Report, exit_zero: bool, config: Config | None = None) -> int:
    """1 for a finding at or above `fail-on` (info findings pass by default)
    or an analysis error; 0 otherwise, or with --exit-zero."""
    if exit_zero:
        return EXIT_OK
    fails = config.fails if config is not None else (lambda _severity: True)
    if any(fails(f.severity) for f in report.findings) or any(n.level is NoticeLevel.ERROR for n in report.notices):
        return EXIT_FINDINGS
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    if getattr(args, "watch", False):
        if reads_stdin(args) or args.show_settings or args.show_files or args.add_noqa:
            raise UsageError("--watch checks files again as they change: it cannot be combined with stdin, "
                             "--show-settings, --show-files or --add-noqa")
        from hooklint.cli.watch import watch

        return watch(args, run_once, build_options)
    return run_once(args)


def run_once(args: argparse.Namespace) -> int:
    stdin = reads_stdin(args)
    options = build_options(args)
    if args.show_settings:
        from hooklint.cli.settings import show_settings

        return show_settings(options, args)
    if args.show_files:
        from hooklint.cli.settings import show_files

        return show_files(options, args, stdin=stdin)
    if args.add_noqa and (getattr(args, "fix", False) or getattr(args, "diff", False) or stdin):
        raise UsageError("--add-noqa edits files in place: it cannot be combined with --fix, --diff or stdin")
    if stdin:
        from hooklint.cli.stdin import check_stdin

        return check_stdin(options, args)
    if args.add_noqa:
        from hooklint.cli.add_noqa import add_noqa

        return add_noqa(options, args)
    report = run_check(options)
    post = options.extra.get("post_check")  # e.g. --fix applies edits and re-checks
    if post is not None:
        result = post(report, options, args)
        if isinstance(result, int):
            return result
        report = result
    if getattr(args, "fix_only", False):
        return emit_fix_only(report, args)
    emit(report, options, args)
    code = exit_code(report, args.exit_zero, options.config)
    if code == EXIT_OK and report.fixed and getattr(args, "exit_non_zero_on_fix", False):
        return EXIT_FINDINGS
    return code


def emit_fix_only(report: Report, args: argparse.Namespace) -> int:
    """``--fix-only``: the fixes were applied; the findings that remain are not
    reported and do not fail the run (ruff's option).  Errors still do."""
    from hooklint.report.text import render_notices, use_color

    errors = frozenset({NoticeLevel.ERROR})
    quiet = getattr(args, "quiet", False)
    sys.stderr.write(render_notices(report, color=use_color(sys.stderr), levels=errors if quiet else None))
    if not quiet:
        n = report.fixed
        sys.stderr.write(f"Fixed {n} finding{'s' if n != 1 else ''}.\n" if n else "No fixes applied.\n")
    sys.stderr.flush()
    if args.exit_zero:
        return EXIT_OK
    if any(n.level is NoticeLevel.ERROR for n in report.notices):
        return EXIT_FINDINGS
    return EXIT_FINDINGS if report.fixed and getattr(args, "exit_non_zero_on_fix", False) else EXIT_OK


def emit(report: Report, options: CheckOptions, args: argparse.Namespace, sources=None) -> None:
    """Findings to stdout (or -o FILE); notices, then the summary, to stderr.

    ``-q`` keeps the findings and the errors (a file or model that could not be
    analysed) and drops the rest.  The summary is printed once: the rule table
    and closing line after ``full``, the closing line alone after
    ``concise``, ``-o FILE`` and ``--statistics`` (which is the table),
    nothing after the machine formats on stdout."""
    from hooklint.report import render, rule_catalog
    from hooklint.report.text import render_notices, statistics_table, summary_line, summary_table, use_color

    fmt = options.config.output_format
    quiet = getattr(args, "quiet", False)
    to_file = bool(getattr(args, "output_file", None))
    statistics = getattr(args, "statistics", False)
    if statistics:
        write_output(statistics_table(report), args.output_file)
    else:
        sources = sources if sources is not None else source_loader()
        text = render(report, fmt, sources=sources, catalog=rule_catalog() if fmt == "sarif" else {},
                      color=(not to_file) and use_color(sys.stdout))
        write_output(text, args.output_file)
    err_color = use_color(sys.stderr)
    notes = render_notices(report, color=err_color, levels=frozenset({NoticeLevel.ERROR}) if quiet else None)
    if notes:
        sys.stderr.write(notes)
    if not quiet:
        # after `--unsafe-fixes`, the unsafe fixes left were left for a reason (said above)
        unsafe_hint = not getattr(args, "unsafe_fixes", False)
        fail_on = options.config.fail_on
        if statistics:
            sys.stderr.write(summary_line(report, unsafe_hint=unsafe_hint, fail_on=fail_on) + "\n")
        elif fmt in ("full", "concise") or to_file:
            # the table by rule follows `full` on a terminal; `concise` and -o FILE get the closing line only
            sys.stderr.write(summary_table(report, unsafe_hint=unsafe_hint, table=fmt == "full" and not to_file,
                                           fail_on=fail_on))
    sys.stderr.flush()


def source_loader():
    from hooklint.report.sources import FileSources

    return FileSources()


def add_target_version_option(group) -> None:
    from hooklint.config import TARGET_VERSIONS

    group.add_argument("--target-version", choices=TARGET_VERSIONS, metavar="VERSION",
                       help="The Python version whose syntax is valid: py37 ... py314 (default: `target-version` "
                            "from the config, else the lower bound of `requires-python` in pyproject.toml).")


__all__ = ["add_parser", "run", "EXIT_ERROR"]
