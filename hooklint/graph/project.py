"""What an import in a model file names in the user's own project (no torch).

``from models import Net`` in ``train.py``: is ``Net`` a module class of the
project (then ``Net(10)`` in ``train.py`` builds a model the graph layer can
analyse), a function returning one (a factory), or something else?  Answered
by reading the project's files (never running them), through the import
roots of :mod:`hooklint.graph.roots`, following re-exports (``from .models
import Net`` in a package's ``__init__.py``) a few steps.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from hooklint.graph.roots import FileRoots, resolve_module
from hooklint.static.source import SourceError, read_source

_REEXPORT_HOPS = 4
# Top-level modules that are never the user's project (the standard library and torch).
_NOT_THE_PROJECT = frozenset(getattr(sys, "stdlib_module_names", ())) | {"torch"}


@dataclass(frozen=True)
class Definition:
    """A class or function of the project that an import names."""

    kind: str  # "class" or "function"
    path: str  # the file defining it
    name: str
    line: int
    maybe_module: bool  # a class that is (or may be) an nn.Module; a function that returns one
    registers_hooks: bool  # its file registers hooks (its classes may hook themselves)


@lru_cache(maxsize=512)
def _parsed(path: str, mtime_ns: int) -> ast.Module | None:
    try:
        return ast.parse(read_source(path), path)
    except (SourceError, SyntaxError, ValueError, MemoryError, RecursionError):
        return None


def parse_file(path: str | Path) -> ast.Module | None:
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return None
    return _parsed(str(path), mtime)


def _module_package(path: Path, roots: FileRoots) -> str | None:
    """The dotted package a file's relative imports start from."""
    if roots.module_name is None:
        return None
    return roots.module_name if path.name == "__init__.py" else roots.module_name.rpartition(".")[0]


@lru_cache(maxsize=256)
def _semantic(path: str, mtime_ns: int):
    from hooklint.static.semantic import SemanticModel

    tree = _parsed(path, mtime_ns)
    return None if tree is None else SemanticModel(tree)


def _class_maybe_module(model, node: ast.ClassDef) -> bool:
    info = model.classes.get(node)
    return info is not None and model.is_module_class(info) is not False


def _returns_module(model, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A function whose ``return`` builds a module class of its file, or whose return
    annotation names a module (``-> nn.Module``, ``-> ResNet``)."""
    if fn.returns is not None:
        info = model.class_for_expr(fn.returns) if isinstance(fn.returns, ast.Name) else None
        if info is not None and model.is_module_class(info) is not False:
            return True
        qual = model.qualify(fn.returns) if hasattr(fn.returns, "_hl_scope") else None
        if qual is not None and qual.endswith("Module") and qual.startswith(("torch.", "lightning", "pytorch_")):
            return True
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
            info = model.class_for_expr(node.value.func)
            if info is not None and model.is_module_class(info) is not False:
                return True
    return False


_HOOK_REGISTRATION = re.compile(r"\.\s*register_\w*hook\b")


@lru_cache(maxsize=4096)
def _text(path: str, mtime_ns: int) -> str:
    try:
        return read_source(path)
    except SourceError:
        return ""


def _file_text(path: str | Path) -> str:
    try:
        return _text(str(path), os.stat(path).st_mtime_ns)
    except OSError:
        return ""


@dataclass(frozen=True)
class Target:
    """Where an imported name is defined (after following re-exports)."""

    path: str
    name: str
    kind: str  # "class" or "function"


class ProjectIndex:
    """Definitions the project's imports name; one per checking run (files are
    read at most once).  Finding the file an import names costs a few
    ``stat`` calls; reading a definition (a parse) is done only when asked."""

    def __init__(self) -> None:
        self._targets: dict[tuple, Target | None] = {}
        self._definitions: dict[Target, Definition | None] = {}
        self._hooks: dict[str, bool] = {}
        self.lookups = 0  # how many times an import of the project was looked up

    def target(self, qualified: str, roots: FileRoots, importer: Path) -> Target | None:
        """``qualified`` as :meth:`SemanticModel.qualify` gives it: ``models.Net``,
        ``pkg.models.Net``, ``.models.Net`` (relative)."""
        level = len(qualified) - len(qualified.lstrip("."))
        dotted = qualified[level:]
        if "." not in dotted and not level:
            return None
        module, _, name = dotted.rpartition(".")
        if not level and module.split(".")[0] in _NOT_THE_PROJECT:
            return None
        self.lookups += 1
        package = _module_package(importer, roots) if level else None
        key = (module, name, level, package, roots.search)
        if key not in self._targets:
            self._targets[key] = self._find(module, name, level, package, roots, 0)
        return self._targets[key]

    def registers_hooks(self, path: str) -> bool:
        """The file registers hooks somewhere (its classes may hook themselves)."""
        if path not in self._hooks:
            self._hooks[path] = bool(_HOOK_REGISTRATION.search(_file_text(path)))
        return self._hooks[path]

    def definition(self, target: Target) -> Definition | None:
        if target not in self._definitions:
            self._definitions[target] = self._read(target)
        return self._definitions[target]

    def _read(self, target: Target) -> Definition | None:
        try:
            model = _semantic(target.path, os.stat(target.path).st_mtime_ns)
        except OSError:
            return None
        if model is None:
            return None
        hooks = self.registers_hooks(target.path)
        for stmt in model.tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == target.name:
                return Definition("class", target.path, target.name, stmt.lineno,
                                  _class_maybe_module(model, stmt), hooks)
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == target.name:
                return Definition("function", target.path, target.name, stmt.lineno,
                                  _returns_module(model, stmt), hooks)
        return None

    def _find(self, module: str, name: str, level: int, package: str | None, roots: FileRoots,
              hops: int) -> Target | None:
        path = resolve_module(module, roots, package, level)
        if path is None or hops > _REEXPORT_HOPS:
            return None
        text = _file_text(path)
        if name not in text:
            return None
        defined = re.search(rf"^(class|def|async\s+def)\s+{re.escape(name)}\b", text, re.MULTILINE) \
            if f"class {name}" in text or f"def {name}" in text else None
        if defined:
            return Target(str(path), name, "class" if defined.group(1) == "class" else "function")
        # a re-export: `from .models import Net` in a package's __init__.py
        tree = parse_file(path)
        if tree is None:
            return None
        own_package = package_of(path, roots, module, level, package)
        for stmt in tree.body:
            if isinstance(stmt, ast.ImportFrom):
                for alias in stmt.names:
                    if (alias.asname or alias.name) == name and alias.name != "*":
                        return self._find(stmt.module or "", alias.name, stmt.level, own_package, roots, hops + 1)
        return None


def package_of(path: Path, roots: FileRoots, module: str, level: int, package: str | None) -> str | None:
    """The package relative imports in ``path`` (the module ``module`` was
    resolved to) start from."""
    if level:
        base = (package or "").split(".")
        base = base[:len(base) - (level - 1)] if level > 1 else base
        full = ".".join([p for p in base if p] + ([module] if module else []))
    else:
        full = module
    return full if path.name == "__init__.py" else full.rpartition(".")[0]
