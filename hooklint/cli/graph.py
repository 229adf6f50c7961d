"""``hooklint graph [PATHS]``: which autograd op each module's hooks bind to."""

from __future__ import annotations

import argparse
import os
import sys

from hooklint.cli import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, SUBCOMMANDS


def add_parser(sub) -> None:
    from hooklint.cli.options import add_file_options
    from hooklint.graph.cli_options import add_graph_options

    p = sub.add_parser(
        "graph",
        help=SUBCOMMANDS["graph"],
        description="Import the nn.Module classes of the given files (definitions only, in a subprocess with a "
        "timeout), build them, trace them with torch.fx, and print per module: its number of autograd ops, the "
        "op a legacy backward hook binds to, whether that hook's grad_input starts with the module's input "
        "gradients, and whether a full backward hook fires before its parameters' gradients accumulate.",
    )
    p.add_argument("paths", nargs="*", default=None, metavar="PATH", help="Files or folders (default: .).")
    add_file_options(p)
    g = p.add_argument_group("graph analysis")
    add_graph_options(g)
    g.add_argument("--model", action="append", default=[], metavar="MODULE:FUNCTION",
                   help="A factory returning a model, or (model, example_inputs), to analyse as well "
                        "(added to `models` from the config; repeatable).")
    o = p.add_argument_group("output")
    o.add_argument("--output-format", choices=("table", "json"), default="table",
                   help="A table per model (default), or JSON with the same data and the notices.")
    o.add_argument("-o", "--output-file", metavar="FILE", help="Write to FILE instead of stdout.")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from hooklint.cli.options import config_from_args, write_output
    from hooklint.engine import CheckOptions, discover, display_path
    from hooklint.findings import Notice, NoticeLevel, Report
    from hooklint.graph.provider import INSTALL_HINT, GraphRun, provide_graph_facts, torch_version
    from hooklint.graph.render import render_json, render_table
    from hooklint.report.text import render_notices, use_color

    output_format = args.output_format
    args.output_format = None  # the check formats of the config do not apply here
    config = config_from_args(args)
    if args.timeout is not None:
        config.timeout = args.timeout
    if args.sandbox is not None:
        config.sandbox = args.sandbox
    config.models = list(config.models) + list(args.model)
    version = torch_version()
    if version is None:
        print(f"hooklint: error: `hooklint graph` needs torch ({INSTALL_HINT})", file=sys.stderr)
        return EXIT_ERROR
    from hooklint.static.checker import read_checkable
    from hooklint.static.notebook import is_notebook
    from hooklint.static.source import SourceError

    files = discover(CheckOptions(paths=args.paths or ["."], config=config, codes=frozenset()))
    run_info = GraphRun()
    facts, notices = provide_graph_facts(files, config, use_cache=not args.no_cache, run=run_info)
    for path in run_info.not_candidates:
        if args.paths and path in args.paths and not (path in facts and facts[path].linked):
            notices.append(Notice(display_path(path), "nothing to analyse: it defines no nn.Module class and "
                                  "registers no module hook on a layer it builds", NoticeLevel.INFO))
    ordered = [facts[path] for path in files if path in facts]
    # a notebook's lines count in its joined code cells: shown as cells and lines in them
    notebooks, real_paths = {}, {}
    for path in files:
        if path in facts and is_notebook(path):
            try:
                notebooks[facts[path].path] = read_checkable(path)[1]
                real_paths[facts[path].path] = os.path.realpath(path)
            except SourceError:
                pass
    if output_format == "json":
        text = render_json(ordered, run_info.factories, notices, version, notebooks, real_paths)
    else:
        text = render_table(ordered, run_info.factories, notebooks)
    write_output(text, args.output_file)
    notes = render_notices(Report(notices=notices), color=use_color(sys.stderr))
    if notes and (output_format != "json" or args.output_file):
        sys.stderr.write(notes)
    if not ordered and not run_info.factories and output_format != "json":
        sys.stderr.write("hooklint: no model to analyse in the given paths\n")
    return EXIT_FINDINGS if any(n.level is NoticeLevel.ERROR for n in notices) else EXIT_OK
