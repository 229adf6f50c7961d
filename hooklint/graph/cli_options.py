"""``hooklint check`` options of the graph layer (``hooklint.cli.check`` loads this)."""

from __future__ import annotations

import argparse
import math


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:  # also refuses nan, which compares false with everything
        raise argparse.ArgumentTypeError("the timeout must be a positive, finite number of seconds")
    return value


def add_graph_options(group) -> None:
    group.add_argument("--timeout", type=positive_seconds, metavar="SECONDS",
                       help="Time allowed to import and analyse one model file (default: `timeout` from the "
                            "config, else 60).")
    group.add_argument("--sandbox", choices=("auto", "require", "off"),
                       help="The kernel sandbox of the processes that run model code (default: `sandbox` from the "
                            "config, else auto): `require` runs no model code without all of it, `off` runs it "
                            "without (docs/sandbox.md).")
    group.add_argument("--no-cache", action="store_true",
                       help="Ignore .hooklint_cache/ (graph facts and static results): nothing is read from "
                            "it or written to it.")
    group.add_argument("--progress", action="store_true",
                       help="Show which file the graph layer is importing, also when stderr is not a terminal "
                            "(a terminal shows it anyway; never with a machine output format or -q).")


def add_check_options(parser: argparse.ArgumentParser) -> None:
    add_graph_options(parser.add_argument_group("graph analysis (imports nn.Module classes; needs torch)"))


def graph_rules_enabled(codes) -> bool:
    """Whether any enabled rule reads graph facts: otherwise no model is imported."""
    from hooklint.findings import Origin
    from hooklint.rules import rule_entries

    return any(Origin.GRAPH.value in rule.origins for rule in rule_entries() if rule.code in codes)


def configure_check(options, args: argparse.Namespace) -> None:
    if args.timeout is not None:
        options.config.timeout = args.timeout
    if args.sandbox is not None:
        options.config.sandbox = args.sandbox
    if not graph_rules_enabled(options.codes):
        return
    options.graph_provider = make_provider(args, use_cache=not args.no_cache)


# What the first stderr line of a run that imports the user's code says.
IMPORT_NOTICE = ("hooklint: importing {what} to trace its models with torch (definitions only, in a subprocess "
                 "with a time limit; the `__main__` block never runs); `--static-only` or `static-only = true` "
                 "in [tool.hooklint] turns this off")


def make_provider(args: argparse.Namespace, use_cache: bool):
    """The graph provider of a `check` (or `report`) run: it says, once and
    first, that the user's code is about to be imported (not with -q), and
    shows progress while files are imported (a terminal or --progress; never
    with a machine output format)."""
    import sys

    quiet = getattr(args, "quiet", False)
    forced = getattr(args, "progress", False)
    said: list[bool] = []

    def announce(files: list[str]) -> None:
        if quiet or said:
            return
        said.append(True)
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        what = f"your code ({shown})" if files else "your model factories (`models`)"
        sys.stderr.write(IMPORT_NOTICE.format(what=what) + "\n")
        sys.stderr.flush()

    def provider(files, config):
        from hooklint.graph.provider import provide_graph_facts

        progress = None
        if not quiet and config.output_format in ("full", "concise"):
            progress = _progress_writer(sys.stderr, forced)
        return provide_graph_facts(files, config, use_cache=use_cache, announce=announce, progress=progress)

    return provider


def _progress_writer(stream, forced: bool):
    """``progress(done, total, path)``: one line rewritten in place on a
    terminal; with --progress elsewhere, a line per file."""
    tty = hasattr(stream, "isatty") and stream.isatty()
    if not tty and not forced:
        return None

    def progress(done: int, total: int, path: str) -> None:
        if tty:
            text = f"\r\x1b[Khooklint: graph {done + 1}/{total}: importing {path}" if path else "\r\x1b[K"
        elif path:
            text = f"hooklint: graph {done + 1}/{total}: importing {path}\n"
        else:
            return
        stream.write(text)
        stream.flush()

    return progress
