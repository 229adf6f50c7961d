"""``hooklint report [PATHS] -o report.html``: the check, as one self-contained HTML page.

It runs what ``hooklint check`` runs (the same options, the graph layer
unless ``--static-only``) and keeps the graph facts the check used, so that a
legacy backward hook's finding can show the hooked module's forward ops with
the op the hook binds to highlighted.  Exit codes are those of ``check``.
"""

from __future__ import annotations

import argparse
import ast
import sys
import warnings
from typing import Any

from hooklint.cli import SUBCOMMANDS
from hooklint.cli import check as check_cli
from hooklint.cli.options import add_fail_on_option, add_file_options, add_selection_options, write_output
from hooklint.engine import CheckOptions, display_path, run_check
from hooklint.findings import Finding, Report
from hooklint.report.svg import ForwardPicture, PictureOp

MAX_PICTURES_PER_FINDING = 2


def add_parser(sub) -> None:
    p = sub.add_parser(
        "report",
        help=SUBCOMMANDS["report"],
        description="Check files like `hooklint check` and write one self-contained HTML page (no network, "
        "no external assets): a summary by rule and file, every finding with its code, explanation and fix, "
        "and, where the graph layer ran, the hooked module's forward ops.",
    )
    p.add_argument("paths", nargs="*", default=None, metavar="PATH", help="Files or folders (default: .).")
    p.add_argument("-o", "--output-file", metavar="FILE", default="hooklint-report.html",
                   help="Where to write the page (default: hooklint-report.html).")
    p.add_argument("--title", default="hooklint report", help="The page's title.")
    add_selection_options(p)
    add_file_options(p)
    g = p.add_argument_group("behaviour")
    g.add_argument("--static-only", action="store_true",
                   help="Never import or run the checked code (no graph analysis, no forward pictures).")
    g.add_argument("--no-prefilter", dest="prefilter", action="store_false",
                   help="Parse every file, even those whose text cannot hold a finding.")
    g.add_argument("--exit-zero", action="store_true", help="Exit 0 even when there are findings.")
    add_fail_on_option(g)
    g.add_argument("-q", "--quiet", action="store_true", help="Print nothing but errors.")
    check_cli.add_target_version_option(g)
    # The layers that add options to `check` (graph analysis, parallelism), but
    # not fixes: a report changes no file.
    for module in _layers():
        add = getattr(module, "add_check_options", None)
        if add is not None:
            add(p)
    p.set_defaults(handler=run, output_format=None)


def _layers():
    return [m for m in check_cli.plugins() if m.__name__ != "hooklint.fix.cli_options"]


def run(args: argparse.Namespace) -> int:
    from hooklint.report import rule_catalog
    from hooklint.report.html import render_html

    options = check_cli.build_options(args)
    facts = _capture_graph_facts(options)
    report = run_check(options)
    sources = check_cli.source_loader()
    pictures = forward_pictures(report, facts, sources)
    page = render_html(report, sources=sources, catalog=rule_catalog(), pictures=pictures, title=args.title)
    write_output(page, args.output_file)
    from hooklint.findings import NoticeLevel
    from hooklint.report.text import render_notices, use_color

    # -q keeps the errors: a report of an analysis that failed must not look clean
    sys.stderr.write(render_notices(report, color=use_color(sys.stderr),
                                    levels=frozenset({NoticeLevel.ERROR}) if args.quiet else None))
    if not args.quiet:
        files = len({f.path for f in report.findings})
        sys.stderr.write(f"Wrote {args.output_file}: {len(report.findings)} finding"
                         f"{'s' if len(report.findings) != 1 else ''} in {files} file{'s' if files != 1 else ''} "
                         f"({report.files_checked} checked).\n")
    return check_cli.exit_code(report, args.exit_zero, options.config)


def _capture_graph_facts(options: CheckOptions) -> dict[str, Any]:
    """Keep what the graph provider returns (per display path) for the pictures."""
    captured: dict[str, Any] = {}
    provider = options.graph_provider
    if provider is None or options.static_only:
        return captured

    def capturing(files, config):
        facts, notices = provider(files, config)
        captured.update({display_path(path): value for path, value in facts.items()})
        return facts, notices

    options.graph_provider = capturing
    return captured


def forward_pictures(report: Report, facts_by_path: dict[str, Any], sources) -> dict[Finding, list[ForwardPicture]]:
    """For each finding at a legacy ``register_backward_hook`` call whose module
    the graph layer analysed: that module's forward ops, the bound op marked.

    ``facts_by_path`` maps a finding's path to the graph layer's ``FileFacts``."""
    out: dict[Finding, list[ForwardPicture]] = {}
    targets_cache: dict[str, list[tuple[int, int, str, int | None]]] = {}
    for f in report.findings:
        facts = facts_by_path.get(f.path)
        text = sources(f.path)
        if facts is None or text is None:
            continue
        if f.path not in targets_cache:
            targets_cache[f.path] = _legacy_hook_targets(f.path, text)
        for first, last, class_name, call_line in targets_cache[f.path]:
            if first <= f.location.row <= last:
                pics = _pictures_for(facts, class_name, call_line)
                if pics:
                    out[f] = pics
                break
    return out


def _legacy_hook_targets(path: str, text: str) -> list[tuple[int, int, str, int | None]]:
    """(first row, last row, hooked module class, constructor line) of each legacy
    backward hook registration in the file whose module class is known."""
    from hooklint.static.context import FileContext
    from hooklint.static.hooks import HookKind

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    ctx = FileContext(path, text, tree)
    out = []
    for reg in ctx.hooks.by_kind(HookKind.BACKWARD_LEGACY):
        module = reg.receiver_module
        if module is None or module.class_name is None:
            continue
        call_line = module.call.lineno if module.call is not None else None
        out.append((reg.call.lineno, reg.call.end_lineno or reg.call.lineno, module.class_name, call_line))
    return out


def _pictures_for(facts: Any, class_name: str, call_line: int | None) -> list[ForwardPicture]:
    occurrences = facts.occurrences(class_name)
    # the instance built by the very constructor call the hook's receiver comes from, when known
    exact = [(model, module) for model, module in occurrences
             if call_line is not None and model.call_line == call_line and module.path == ""]
    chosen = exact or occurrences
    return [_picture(model, module) for model, module in chosen[:MAX_PICTURES_PER_FINDING] if module.ops]


def _picture(model: Any, module: Any) -> ForwardPicture:
    ops = list(module.ops)
    bound = None
    caption = model.describe_method()
    if module.bound is not None:
        if module.bound in ops:
            bound = ops.index(module.bound)
        else:  # the hook lands on an op before the module (a forward that returns its input)
            ops.append(module.bound)
            bound = len(ops) - 1
            caption += "; the hook lands on an op this module did not run"
    where = f"`{module.path}` in " if module.path else ""
    return ForwardPicture(
        title=f"{module.class_name}: {where}model {model.label}, {len(module.ops)} ops in forward",
        ops=tuple(PictureOp(op.short, op.module, _detail(op)) for op in ops),
        bound=bound,
        caption=caption,
    )


def _detail(op: Any) -> str:
    parts = [op.name]
    if op.line is not None:
        parts.append(op.where())
    if op.code:
        parts.append(op.code)
    return " \u00b7 ".join(parts)
