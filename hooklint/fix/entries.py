"""What the user runs that reaches a file: the programs ``--verify`` runs to
prove a fix (static: no torch, no user code runs here).

For a file, in this order (:func:`entries_for`):

1. the commands of ``verify-entry`` in ``[tool.hooklint]``
   (``python train.py --epochs 1``, ``python -m pkg.train``, ``pytest
   tests/test_net.py``), for every file: a run that does not reach the
   registration is simply not used;
2. the file's own ``if __name__ == "__main__":`` block, or the file itself
   when it is a script whose top-level code runs a model (a ``backward()``,
   a call of one of its own functions);
3. the file's own tests, when it is a test file;
4. the project's scripts (files with a ``__main__`` block) that import it;
5. the project's test files that import it: the test functions that use a
   name imported from it (the whole file when only fixtures do).

An import is found through the same resolution the graph layer uses
(:func:`hooklint.graph.roots.resolve_module`); a file is parsed only when
its text names the module.  Running them happens in the proof worker
(:mod:`hooklint.fix.program`).
"""

from __future__ import annotations

import ast
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

MAX_TESTS_PER_FILE = 8
MAX_PROJECT_FILES = 4000  # a walk of the project stops there: the search must stay cheap
PYTHON_NAMES = ("python", "python3", "py")


@dataclass(frozen=True)
class Entry:
    """A program to run: ``kind`` "script" (``python path args``), "module"
    (``python -m module args``) or "pytest" (``pytest args``)."""

    kind: str
    label: str  # how messages name it: "`train.py`'s __main__ block", "`pytest tests/test_net.py::test_step`"
    target: str  # the script's absolute path, the module's name, or "" for pytest
    args: tuple[str, ...] = ()
    files: tuple[str, ...] = ()  # the files it starts from (the script, the test files)

    def to_request(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "target": self.target, "args": list(self.args),
                "files": list(self.files)}


class EntryError(ValueError):
    """A ``verify-entry`` command hooklint cannot run."""


def parse_command(command: str, root: Path) -> Entry:
    """A ``verify-entry`` command as an :class:`Entry`.  Only Python runs, in
    the proof worker's process (the sandbox allows no other program):
    ``[python] script.py args``, ``python -m module args``, ``pytest args``
    (or ``python -m pytest args``)."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise EntryError(f"`{command}` is not a command line ({exc})") from None
    if not words:
        raise EntryError("an empty command")
    label = f"`{command.strip()}` (verify-entry)"
    if os.path.basename(words[0]).split(".exe")[0].rstrip("0123456789.") in PYTHON_NAMES:
        words = words[1:]
        if not words:
            raise EntryError(f"`{command}` names no script or module to run")
        if words[0] == "-m":
            if len(words) < 2:
                raise EntryError(f"`{command}`: -m needs a module name")
            module, args = words[1], tuple(words[2:])
            if module == "pytest":
                return Entry("pytest", label, "", args)
            if not all(part.isidentifier() for part in module.split(".")):
                raise EntryError(f"`{command}`: `{module}` is not a module name")
            return Entry("module", label, module, args)
        if words[0].startswith("-"):
            raise EntryError(f"`{command}`: hooklint runs `python script.py ...` or `python -m module ...`, "
                             f"not Python's option `{words[0]}`")
    elif os.path.basename(words[0]) in ("pytest", "py.test"):
        return Entry("pytest", label, "", tuple(words[1:]))
    script = words[0]
    if not script.endswith(".py"):
        raise EntryError(f"`{command}` is not a Python command hooklint can run in its sandbox: give "
                         f"`python script.py ...`, `python -m module ...` or `pytest ...`")
    path = (root / script).resolve()
    return Entry("script", label, str(path), tuple(words[1:]), (str(path),))


def validate_commands(commands: Iterable[str], root: Path) -> None:
    for command in commands:
        parse_command(command, root)


# ---------------------------------------------------------------- the file itself


def _is_main_test(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)


def main_block(tree: ast.Module) -> ast.If | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
            return stmt
    return None


_GRADIENT_CALLS = frozenset({"backward", "grad"})


def runs_at_top_level(tree: ast.Module) -> bool:
    """Top-level code (outside functions, classes and a ``__main__`` block) that
    runs a model: a ``.backward()`` / ``autograd.grad()`` call, or a call of a
    function the file defines (``main()``, ``train(net)``)."""
    own = {s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
            continue
        if isinstance(stmt, ast.If) and _is_main_test(stmt.test):
            continue
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _GRADIENT_CALLS:
                return True
            if isinstance(func, ast.Name) and func.id in own:
                return True
    return False


def is_test_file(path: str) -> bool:
    name = os.path.basename(path)
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


# ---------------------------------------------------------------- the project


@dataclass
class ProjectFiles:
    """The project's Python files, walked once per run (excludes and .gitignore
    as for checking), and what each imports, read only when asked."""

    root: Path
    excludes: list[str]
    respect_gitignore: bool = True
    pythonpath: tuple[str, ...] = ()
    _files: list[str] | None = None
    _texts: dict[str, str | None] = field(default_factory=dict)
    importers: dict[tuple[str, int], list[Entry]] = field(default_factory=dict)  # (file, limit) -> entries
    truncated: bool = False

    def files(self) -> list[str]:
        if self._files is None:
            from hooklint.files import Walker

            walker = Walker(self.root, self.excludes, self.respect_gitignore)
            found = [f for f in walker.files([str(self.root)]) if f.endswith(".py")]
            self.truncated = len(found) > MAX_PROJECT_FILES
            self._files = sorted(found, key=lambda p: (p.count(os.sep), p))[:MAX_PROJECT_FILES]
        return self._files

    def text(self, path: str) -> str | None:
        if path not in self._texts:
            from hooklint.static.source import SourceError, read_source

            try:
                self._texts[path] = read_source(path)
            except (SourceError, OSError, UnicodeDecodeError, ValueError):
                self._texts[path] = None
        return self._texts[path]


def _import_names(target: str) -> list[str]:
    """Words an import of ``target`` shows in the importing file's text."""
    path = Path(target)
    return [path.parent.name] if path.name == "__init__.py" else [path.stem]


def imported_names(tree: ast.Module, path: str, target: str, root: Path, pythonpath: Iterable[str]) -> set[str] | None:
    """The names ``path`` binds to ``target`` or to what it defines (``from
    models import Net`` -> {"Net"}, ``import models as m`` -> {"m"}); None when
    it does not import ``target``."""
    from hooklint.graph.roots import file_roots, resolve_module

    roots = file_roots(path, root, tuple(pythonpath))
    package = None
    if roots.module_name:
        package = roots.module_name if path.endswith("__init__.py") else roots.module_name.rpartition(".")[0]
    wanted = os.path.realpath(target)

    def names(module: str, level: int = 0) -> bool:
        found = resolve_module(module, roots, package, level)
        return found is not None and os.path.realpath(found) == wanted

    bound: set[str] | None = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if names(alias.name):
                    bound = (bound or set()) | {alias.asname or alias.name.split(".")[0]}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module and names(module, node.level):
                bound = (bound or set()) | {a.asname or a.name for a in node.names if a.name != "*"}
                if any(a.name == "*" for a in node.names):
                    bound.add("*")
                continue
            for alias in node.names:
                if names(f"{module}.{alias.name}" if module else alias.name, node.level):
                    bound = (bound or set()) | {alias.asname or alias.name}
    return bound


def _uses(node: ast.AST, names: set[str]) -> bool:
    return "*" in names or any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def test_ids(tree: ast.Module, rel: str, names: set[str] | None, rows: tuple[int, int] | None = None) -> list[str]:
    """pytest node ids of the tests in ``tree`` that use one of ``names`` (or
    whose body holds ``rows``); [] when none does (run the whole file)."""
    out: list[str] = []

    def wanted(fn: ast.AST) -> bool:
        if rows is not None:
            return fn.lineno <= rows[0] and rows[1] <= (fn.end_lineno or fn.lineno)  # type: ignore[attr-defined]
        return names is not None and _uses(fn, names)

    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name.startswith("test") \
                and wanted(stmt):
            out.append(f"{rel}::{stmt.name}")
        elif isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
            for sub in stmt.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)) and sub.name.startswith("test") \
                        and wanted(sub):
                    out.append(f"{rel}::{stmt.name}::{sub.name}")
    return out[:MAX_TESTS_PER_FILE]


def _rel(path: str, root: Path) -> str:
    try:
        return Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return path


def _pytest_entry(path: str, root: Path, ids: list[str]) -> Entry:
    rel = _rel(path, root)
    shown = ids[0] if len(ids) == 1 else rel + (f" ({len(ids)} tests)" if ids else "")
    return Entry("pytest", f"`pytest {shown}`", "", tuple(ids) if ids else (rel,), (os.path.realpath(path),))


def _main_entry(path: str, label: str, root: Path, pythonpath: Iterable[str]) -> Entry:
    """A file's ``__main__``: ``python path`` for a script, ``python -m pkg.mod``
    for a module of a package (its relative imports need the package)."""
    from hooklint.graph.roots import file_roots

    module = file_roots(path, root, tuple(pythonpath)).module_name
    if module and not path.endswith("__init__.py"):
        return Entry("module", f"{label} (`python -m {module}`)", module, (), (path,))
    return Entry("script", label, path, (), (path,))


@dataclass
class Entries:
    entries: list[Entry]
    none_because: str = ""  # why there is none
    errors: list[str] = field(default_factory=list)  # verify-entry commands that cannot run


NO_ENTRY = ("no `__main__` block, no top-level code that runs a model, no script or test that imports it, no "
            "`verify-entry`")


def entries_for(path: str, tree: ast.Module, rows: tuple[int, int], config, project: ProjectFiles,
                limit: int = 6) -> Entries:
    """What to run for a fix in ``path`` (a registration at ``rows``), most
    direct first; at most ``limit``."""
    root = Path(config.root)
    out: list[Entry] = []
    errors: list[str] = []
    for command in getattr(config, "verify_entry", []) or []:
        try:
            out.append(parse_command(command, root))
        except EntryError as exc:
            errors.append(str(exc))
    real = os.path.realpath(path)
    name = os.path.basename(path)
    if main_block(tree) is not None:
        out.append(_main_entry(real, f"`{name}`'s __main__ block", root, project.pythonpath))
    elif runs_at_top_level(tree):
        out.append(_main_entry(real, f"`{name}` (a script)", root, project.pythonpath))
    if is_test_file(path):
        ids = test_ids(tree, _rel(path, root), None, rows)
        out.append(_pytest_entry(path, root, ids))
    if len(out) < limit:
        key = (real, limit - len(out))
        if key not in project.importers:
            project.importers[key] = _importers(real, project, limit - len(out))
        out += project.importers[key]
    return Entries(out[:limit], "" if out else NO_ENTRY, errors)


def _importers(target: str, project: ProjectFiles, limit: int) -> list[Entry]:
    """Scripts, then test files, of the project that import ``target``."""
    words = _import_names(target)
    scripts: list[Entry] = []
    tests: list[Entry] = []
    for candidate in project.files():
        if len(scripts) + len(tests) >= limit * 2:
            break
        real = os.path.realpath(candidate)
        if real == target:
            continue
        test = is_test_file(candidate)
        text = project.text(candidate)
        if text is None or not any(w in text for w in words):
            continue
        if not test and "__main__" not in text:
            continue
        try:
            tree = ast.parse(text, candidate)
        except (SyntaxError, ValueError):
            continue
        names = imported_names(tree, candidate, target, project.root, project.pythonpath)
        if names is None:
            continue
        if test:
            tests.append(_pytest_entry(candidate, project.root, test_ids(tree, _rel(candidate, project.root), names)))
        elif main_block(tree) is not None:
            scripts.append(_main_entry(real, f"`{_rel(candidate, project.root)}`'s __main__ block", project.root,
                                       project.pythonpath))
    # tests that name what they use first: a whole file runs more than the hooked code
    tests.sort(key=lambda e: "::" not in e.args[0] if e.args else True)
    return (scripts + tests)[:limit]
