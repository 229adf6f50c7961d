"""Where the user's own imports resolve from, as running their code would see it.

No torch and no user code here: the parent computes the roots of each model
file and sends them to the worker, and the planner uses them to find which
checked file an ``import`` names.

For a file, in the order Python would search them:

1. the folder a script's ``import`` starts from: the file's own folder, or,
   for a module of a package (folders with ``__init__.py``), the folder above
   its top package;
2. the folders of ``pythonpath`` in ``[tool.hooklint]`` (relative to the
   configuration file), as ``PYTHONPATH`` would put them;
3. the project root: the nearest folder, from the file upwards, holding a
   ``pyproject.toml``, ``setup.py``, ``setup.cfg`` or ``.git`` (where users
   run ``python -m``, ``pytest`` and their scripts from);
4. the project's ``src`` folder, when it has one (the src layout: an
   installed package resolves there).

Files under any of these folders (and not under ``site-packages``) are the
user's own: the worker imports them definitions-only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

PROJECT_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


def package_root(path: Path) -> tuple[str, Path]:
    """(dotted package of the file, folder to put on sys.path for it)."""
    parts: list[str] = []
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


@lru_cache(maxsize=1024)
def project_root(folder: Path) -> Path | None:
    """The nearest folder from ``folder`` upwards with a project marker."""
    for candidate in [folder, *folder.parents]:
        if any(os.path.exists(candidate / marker) for marker in PROJECT_MARKERS):
            return candidate
    return None


@dataclass(frozen=True)
class FileRoots:
    """How one file is imported and what its imports resolve against."""

    module_name: str | None  # "pkg.models" for a module of a package; None for a script
    search: tuple[Path, ...]  # sys.path entries to add, in order
    own: tuple[Path, ...]  # folders whose modules are the user's own (imported definitions-only)


def _is_identifier_path(parts: tuple[str, ...]) -> bool:
    return bool(parts) and all(p.isidentifier() for p in parts)


def file_roots(path: str | Path, config_root: Path, pythonpath: list[str] | tuple[str, ...] = (),
               relative_imports: bool = False) -> FileRoots:
    """``relative_imports``: the file has ``from . import x``; outside a package
    with ``__init__.py`` it is then a module of a namespace package."""
    path = Path(os.path.abspath(path))
    package, top = package_root(path)
    configured = [Path(os.path.abspath(config_root / p)) for p in pythonpath]
    project = project_root(path.parent)
    search: list[Path] = [top]
    search += configured
    if project is not None:
        search.append(project)
        if (project / "src").is_dir():
            search.append(project / "src")
    search.append(Path(os.path.abspath(config_root)))
    unique: list[Path] = []
    for folder in search:
        if folder not in unique:
            unique.append(folder)
    if package:
        module_name: str | None = package if path.name == "__init__.py" else f"{package}.{path.stem}"
    elif relative_imports:
        module_name = _namespace_name(path, unique[1:])
    else:
        module_name = None
    own = list(unique)
    if path.parent not in own:
        own.append(path.parent)
    return FileRoots(module_name, tuple(unique), tuple(own))


def _namespace_name(path: Path, roots: list[Path]) -> str | None:
    """``src/pkg/models.py`` in a package without ``__init__.py`` (PEP 420): its
    dotted name from the nearest configured, project or src root above it, so
    that its relative imports resolve as they do for the user."""
    best: tuple[str, ...] | None = None
    for root in roots:
        try:
            rel = path.relative_to(root)
        except ValueError:
            continue
        parts = rel.with_suffix("").parts
        if len(parts) >= 2 and _is_identifier_path(parts) and (best is None or len(parts) < len(best)):
            best = parts
    return ".".join(best) if best else None


def resolve_module(name: str, roots: FileRoots, importer_package: str | None = None, level: int = 0) -> Path | None:
    """The file an ``import`` of ``name`` (``from ..x import y``: ``level`` 2)
    names, when it is one of the user's own; None otherwise."""
    if level:
        if not importer_package:
            return None
        base = importer_package.split(".")
        if level - 1 > len(base):
            return None
        base = base[:len(base) - (level - 1)]
        name = ".".join([*base, name] if name else base)
    parts = name.split(".")
    for folder in roots.search:
        candidate = folder.joinpath(*parts)
        for option in (candidate.with_suffix(".py"), candidate / "__init__.py"):
            if option.is_file():
                return option
    return None
