"""``hooklint server``: the static rules in an editor, over the Language Server
Protocol (stdio).

The layers: :mod:`hooklint.lsp.text` holds buffers and converts positions
(LSP lines and UTF-16 units <-> hooklint's 1-based rows and code-point
columns), :mod:`hooklint.lsp.analysis` runs the static pass on a buffer and
computes fixes and ``noqa`` edits in hooklint's own terms (no LSP types), and
:mod:`hooklint.lsp.server` speaks the protocol (pygls, the ``server`` extra).
Only the last needs pygls; none imports torch or runs the checked code.
"""

INSTALL_HINT = "pip install 'hooklint[server]'"
