"""Module names as Python resolves them from the project's roots.

``import a.b.c`` finds ``a/b/c.py`` under any folder on ``sys.path``,
whether or not ``a`` and ``a/b`` hold an ``__init__.py`` (namespace
packages).  A file's *package name* (its folders up to the first one without
``__init__.py``, :func:`hooklint.static.callgraph.module_name`) is one of
the names it can be imported as; the others come from the roots a run puts
on the path: the folder checked, its ``src/`` when there is one, the
configured ``pythonpath`` folders, and the folder of each checked path.  A
script's own imports (``from helpers import x`` next to ``run.py``) resolve
from its folder, which its package name already covers.
"""

from __future__ import annotations

import os
from typing import Iterable


def project_roots(root: str, checked: Iterable[str] = (), pythonpath: Iterable[str] = ()) -> list[str]:
    """The folders imports are resolved from, most specific first."""
    found: list[str] = []

    def add(folder: str) -> None:
        folder = os.path.abspath(folder)
        if os.path.isdir(folder) and folder not in found:
            found.append(folder)

    for entry in pythonpath:
        add(os.path.join(root, entry))
    add(os.path.join(root, "src"))
    for path in checked:
        full = os.path.abspath(path)
        if os.path.isdir(full):  # a folder checked as a whole (a file's own folder: its package name covers it)
            add(full)
            if os.path.isdir(os.path.join(full, "src")):
                add(os.path.join(full, "src"))
    add(root)
    found.sort(key=lambda f: -len(f))  # the deepest root names a file the way its package does
    return found


def names_from_roots(path: str, roots: Iterable[str]) -> list[str]:
    """The dotted names ``path`` can be imported as from ``roots`` (each
    folder and the file's stem must be identifiers; ``__init__.py`` names its
    folder)."""
    full = os.path.abspath(path)
    out: list[str] = []
    for root in roots:
        try:
            rel = os.path.relpath(full, root)
        except ValueError:  # another drive
            continue
        if rel.startswith(os.pardir):
            continue
        parts = rel.split(os.sep)
        stem = parts[-1].split(".", 1)[0]
        parts = parts[:-1] + ([] if stem == "__init__" else [stem])
        if parts and all(p.isidentifier() for p in parts):
            name = ".".join(parts)
            if name not in out:
                out.append(name)
    return out
