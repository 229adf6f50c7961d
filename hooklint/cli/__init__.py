"""The ``hooklint`` command.

Exit codes (the same for every subcommand that checks code):

* 0: no findings (or all of them fixed), or ``--exit-zero``;
* 1: findings, or an analysis that could not complete for some file (an
  error line on stderr says which and why);
* 2: the request itself was wrong: unknown option or rule, missing path, bad
  configuration; or hooklint itself failed.  One line on stderr, no traceback
  (set ``HOOKLINT_DEBUG=1`` to see it).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from hooklint import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2

# name -> one-line help.  Only the subcommand being run is imported (its module
# pulls in its layer); the others are listed for --help from here.
SUBCOMMANDS = {
    "check": "Check files or folders for hook bugs.",
    "rule": "Explain a rule (or list them all).",
    "graph": "Show, per module of each model, the op its hooks bind to (needs torch).",
    "run": "Run a script under instrumentation and report the hook problems it had.",
    "report": "Write an HTML report of the findings.",
    "server": "Run the language server (LSP over stdio) for editors (needs the `server` extra).",
    "version": "Print hooklint's version.",
    "clean": "Remove the cache folders hooklint wrote (those holding its CACHEDIR.TAG).",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, as every linter does
        self.exit(EXIT_ERROR, f"hooklint: error: {message} (see `{self.prog} --help`)\n")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv``, only the subcommand it names is built in full."""
    parser = _Parser(prog="hooklint", description="Find PyTorch hook bugs before they cost a training run.")
    parser.add_argument("--version", action="version", version=f"hooklint {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    chosen = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    for name, help_text in SUBCOMMANDS.items():
        if chosen in SUBCOMMANDS and name != chosen:
            sub.add_parser(name, help=help_text)
            continue
        try:
            module = importlib.import_module(f"hooklint.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"hooklint.cli.{name}":
                continue  # a layer not present in this build
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")  # type: ignore[attr-defined]
        except (AttributeError, ValueError):
            pass
    argv = list(argv) if argv is not None else sys.argv[1:]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help(sys.stderr)
        return EXIT_ERROR
    if getattr(args, "color", None):
        from hooklint.report.text import set_color_choice

        set_color_choice(args.color)
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        print("hooklint: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (head, less) went away: not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115
        except OSError:
            pass
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001
        from hooklint.config import ConfigError
        from hooklint.engine import UsageError
        from hooklint.rules import UnknownRuleError

        if os.environ.get("HOOKLINT_DEBUG"):
            raise
        if isinstance(exc, (ConfigError, UsageError, UnknownRuleError)):
            print(f"hooklint: error: {exc}", file=sys.stderr)
        else:
            print(f"hooklint: internal error: {type(exc).__name__}: {exc} "
                  f"(HOOKLINT_DEBUG=1 shows the traceback; please report it)", file=sys.stderr)
        return EXIT_ERROR
