"""The ``.hooklint_cache/`` folder shared by the graph facts and the static results.

Whoever writes into it first makes it a proper cache folder: a
``CACHEDIR.TAG`` (backup tools skip the folder) and a ``.gitignore``
containing ``*`` (never committed, whatever the project's own .gitignore
says).  Deleting the folder is always safe.
"""

from __future__ import annotations

from pathlib import Path

from hooklint.fsutil import atomic_write_text

CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by hooklint.\n"
    "# For information about cache directory tags see https://bford.info/cachedir/\n"
)


def prepare_cache_folder(folder: Path) -> None:
    """Create ``folder`` with its tag and .gitignore; raises OSError when it cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    tag = folder / "CACHEDIR.TAG"
    if not tag.exists():
        atomic_write_text(tag, CACHEDIR_TAG)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        atomic_write_text(ignore, "*\n")
