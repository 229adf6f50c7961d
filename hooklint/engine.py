"""One `hooklint check` run: find files, gather graph facts when asked, run the
static rules, collect a :class:`Report`.  The CLI, the flake8 plugin and the
tests all come through here, so every entry point behaves the same."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hooklint.config import Config
from hooklint.files import Walker
from hooklint.findings import Notice, NoticeLevel, Report
from hooklint.static.checker import FileResult, check_file, source_error_result
from hooklint.static.source import SourceError


class UsageError(Exception):
    """Bad command-line input (missing path, unknown rule): one line, exit 2."""


@dataclass
class CheckOptions:
    paths: list[str]
    config: Config
    codes: frozenset[str]
    static_only: bool = False
    prefilter: bool = True
    jobs: int = 1
    # The project pass: call sites across the checked files (hooklint.static.project).
    project: bool = True
    # The project the checked files belong to: when set, the project pass also
    # searches its other files for callers (never checked, never reported), so
    # a file's findings do not depend on which other files the run names.
    project_root: Path | None = None
    # --ignore-noqa: `# noqa` comments silence nothing
    ignore_noqa: bool = False
    # Called with the files to check; returns per-file graph facts and notices.
    # Set by the CLI when the graph layer is available (hooklint.graph).
    graph_provider: Callable[[list[str], Config], tuple[dict[str, Any], list[Notice]]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def display_path(path: str) -> str:
    """Paths as the user would type them: relative to the working folder when
    inside it (what ``os.path.relpath`` gives, without its cost per file)."""
    cwd = os.getcwd()
    full = os.path.normpath(os.path.join(cwd, path))
    if full == cwd:
        return "."
    prefix = cwd if cwd.endswith(os.sep) else cwd + os.sep
    if full.startswith(prefix):
        return full[len(prefix):]
    if not full.startswith(os.sep * 2):  # outside the working folder
        return path
    try:  # `//x` (POSIX) or a UNC path: let relpath sort it out
        rel = os.path.relpath(path)
    except ValueError:  # another drive on Windows
        return path
    return path if rel.startswith("..") else rel


# Files or folders that mark the top of a project when no configuration file does.
PROJECT_MARKERS = (".git", "pyproject.toml", "setup.py", "setup.cfg", ".hg")


def find_project_root(config: Config, paths: list[str]) -> Path | None:
    """The folder whose Python files are the project of ``paths``: the folder
    of the configuration file in use, else the nearest folder at or above the
    first path holding a project marker (``.git``, ``pyproject.toml``...);
    None when there is none (a loose script: only the run's files count)."""
    if config.source is not None:
        return config.root.resolve()
    first = Path(paths[0]) if paths and paths[0] != "-" else Path.cwd()
    try:
        start = first.resolve()
    except (OSError, RuntimeError):
        return None
    if not start.is_dir():
        start = start.parent
    for folder in (start, *start.parents):
        if any(os.path.exists(os.path.join(folder, marker)) for marker in PROJECT_MARKERS):
            return folder
    return None


def discover(options: CheckOptions, unreadable: list[tuple[str, str]] | None = None) -> list[str]:
    """The files to check; folders that cannot be listed go to ``unreadable``
    as (path, why)."""
    cfg = options.config
    walker = Walker(cfg.root, cfg.excludes(), cfg.respect_gitignore, cfg.force_exclude)
    files = walker.files(options.paths)
    if walker.missing:
        raise UsageError(f"{walker.missing[0]}: no such file or directory")
    if unreadable is not None:
        unreadable.extend(walker.unreadable)
    return files


def unreadable_folder_results(unreadable: list[tuple[str, str]], options: CheckOptions) -> list[FileResult]:
    """HKL002 for each folder the walk could not list (as ruff reports a
    permission error): its files are not checked, and the run must say so."""
    out = []
    for path, why in unreadable:
        err = SourceError("io", f"cannot read folder: {why}; the files in it were not checked")
        out.append(source_error_result(display_path(path), err, options.codes, ignored_codes(path, options)))
    return out


def rel_to_root(path: str, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except (ValueError, OSError, RuntimeError):  # outside the root; a symlink loop
        return Path(path).as_posix()


def ignored_codes(path: str, options: CheckOptions) -> frozenset[str]:
    cfg = options.config
    return frozenset(cfg.ignored_for(rel_to_root(path, cfg.root))) if cfg.per_file_ignores else frozenset()


def check_one(path: str, options: CheckOptions, graph: Any = None, *,
              project_answers: dict[str, Any] | None = None, summarize: bool = False) -> FileResult:
    return check_file(path, options.codes, display_path=display_path(path), ignored=ignored_codes(path, options),
                      graph=graph, prefilter=options.prefilter, target=options.config.target(),
                      project_answers=project_answers, summarize=summarize, noqa=not options.ignore_noqa)


def internal_error_result(path: str, exc: Exception) -> FileResult:
    return FileResult(display_path(path), notices=[Notice(
        display_path(path), f"internal error ({type(exc).__name__}: {exc}); please report it", NoticeLevel.ERROR)])


def run_check(options: CheckOptions) -> Report:
    unreadable: list[tuple[str, str]] = []
    files = discover(options, unreadable)
    report = Report(files_checked=len(files))
    for result in unreadable_folder_results(unreadable, options):
        report.findings.extend(result.findings)
    graph_facts: dict[str, Any] = {}
    # notebooks too: the graph layer imports the definitions of their code cells, never their top-level code
    if not options.static_only and options.graph_provider is not None and files:
        graph_facts, notices = options.graph_provider(files, options.config)
        report.notices.extend(notices)
    results = check_many(files, options, graph_facts)
    for result in results:
        report.findings.extend(result.findings)
        report.notices.extend(result.notices)
    return report


def check_many(files: list[str], options: CheckOptions, graph_facts: dict[str, Any]) -> list[FileResult]:
    """Check files, in parallel when ``options.jobs > 1``, through the cache
    of static results when the CLI set one up, and with the project pass
    (call sites across files, the project's other files included when
    ``options.project_root`` is set); results in input order."""
    if len(files) > 1 or options.extra.get("static_cache") is not None or options.project_root is not None:
        from hooklint.parallel import check_parallel

        return check_parallel(files, options, graph_facts)
    out = []
    for path in files:
        try:
            out.append(check_one(path, options, graph_facts.get(path)))
        except Exception as exc:  # noqa: BLE001 - one file's failure must not end the run
            if os.environ.get("HOOKLINT_STRICT"):
                raise
            out.append(internal_error_result(path, exc))
    return out
