"""What the language server asks of hooklint, in hooklint's own terms: the
configuration that applies to a buffer, the static pass on its text, the
fixes and ``noqa`` comments it can offer.  No LSP types here (see
:mod:`hooklint.lsp.server`), no torch, no user code run.

A Python buffer is checked as ``hooklint check - --stdin-filename PATH``
checks stdin (:func:`hooklint.static.checker.check_text` on the text, with
the configuration, ``per-file-ignores`` and ``target-version`` found from
PATH), so the findings are those of ``hooklint check --static-only PATH`` on
the same text.  Graph facts come from ``.hooklint_cache/`` only, when the
buffer holds the bytes they were computed for; the worker that imports
models is never started from here.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from hooklint.config import Config, ConfigError, load_config, validate_selectors, validate_target_version
from hooklint.engine import CheckOptions, display_path, ignored_codes
from hooklint.findings import Applicability, Finding, Notice
from hooklint.static.checker import FileResult, check_text
from hooklint.static.notebook import Notebook, read_notebook
from hooklint.static.source import LINE_BREAK

DEFAULT_DEBOUNCE_MS = 50
MAX_DEBOUNCE_MS = 5000

# Findings a `noqa` comment cannot silence (hooklint check --add-noqa leaves them too).
NOT_SILENCEABLE = frozenset({"HKL001", "HKL002"})

SAFE_ONLY = frozenset({Applicability.SAFE})
SAFE_AND_UNSAFE = frozenset({Applicability.SAFE, Applicability.UNSAFE})


# ---------------------------------------------------------------- settings


@dataclass(frozen=True)
class Settings:
    """The editor's settings (initializationOptions, workspace/configuration):
    like command-line flags, they win over ``[tool.hooklint]``."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    target_version: str | None = None
    configuration: str | None = None  # a configuration file, as --config
    debounce_ms: int = DEFAULT_DEBOUNCE_MS
    graph_facts: bool = True  # use graph facts cached by `hooklint check` for unchanged files


_SETTING_NAMES = {
    "select": "select", "extend-select": "extend_select", "extendselect": "extend_select",
    "ignore": "ignore", "target-version": "target_version", "targetversion": "target_version",
    "configuration": "configuration", "config": "configuration", "debounce": "debounce_ms",
    "graph-facts": "graph_facts", "graphfacts": "graph_facts",
}


def parse_settings(raw: Any) -> tuple[Settings, list[str]]:
    """Settings from the client's JSON (``{"settings": {...}}`` or the keys
    themselves; kebab-case or camelCase), and a message per value that was
    not understood (that value is left at its default)."""
    if isinstance(raw, dict) and isinstance(raw.get("settings"), dict):
        raw = raw["settings"]
    if raw is None:
        return Settings(), []
    if not isinstance(raw, dict):
        return Settings(), ["hooklint settings must be an object of keys (select, ignore, ...)"]
    values: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in raw.items():
        name = _SETTING_NAMES.get(str(key).replace("_", "-").lower()) or _SETTING_NAMES.get(str(key).lower())
        if name is None:
            problems.append(f"unknown hooklint setting `{key}` (known: select, extend-select, ignore, "
                            "target-version, configuration, debounce, graph-facts)")
            continue
        if value is None:
            continue
        try:
            values[name] = _setting_value(name, key, value)
        except ConfigError as exc:
            problems.append(str(exc))
    return Settings(**values), problems


def _setting_value(name: str, key: str, value: Any) -> Any:
    where = f"setting `{key}`"
    if name in ("select", "extend_select", "ignore"):
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise ConfigError(f"{where} must be a list of rule codes, prefixes or names")
        validate_selectors(items, where)
        return tuple(items)
    if name == "target_version":
        return validate_target_version(value, where)
    if name == "configuration":
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where} must be the path of a configuration file")
        return value
    if name == "debounce_ms":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_DEBOUNCE_MS:
            raise ConfigError(f"{where} must be a number of milliseconds from 0 to {MAX_DEBOUNCE_MS}")
        return int(value)
    if not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false")
    return value


# ---------------------------------------------------------------- configuration of one buffer


@dataclass(frozen=True)
class Setup:
    """How one buffer is checked."""

    path: str | None  # the file the buffer stands for (None: an untitled buffer)
    display: str  # as findings name it
    config: Config
    codes: frozenset[str]
    ignored: frozenset[str]
    excluded: bool  # --force-exclude in the configuration, and the file is excluded
    problem: str | None = None  # a configuration that could not be read (the defaults apply)

    @property
    def target(self) -> tuple[int, int] | None:
        return self.config.target()


def setup_for(path: str | None, settings: Settings, root: Path) -> Setup:
    """The configuration the CLI would use for ``path`` (the nearest
    ``pyproject.toml`` or ``hooklint.toml`` above it), with the editor's
    settings applied over it.  Read again on every check: a saved
    ``pyproject.toml`` applies at once (parsed files are cached by size and
    modification time, so this costs a few ``stat`` calls)."""
    start = Path(path).parent if path else root
    if not start.is_dir():
        start = root
    explicit = settings.configuration
    if explicit is not None and not os.path.isabs(explicit):
        explicit = str(root / explicit)
    problem = None
    try:
        config = load_config(explicit, start=start)
    except ConfigError as exc:
        problem = f"{exc}; hooklint uses its default settings until it is fixed"
        config = Config(root=start.resolve())
    if settings.select is not None:
        config.select = list(settings.select)
    if settings.extend_select:
        config.extend_select = config.extend_select + list(settings.extend_select)
    if settings.ignore:
        config.ignore = config.ignore + list(settings.ignore)
    if settings.target_version:
        config.target_version = settings.target_version
        config.target_version_origin = "the editor's settings"
    codes = frozenset(config.enabled_codes())
    display = display_path(path) if path else "untitled"
    if path is None:
        return Setup(None, display, config, codes, frozenset(), False, problem)
    options = CheckOptions(paths=[path], config=config, codes=codes, static_only=True)
    return Setup(path, display, config, codes, ignored_codes(path, options), _excluded(path, config), problem)


def _excluded(path: str, config: Config) -> bool:
    """Excludes apply to a named file only with ``force-exclude``, as for stdin."""
    if not config.force_exclude:
        return False
    from hooklint.files import Walker

    return Walker(config.root, config.excludes(), config.respect_gitignore, force_exclude=True) \
        .excludes_file(Path(path))


# ---------------------------------------------------------------- checking


@lru_cache(maxsize=1)
def _torch_version() -> str | None:
    """torch's version, looked up once (2 ms a time: not on every keystroke)."""
    try:
        from hooklint.graph.provider import torch_version
    except ImportError:  # a build without the graph layer
        return None
    return torch_version()


def cached_graph_facts(setup: Setup, text: str) -> Any:
    """The graph facts ``hooklint check`` cached for this file with exactly
    this content, or None.  Never imports torch nor the user's code."""
    version = _torch_version() if setup.path is not None else None
    if version is None:
        return None
    from hooklint.graph.provider import cached_facts_for_text

    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: not the bytes of any file
        return None
    return cached_facts_for_text(setup.path, data, setup.config, version)


def check_python(setup: Setup, text: str, *, graph: Any = None) -> FileResult:
    """The static pass on a Python buffer."""
    if setup.excluded:
        return FileResult(setup.display)
    return check_text(setup.path or setup.display, text, setup.codes, display_path=setup.display,
                      ignored=setup.ignored, graph=graph, target=setup.target, on_disk=False)


@dataclass(frozen=True)
class Cell:
    """One cell of a notebook as the client syncs it."""

    python: bool  # a code cell in Python (markdown and other languages are not checked)
    text: str


def notebook_from_cells(cells: list[Cell], metadata: Any = None) -> Notebook:
    """The notebook the cells make, as :func:`read_notebook` would read its
    file: cells numbered 1.. in the client's order, markdown included."""
    data = {
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c.text}
                  if c.python else {"cell_type": "markdown", "metadata": {}, "source": c.text} for c in cells],
        "metadata": _kernel_metadata(metadata),
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return read_notebook(json.dumps(data))


def _kernel_metadata(metadata: Any) -> dict[str, Any]:
    """The parts of the client's notebook metadata that say the kernel's language."""
    if not isinstance(metadata, dict):
        return {}
    custom = metadata.get("custom")
    inner = custom.get("metadata") if isinstance(custom, dict) else None
    out = {}
    for source in (inner, metadata):
        if isinstance(source, dict):
            for key in ("kernelspec", "language_info"):
                if isinstance(source.get(key), dict):
                    out.setdefault(key, source[key])
    return out


def check_notebook(setup: Setup, notebook: Notebook) -> FileResult:
    """The static pass on a notebook's code cells: findings placed in cells."""
    if setup.excluded:
        return FileResult(setup.display)
    return check_text(setup.path or setup.display, notebook.text, setup.codes, display_path=setup.display,
                      ignored=setup.ignored, target=setup.target, notebook=notebook, on_disk=False)


def recheck_python(setup: Setup) -> Callable[[str], list[Finding]]:
    """A new text's findings, for fix rounds (as --fix: graph facts are not
    recomputed between rounds)."""
    return lambda text: check_python(setup, text).findings


# ---------------------------------------------------------------- fixes


def newline_of(text: str) -> str:
    match = LINE_BREAK.search(text)
    return match.group() if match else "\n"


def with_newline(content: str, newline: str) -> str:
    """Rules write ``\\n``; a CRLF buffer must stay CRLF (as --fix keeps it)."""
    return content if newline == "\n" else LINE_BREAK.sub(lambda _m: newline, content)


def fix_applies(text: str, finding: Finding) -> bool:
    """Whether the finding's fix can be offered on this text: it has edits, it
    is safe or unsafe (not display-only), its edits fit the text and the fixed
    text still parses."""
    from hooklint.fix.apply import applicable, parse_error, preview

    if not applicable(finding, SAFE_AND_UNSAFE):
        return False
    fixed = preview(text, finding)
    return fixed is not None and parse_error(fixed) is None


def fix_all_python(setup: Setup, text: str, findings: list[Finding]) -> str | None:
    """The text with every safe fix applied (in rounds, as --fix), or None."""
    from hooklint.fix.apply import fix_text

    outcome = fix_text(text, findings, allowed=SAFE_ONLY, recheck=recheck_python(setup))
    return outcome.text if outcome.changed else None


def noqa_line(text: str, row: int, code: str) -> tuple[str, str] | None:
    """(line before, line after) of adding ``# noqa: CODE`` to ``row`` (merged
    into a noqa comment already there), or None where it cannot go (inside a
    multi-line string, after a backslash) or the line is already silenced."""
    from hooklint.lsp.text import LineIndex
    from hooklint.static.noqa import add_noqa_comments

    new_text, added, _impossible = add_noqa_comments(text, {row: {code}})
    if not added:
        return None
    return LineIndex(text).line(row - 1), LineIndex(new_text).line(row - 1)


@dataclass
class NotebookFixes:
    """Fixes on a notebook: computed on its Python text, offered per cell."""

    setup: Setup
    notebook: Notebook
    _file: Any = field(default=None, repr=False)

    @property
    def file(self):
        if self._file is None:
            from hooklint.fix.files import NotebookFile

            self._file = NotebookFile(self.setup.path or self.setup.display, self.notebook, "utf-8")
        return self._file

    def _recheck(self, text: str) -> list[Finding]:
        return check_text(self.setup.path or self.setup.display, text, self.setup.codes,
                          display_path=self.setup.display, ignored=self.setup.ignored, target=self.setup.target,
                          on_disk=False).findings

    def fix_applies(self, finding: Finding) -> bool:
        from hooklint.fix.apply import applicable, parse_error, preview

        if not applicable(finding, SAFE_AND_UNSAFE):
            return False
        moved = self.file.in_text([finding])
        if not moved:
            return False
        fixed = preview(self.notebook.text, moved[0])
        if fixed is None or parse_error(fixed) is not None:
            return False
        try:
            self.notebook.split(fixed)  # a fix that changes an IPython line cannot be written back
        except ValueError:
            return False
        return True

    def fix_all(self, findings: list[Finding]) -> dict[int, str] | None:
        """Cell number -> new source, with every safe fix applied; None if nothing changes."""
        from hooklint.fix.apply import fix_text

        outcome = fix_text(self.notebook.text, self.file.in_text(findings), allowed=SAFE_ONLY,
                           recheck=self.file.recheck(self._recheck))
        if not outcome.changed:
            return None
        try:
            return self.notebook.split(outcome.text) or None
        except ValueError:
            return None

    def noqa_line(self, cell: int, row: int, code: str) -> tuple[str, str] | None:
        located = self.notebook.to_text(cell, row, 1)
        if located is None:
            return None
        found = noqa_line(self.notebook.text, located[0], code)
        if found is None or _MASKED.search(found[0]):
            return None
        return found


_MASKED = re.compile(r"# hooklint: ipython \d+$")


# ---------------------------------------------------------------- notices


def notice_lines(notices: list[Notice]) -> list[str]:
    """Notices as log lines, said once each (``once_key``), sorted."""
    seen: set[str] = set()
    out = []
    for notice in sorted(notices, key=lambda n: (n.path, n.message)):
        if notice.once_key:
            if notice.once_key in seen:
                continue
            seen.add(notice.once_key)
        out.append(f"hooklint: {notice.level.value}: {notice.path}: {notice.message}")
    return out


def rule_docs(code: str) -> str | None:
    """The text of ``hooklint rule CODE``, or None for an unknown code."""
    from hooklint.docs import render_rule_markdown
    from hooklint.rules import UnknownRuleError, get_rule

    try:
        return render_rule_markdown(get_rule(code))
    except UnknownRuleError:
        return None


__all__ = [
    "Cell", "NotebookFixes", "Settings", "Setup", "check_notebook", "check_python",
    "cached_graph_facts", "fix_all_python", "fix_applies", "noqa_line", "notebook_from_cells", "parse_settings",
    "rule_docs", "setup_for",
]
