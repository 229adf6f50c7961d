"""Paths as CI services want them: relative to the repository root, with
forward slashes (GitHub resolves annotation and SARIF paths from there, not
from the folder hooklint ran in)."""

from __future__ import annotations

import os
from pathlib import Path


def repository_root(start: Path | None = None) -> Path:
    """The nearest folder at or above ``start`` holding ``.git`` (a folder, or a
    file in worktrees and submodules); ``start`` itself when there is none."""
    start = (start or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / ".git").exists():
            return folder
    return start


def repo_relative(path: str, root: Path) -> str | None:
    """``path`` relative to ``root`` in posix form, or None when it is outside."""
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return None
    except (OSError, RuntimeError):  # a symlink loop: where the link itself is
        try:
            return Path(os.path.abspath(path)).relative_to(root).as_posix()
        except ValueError:
            return None


def place(path: str, location, cell: int | None = None) -> str:
    """``path:row:col``, or ``path:cell N:row:col`` in a notebook (as ruff prints it)."""
    if cell is None:
        return f"{path}:{location.row}:{location.column}"
    return f"{path}:cell {cell}:{location.row}:{location.column}"
