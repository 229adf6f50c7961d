"""hooklint's static rules as a flake8 plugin (``flake8.extension`` entry point ``HKL``).

The plugin runs exactly what ``hooklint check --static-only`` runs on a file,
:func:`hooklint.static.checker.check_text`, with the rules that the nearest
``[tool.hooklint]`` configuration enables (and its ``per-file-ignores``);
flake8's own ``--select``/``--ignore`` and ``# noqa`` then apply on top.
flake8 has no "report but pass" level (every code it prints fails it), so
the plugin reports the findings at or above hooklint's ``fail-on`` only
(default ``warning``: info findings such as HKL405 are left out; set
``fail-on = "info"`` to see them in flake8).
flake8 wants 0-based columns and prints them 1-based, so its output shows the
same line:column as hooklint's.  Like hooklint's static pass, the plugin never
imports torch.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from hooklint import __version__
from hooklint.config import ConfigError, load_config, resolve_codes
from hooklint.engine import rel_to_root
from hooklint.static.checker import check_text

_STDIN = ("stdin", "-", "")


@lru_cache(maxsize=256)
def _config_for(folder: str):
    """The hooklint configuration for files in ``folder``, or None when it is
    broken (flake8 has no channel for a config error: use the defaults)."""
    try:
        return load_config(None, start=Path(folder))
    except ConfigError:
        return None


def _fails_for(filename: str):
    """The configuration's ``fail-on`` test for findings of ``filename``."""
    folder = str(Path(filename).resolve().parent) if filename not in _STDIN else str(Path.cwd())
    cfg = _config_for(folder)
    if cfg is None:
        from hooklint.config import Config

        return Config().fails
    return cfg.fails


def _codes_for(filename: str) -> tuple[frozenset[str], frozenset[str]]:
    """(enabled codes, codes ignored for this file) from hooklint's configuration."""
    folder = str(Path(filename).resolve().parent) if filename not in _STDIN else str(Path.cwd())
    cfg = _config_for(folder)
    if cfg is None:
        return frozenset(resolve_codes(None, [], [])), frozenset()
    ignored = frozenset(cfg.ignored_for(rel_to_root(filename, cfg.root))) if cfg.per_file_ignores else frozenset()
    return frozenset(cfg.enabled_codes()), ignored


def _target_for(filename: str) -> tuple[int, int] | None:
    folder = str(Path(filename).resolve().parent) if filename not in _STDIN else str(Path.cwd())
    cfg = _config_for(folder)
    return cfg.target() if cfg is not None else None


class HooklintChecker:
    name = "hooklint"
    version = __version__

    def __init__(self, tree: ast.AST, filename: str, lines: list[str]):
        # flake8 has parsed the file already (``tree``), but check_text parses
        # the text itself so that flake8 and hooklint share one code path.
        self.filename = filename
        self.lines = lines

    def run(self) -> Iterator[tuple[int, int, str, type]]:
        codes, ignored = _codes_for(self.filename)
        text = "".join(self.lines)
        result = check_text(self.filename, text, codes, ignored=ignored, target=_target_for(self.filename))
        fails = _fails_for(self.filename)
        for f in sorted(result.findings, key=lambda f: f.sort_key()):
            if not fails(f.severity):
                continue
            yield f.location.row, f.location.column - 1, f"{f.code} {f.message}", type(self)
