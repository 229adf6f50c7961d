"""``hooklint server``: the language server (LSP over stdio) for editors.

It needs pygls (``pip install 'hooklint[server]'``); without it, one line on
stderr and exit 2, as for any command whose layer is not installed.
"""

from __future__ import annotations

import argparse
import sys

from hooklint.cli import EXIT_ERROR, SUBCOMMANDS


def add_parser(sub) -> None:
    p = sub.add_parser(
        "server",
        help=SUBCOMMANDS["server"],
        description="Run hooklint's language server over stdio: diagnostics from the static rules as you type, "
        "fixes and `noqa` comments as code actions, rule documentation on hover. Started by the editor; "
        "see docs/editors.md.",
    )
    p.add_argument("--stdio", action="store_true",
                   help="Talk over stdin/stdout (the default and only transport; accepted because some "
                        "editors pass it).")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        import lsprotocol  # noqa: F401
        import pygls  # noqa: F401
    except ImportError:
        from hooklint.lsp import INSTALL_HINT

        print(f"hooklint: error: `hooklint server` needs pygls, which is not installed ({INSTALL_HINT})",
              file=sys.stderr)
        return EXIT_ERROR
    from hooklint.lsp.server import serve

    return serve()
