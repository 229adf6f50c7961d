"""``hooklint version``: the same line as ``hooklint --version``."""

from __future__ import annotations

import argparse
import sys

from hooklint import __version__
from hooklint.cli import EXIT_OK, SUBCOMMANDS


def add_parser(sub) -> None:
    p = sub.add_parser("version", help=SUBCOMMANDS["version"], description=SUBCOMMANDS["version"])
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(f"hooklint {__version__}\n")
    return EXIT_OK
