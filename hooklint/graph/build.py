"""Loading a model file's definitions and building instances (worker only).

The file is executed as :mod:`hooklint.graph.sanitize` filters it; the user's
own modules it imports (files under its folder or the project root, not
installed packages) are filtered the same way by an import hook, so a helper
module with a training loop at its top level does not train either.
Everything runs under :class:`~hooklint.graph.guard.Guard`.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import os
import sys
import traceback
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Collection, Iterator

from torch import nn

from hooklint.graph.facts import Unanalysed
from hooklint.graph.plan import Plan, plan_for
from hooklint.graph.sanitize import definitions_only
from hooklint.graph.trace import is_user_file, one_line
from hooklint.static.source import read_source

_SITE_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


def package_root(path: Path) -> tuple[str, Path]:
    """(dotted package of the file, folder to put on sys.path for it)."""
    parts: list[str] = []
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


class _SanitizingLoader(importlib.abc.Loader):
    def __init__(self, origin: str, importer: "LocalImporter"):
        self.origin = origin
        self.importer = importer

    def create_module(self, spec):  # default module creation
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        text = read_source(self.origin)
        self.importer.deps[self.origin] = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        sanitized = definitions_only(ast.parse(text, self.origin))
        exec(compile(sanitized.tree, self.origin, "exec"), module.__dict__)  # noqa: S102 - definitions only


class LocalImporter(importlib.abc.MetaPathFinder):
    """Imports the user's own modules through :func:`definitions_only`."""

    def __init__(self, roots: list[Path]):
        self.roots = [str(r.resolve()) + os.sep for r in roots]
        self.deps: dict[str, str] = {}
        self.loaded: list[str] = []

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        origin = os.path.realpath(spec.origin)
        if not origin.startswith(tuple(self.roots)) or any(m in origin for m in _SITE_MARKERS) \
                or not is_user_file(origin):
            return None
        spec.loader = _SanitizingLoader(origin, self)
        self.loaded.append(fullname)
        return spec


@dataclass
class Session:
    path: Path
    module: types.ModuleType
    importer: LocalImporter
    plan: Plan
    unique_name: str

    @property
    def namespace(self) -> dict[str, Any]:
        return self.module.__dict__


@contextmanager
def file_session(path: Path, root: Path) -> Iterator[Session]:
    """sys.path, the import hook and the working folder as running the file would
    set them; everything undone afterwards (the next file starts clean)."""
    path = path.resolve()
    package, top = package_root(path)
    text = read_source(str(path))
    plan = plan_for(ast.parse(text, str(path)))
    unique_name = f"__hooklint_model_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}__"
    module = types.ModuleType(unique_name)
    module.__file__ = str(path)
    module.__package__ = package or None
    roots = [top, root.resolve()] if root.resolve() != top else [top]
    importer = LocalImporter(roots)
    saved_path = list(sys.path)
    saved_cwd = os.getcwd()
    saved_modules = set(sys.modules)
    sys.path[:0] = [str(top), str(path.parent)] if path.parent != top else [str(top)]
    sys.meta_path.insert(0, importer)
    sys.modules[unique_name] = module
    try:
        os.chdir(path.parent)
        yield Session(path, module, importer, plan, unique_name)
    finally:
        os.chdir(saved_cwd)
        if importer in sys.meta_path:
            sys.meta_path.remove(importer)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if name == unique_name or name in importer.loaded:
                del sys.modules[name]


def exec_definitions(session: Session) -> None:
    code = compile(session.plan.sanitized.tree, str(session.path), "exec")
    exec(code, session.namespace)  # noqa: S102 - definitions only


def user_error(exc: BaseException, skipped_names: Collection[str] = ()) -> str:
    """One line: the exception and the innermost user frame it came from."""
    text = one_line(exc)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)]
    if frames:
        text += f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
    if isinstance(exc, NameError) and getattr(exc, "name", None) in skipped_names:
        text += f"; `{exc.name}` is set by a top-level statement, which hooklint does not run"
    if isinstance(exc, MemoryError) or "can't allocate memory" in str(exc) or "out of memory" in str(exc):
        text += "; raise `memory-limit` in [tool.hooklint] if the model needs more"
    return text


@dataclass
class Built:
    model: nn.Module
    source: str  # "MyNet()" / "a no-argument constructor" / "factory pkg.mod:build"
    call_line: int | None
    inputs: tuple[Any, ...] | None = None
    inputs_origin: str = ""


@dataclass
class BuildResult:
    built: list[Built] = field(default_factory=list)
    failures: dict[str, Unanalysed] = field(default_factory=dict)  # by class name


def build_instances(session: Session, stage: Callable[[str], None], guard) -> BuildResult:
    result = BuildResult()
    namespace = session.namespace
    skipped = session.plan.sanitized.skipped_names
    built_classes: set[str] = set()
    for call in session.plan.calls:
        stage(f"building {call.text} (line {call.line})")
        try:
            with guard.running_user_code():
                value = eval(compile(ast.Expression(call.node), str(session.path), "eval"), namespace)  # noqa: S307
        except BaseException as exc:  # noqa: BLE001 - user code: any failure is one diagnostic
            result.failures.setdefault(call.class_name, Unanalysed(
                call.class_name, call.line, f"{call.text} failed: {user_error(exc, skipped)}"))
            continue
        if isinstance(value, nn.Module):
            result.built.append(Built(value, call.text, call.line))
            built_classes.add(call.class_name)
            result.failures.pop(call.class_name, None)
    for candidate in session.plan.classes:
        if candidate.name in built_classes:
            continue
        cls = namespace.get(candidate.name)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            continue  # its base, from another file, is not a module after all
        if getattr(cls, "forward", None) is getattr(nn.Module, "forward", None):
            result.failures[candidate.name] = Unanalysed(candidate.name, candidate.line,
                                                         "defines no forward (a base class)")
            continue
        stage(f"building {candidate.name}() (no-argument constructor)")
        try:
            with guard.running_user_code():
                value = cls()
        except BaseException as exc:  # noqa: BLE001
            earlier = result.failures.get(candidate.name)
            reason = f"{candidate.name}() failed: {user_error(exc, skipped)}"
            if earlier is None:
                reason = f"no constructor call with literal arguments in the file; {reason}"
            else:
                reason = f"{earlier.reason}; {reason}"
            result.failures[candidate.name] = Unanalysed(candidate.name, candidate.line, reason)
            continue
        result.failures.pop(candidate.name, None)
        result.built.append(Built(value, "a no-argument constructor", None))
    return result


def run_factory(spec: str, guard) -> Built:
    """``pkg.mod:build`` -> the module it returns (and example inputs, if it returns them)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"`{spec}` is not of the form `package.module:function`")
    with guard.running_user_code():
        module = importlib.import_module(module_name)
        factory = module
        for part in attr.split("."):
            factory = getattr(factory, part)
        value = factory()
    inputs = None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], nn.Module):
        value, inputs = value
        inputs = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    if not isinstance(value, nn.Module):
        raise TypeError(f"returned {type(value).__name__}, not an nn.Module or (module, example_inputs)")
    return Built(value, f"factory {spec}", None, inputs, "declared by the factory" if inputs is not None else "")


@lru_cache(maxsize=256)
def _class_lines(path: str) -> dict[str, int]:
    try:
        tree = ast.parse(read_source(path), path)
    except Exception:  # noqa: BLE001 - a line number is a nicety
        return {}
    return {node.name: node.lineno for node in tree.body if isinstance(node, ast.ClassDef)}


def describer(unique_names: dict[str, str]) -> Callable[[nn.Module], tuple[str, str, str | None, int | None]]:
    """What ModuleFacts says about a module's class; ``unique_names`` maps the
    internal names of loaded model files back to their file stems."""
    cache: dict[type, tuple[str, str, str | None, int | None]] = {}

    def describe(module: nn.Module) -> tuple[str, str, str | None, int | None]:
        cls = type(module)
        if cls not in cache:
            module_name = unique_names.get(cls.__module__, cls.__module__)
            file: str | None = None
            line: int | None = None
            if not module_name.startswith("torch."):
                try:
                    file = inspect.getsourcefile(cls)
                except (TypeError, OSError):
                    file = None
                if file is not None and is_user_file(file):
                    file = os.path.realpath(file)
                    line = _class_lines(file).get(cls.__qualname__)
                else:
                    file = None
            cache[cls] = (cls.__name__, f"{module_name}.{cls.__qualname__}", file, line)
        return cache[cls]

    return describe
