"""Text from the checked code, made safe to print on a terminal.

File names, hook and module names, and source lines come from the user's
tree, which may be hostile: a name with a newline forges a finding line of
its own in `concise` output, ANSI escape sequences recolour or erase the
terminal, and bidirectional controls make a code frame read otherwise than
Python reads it (CVE-2021-42574, "Trojan Source").  The text formats print
them escaped, as Python's ``repr`` would (``\\n``, ``\\x1b``, ``\\u202e``);
JSON, SARIF and JUnit escape them by their own rules."""

from __future__ import annotations

import re

# C0 controls but tab, DEL and C1 controls, and the Unicode bidirectional
# embeddings, overrides and isolates
_UNSAFE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code == 0x0A:
        return "\\n"
    if code == 0x0D:
        return "\\r"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_UNSAFE_BUT_NEWLINE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str, keep_newlines: bool = False) -> str:
    """``text`` with every control character written as an escape
    (``keep_newlines``: but line feeds, in a text of several lines whose
    format cannot be forged by them, such as a help text)."""
    if text.isprintable():
        return text
    pattern = _UNSAFE_BUT_NEWLINE if keep_newlines else _UNSAFE
    return pattern.sub(_escaped, text) if pattern.search(text) else text
