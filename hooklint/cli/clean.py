"""``hooklint clean [PATH ...]``: remove the cache folders hooklint wrote.

A folder is removed only when it holds the ``CACHEDIR.TAG`` that hooklint
writes (:mod:`hooklint.cachedir`): the configured ``cache-dir`` and any such
folder under the given paths (default: the working folder).  A folder named
like a cache but without hooklint's tag is left alone and named on stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from hooklint.cachedir import CACHEDIR_TAG
from hooklint.cli import EXIT_ERROR, EXIT_OK, SUBCOMMANDS

# Folders never searched for caches: other tools' environments and histories.
_SKIPPED = frozenset({".git", ".hg", ".svn", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".nox",
                      "site-packages", ".mypy_cache", ".ruff_cache", ".pytest_cache"})


def add_parser(sub) -> None:
    p = sub.add_parser("clean", help=SUBCOMMANDS["clean"],
                       description="Remove hooklint's cache folders (static results and graph facts): the "
                       "configured `cache-dir` and every folder under PATH that holds hooklint's CACHEDIR.TAG. "
                       "Nothing else is removed.")
    p.add_argument("paths", nargs="*", metavar="PATH", help="Where to look (default: .).")
    p.add_argument("--config", action="append", metavar="FILE | KEY=VALUE",
                   help="The configuration whose `cache-dir` to remove (default: the nearest).")
    p.add_argument("--isolated", action="store_true", help="Ignore all configuration files.")
    p.add_argument("-q", "--quiet", action="store_true", help="Print nothing but errors.")
    p.set_defaults(handler=run)


def owned(folder: Path) -> bool:
    """Is ``folder`` a cache hooklint wrote (its tag, byte for byte)?"""
    try:
        return (folder / "CACHEDIR.TAG").read_text(encoding="utf-8") == CACHEDIR_TAG
    except (OSError, UnicodeDecodeError):
        return False


def find_caches(top: Path) -> list[Path]:
    """hooklint's cache folders at or under ``top`` (not followed into symlinks)."""
    found: list[Path] = []
    if owned(top):
        return [top]
    for folder, dirs, _files in os.walk(top):
        keep = []
        for name in sorted(dirs):
            path = Path(folder) / name
            if path.is_symlink() or name in _SKIPPED:
                continue
            if owned(path):
                found.append(path)
            else:
                keep.append(name)
        dirs[:] = keep
    return found


def run(args: argparse.Namespace) -> int:
    from hooklint.cli.options import config_from_args
    from hooklint.engine import display_path

    config = config_from_args(argparse.Namespace(**{**vars(args), "paths": args.paths or []}))
    configured = Path(config.cache_dir)
    if not configured.is_absolute():
        configured = config.root / configured
    candidates: list[Path] = []
    if configured.is_dir():
        candidates.append(configured)
    for raw in args.paths or ["."]:
        top = Path(raw)
        if not top.is_dir():
            print(f"hooklint: error: {raw}: not a folder", file=sys.stderr)
            return EXIT_ERROR
        candidates += find_caches(top)
    removed, kept, failed = [], [], []
    seen: set[str] = set()
    for folder in candidates:
        key = os.path.realpath(folder)
        if key in seen:
            continue
        seen.add(key)
        if not owned(folder):
            kept.append(folder)
            continue
        try:
            shutil.rmtree(folder)
        except OSError as exc:
            failed.append(f"{folder}: {exc.strerror or exc}")
            continue
        removed.append(folder)
    for folder in kept:
        print(f"hooklint: warning: {display_path(str(folder))}: not removed: it has no CACHEDIR.TAG written by hooklint",
              file=sys.stderr)
    for line in failed:
        print(f"hooklint: error: cannot remove {line}", file=sys.stderr)
    if not args.quiet:
        for folder in removed:
            print(f"Removed {display_path(str(folder))}")
        if not removed:
            print("No hooklint cache to remove.", file=sys.stderr)
    return EXIT_ERROR if failed else EXIT_OK
