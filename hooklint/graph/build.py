"""Loading a model file's definitions and building instances (worker only).

The file is executed as :mod:`hooklint.graph.sanitize` filters it; the user's
own modules it imports (files under its folder or the project root, not
installed packages) are filtered the same way by an import hook, so a helper
module with a training loop at its top level does not train either.
Everything runs under :class:`~hooklint.graph.guard.Guard`.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import linecache
import os
import sys
import traceback
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Mapping

import torch
from torch import nn

from hooklint.graph.facts import Unanalysed
from hooklint.graph.inputs import INPUT_HINT
from hooklint.graph.plan import Plan, plan_for, project_context
from hooklint.graph.roots import file_roots
from hooklint.graph.sanitize import definitions_only
from hooklint.graph.trace import is_user_file, one_line
from hooklint.static.notebook import analysis_text, is_notebook
from hooklint.static.source import decode_source, read_regular_file

_SITE_MARKERS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)


class _SanitizingLoader(importlib.abc.Loader):
    def __init__(self, origin: str, importer: "LocalImporter"):
        self.origin = origin
        self.importer = importer

    def create_module(self, spec):  # default module creation
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        text = self.importer.overrides.get(self.origin)
        if text is None:
            # the digest of the bytes, as the cache compares a dependency (a BOM or a coding
            # cookie would make the digest of the decoded text a miss on every run)
            data = read_regular_file(self.origin)[0]
            text = decode_source(data)
            digest = hashlib.sha256(data).hexdigest()
        else:
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        self.importer.record(self.origin, digest)
        sanitized = definitions_only(ast.parse(text, self.origin))
        try:
            exec(compile(sanitized.tree, self.origin, "exec"), module.__dict__)  # noqa: S102 - definitions only
        except ModuleNotFoundError as exc:
            # only a module that is not there at all fails the same way whenever it is imported
            # (a name missing from a partly imported module depends on the import order)
            if self.origin not in self.importer.overrides and (
                    isinstance(exc, RememberedImportError) or _not_installed(exc.name)):
                RETAINED.remember_failure(module.__name__, self.origin, exc)
            raise


class LocalImporter(importlib.abc.MetaPathFinder):
    """Imports the user's own modules through :func:`definitions_only`."""

    def __init__(self, roots: list[Path], on_dep: Callable[[str, str], None] | None = None,
                 overrides: dict[str, str] | None = None):
        self.roots = [str(r.resolve()) + os.sep for r in roots]
        self.deps: dict[str, str] = {}
        self.loaded: list[str] = []
        self.on_dep = on_dep
        # file -> text to import in its place (a fixed version of the file, for --verify)
        self.overrides = overrides or {}

    def record(self, origin: str, digest: str) -> None:
        self.deps[origin] = digest
        if self.on_dep is not None:
            self.on_dep(origin, digest)

    def find_spec(self, fullname, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            return None
        origin = os.path.realpath(spec.origin)
        if not origin.startswith(tuple(self.roots)) or any(m in origin for m in _SITE_MARKERS) \
                or not is_user_file(origin):
            return None
        RETAINED.raise_remembered(fullname, origin, self)
        spec.loader = _SanitizingLoader(origin, self)
        self.loaded.append(fullname)
        return spec


def _not_installed(name: str | None) -> bool:
    """A top-level module that no folder of sys.path provides (a missing dependency)."""
    if not name:
        return False
    try:
        return importlib.machinery.PathFinder.find_spec(name.split(".")[0]) is None
    except (ImportError, ValueError):
        return False


class RememberedImportError(ModuleNotFoundError):
    """A module of the user's that failed to import earlier in this run, failing
    again without running it (a package with a missing dependency fails the
    same way for every file that imports it)."""

    def __init__(self, text: str, digest: str, name: str | None = None):
        super().__init__(text, name=name)
        self.text = text
        self.digest = digest


class _Retained:
    """The user's modules this worker already imported (definitions only), kept
    for the next files of the run: a package such as timm is imported once, not
    once per file.  Before each file, those its imports would no longer resolve
    to (another folder's ``models.py``) are dropped.  Modules whose import raised
    ImportError are remembered with the error."""

    def __init__(self) -> None:
        self.modules: dict[str, tuple[str, str]] = {}  # name -> (file, sha256)
        self.failed: dict[str, tuple[str, RememberedImportError]] = {}  # name -> (file, error)

    def remember_failure(self, name: str, origin: str, exc: ModuleNotFoundError) -> None:
        if isinstance(exc, RememberedImportError):
            error = exc
        else:
            try:
                digest = hashlib.sha256(read_regular_file(origin)[0]).hexdigest()
            except Exception:  # noqa: BLE001 - then it is simply not remembered
                return
            error = RememberedImportError(user_error(exc), digest, exc.name)
        self.failed[name] = (origin, error)

    def raise_remembered(self, name: str, origin: str, importer: "LocalImporter") -> None:
        remembered = self.failed.get(name)
        if remembered is None or origin in importer.overrides:
            return
        if remembered[0] != origin:
            del self.failed[name]
            return
        importer.record(origin, remembered[1].digest)
        raise RememberedImportError(remembered[1].text, remembered[1].digest, remembered[1].name)

    def add(self, importer: LocalImporter) -> None:
        for name in importer.loaded:
            module = sys.modules.get(name)
            origin = getattr(module, "__file__", None) if module is not None else None
            if origin is None:
                continue
            real = os.path.realpath(origin)
            if real in importer.overrides:  # not the file on disk: never for another file
                sys.modules.pop(name, None)
                continue
            self.modules[name] = (real, importer.deps.get(real, ""))

    def forget(self, files: Collection[str]) -> None:
        for name, (origin, _digest) in list(self.modules.items()):
            if origin in files:
                del self.modules[name]
                sys.modules.pop(name, None)

    def prune(self, search: list[Path]) -> None:
        tops = {name.split(".")[0] for name in self.modules}
        for top in tops:
            kept = self.modules.get(top)
            try:
                spec = importlib.machinery.PathFinder.find_spec(top, [str(p) for p in search])
            except (ImportError, ValueError):
                spec = None
            now = os.path.realpath(spec.origin) if spec is not None and spec.origin else None
            if kept is None or now != kept[0]:
                for name in [n for n in self.modules if n == top or n.startswith(top + ".")]:
                    del self.modules[name]
                    sys.modules.pop(name, None)

    def deps(self) -> dict[str, str]:
        return {origin: digest for origin, digest in self.modules.values() if digest}


RETAINED = _Retained()


@contextmanager
def _import_state(search: list[Path], importer: LocalImporter, extra_modules: tuple[str, ...] = ()) -> Iterator[None]:
    """sys.path and the import hook set for the user's code; restored afterwards.
    The user's modules imported stay for the next file (:class:`_Retained`); the
    file itself, run as a script, does not."""
    saved_path = list(sys.path)
    saved_cwd = os.getcwd()
    RETAINED.prune(search)
    RETAINED.forget(importer.overrides)
    for origin, digest in RETAINED.deps().items():
        importer.record(origin, digest)  # what this file would import again: its cache depends on them
    sys.path[:0] = [str(folder) for folder in search]
    sys.meta_path.insert(0, importer)
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        if importer in sys.meta_path:
            sys.meta_path.remove(importer)
        sys.path[:] = saved_path
        for name in extra_modules:
            sys.modules.pop(name, None)
        RETAINED.add(importer)


@dataclass
class Session:
    path: Path
    module: types.ModuleType
    importer: LocalImporter
    plan: Plan
    unique_name: str
    module_name: str | None = None  # imported under this name (a module of a package)
    context: Any = None  # the ProjectContext its plan was made with (roots, the project's imports)

    @property
    def namespace(self) -> dict[str, Any]:
        return self.module.__dict__


@contextmanager
def file_session(path: Path, root: Path, pythonpath: list[str] | tuple[str, ...] = (),
                 on_dep: Callable[[str, str], None] | None = None, text: str | None = None) -> Iterator[Session]:
    """sys.path, the import hook and the working folder as running the file would
    set them (:mod:`hooklint.graph.roots`); everything undone afterwards.
    ``text``: import this in place of the file's content (same path, same
    package: a fixed version of the file)."""
    path = path.resolve()
    overrides = {str(path): text} if text is not None else {}
    if text is None:
        text = analysis_text(str(path))  # a notebook's code cells, at rows that map back to cells
    if is_notebook(str(path)):
        # tracebacks and the source lines of ops read the notebook's Python text, not its JSON
        linecache.cache[str(path)] = (len(text), None, text.splitlines(keepends=True), str(path))
    tree = ast.parse(text, str(path))
    context = project_context(str(path), root.resolve(), pythonpath, tree=tree)
    plan = plan_for(tree, context)
    from hooklint.graph.entry import data_hint

    plan.data_hint = data_hint(tree) if plan.script else None
    roots = context.roots
    unique_name = f"__hooklint_model_{hashlib.sha1(str(path).encode()).hexdigest()[:12]}__"
    module = types.ModuleType(unique_name)
    module.__file__ = str(path)
    module.__package__ = None
    importer = LocalImporter(list(roots.own), on_dep, overrides)
    with _import_state(list(roots.search), importer, (unique_name,)):
        sys.modules[unique_name] = module
        os.chdir(path.parent)
        # a notebook is run as a script, never imported as a module of the package around it
        module_name = None if is_notebook(str(path)) else roots.module_name
        yield Session(path, module, importer, plan, unique_name, module_name, context)


@contextmanager
def project_session(root: Path, pythonpath: list[str] | tuple[str, ...] = (),
                    on_dep: Callable[[str, str], None] | None = None) -> Iterator[LocalImporter]:
    """Imports as code at the project root sees them (for ``models`` factories)."""
    roots = file_roots(root.resolve() / "__hooklint__.py", root.resolve(), pythonpath)
    importer = LocalImporter(list(roots.own), on_dep)
    with _import_state(list(roots.search), importer):
        os.chdir(root)
        yield importer


def exec_definitions(session: Session) -> None:
    """The file's definitions: a module of a package is imported by its dotted
    name (its package's ``__init__`` first, relative imports resolved, one copy
    of each module), as ``import pkg.models`` would; a script is executed as a
    module of its own."""
    if session.module_name is not None:
        module = importlib.import_module(session.module_name)
        origin = getattr(module, "__file__", None)
        if origin is None or os.path.realpath(origin) != str(session.path):
            raise ImportError(f"`import {session.module_name}` gives {origin or 'a module without a file'}, "
                              f"not this file")
        session.module = module
        return
    code = compile(session.plan.sanitized.tree, str(session.path), "exec")
    exec(code, session.namespace)  # noqa: S102 - definitions only


def user_error(exc: BaseException, skipped_names: Collection[str] = (),
               computed_names: Mapping[str, int] | None = None) -> str:
    """One line: the exception and the innermost user frame it came from."""
    if isinstance(exc, RememberedImportError):
        return exc.text
    text = one_line(exc)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if is_user_file(f.filename)]
    if frames:
        text += f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})"
    name = getattr(exc, "name", None) if isinstance(exc, NameError) else None
    if name is not None and computed_names and name in computed_names:
        text += (f"; `{name}` is computed at the top level (line {computed_names[name]}) and computing it "
                 f"failed while hooklint imported the definitions")
    elif name is not None and name in skipped_names:
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


class _Steps:
    """Runs each construction as one step of model code (see the worker)."""

    def __init__(self, session: Session, step: Callable[[str], Any], over_budget: tuple[type[BaseException], ...],
                 timed_out: Callable[[str], str] | None):
        self.session = session
        self.step = step
        self.over_budget = over_budget
        self.timed_out = timed_out
        sanitized = session.plan.sanitized
        self.skipped = sanitized.skipped_names
        self.computed = sanitized.computed_names

    def run(self, what: str, make: Callable[[], Any]) -> tuple[Any, str | None, str]:
        """(value, None, "") or (None, why it failed, kind)."""
        try:
            with self.step(what):
                return make(), None, ""
        except self.over_budget:
            return None, (self.timed_out(what) if self.timed_out else f"{what}: took too long"), "timeout"
        except BaseException as exc:  # noqa: BLE001 - user code: any failure is one diagnostic
            return None, user_error(exc, self.skipped, self.computed), ""


def _own_classes(model: nn.Module, module_names: set[str]) -> set[str]:
    """Names of the classes, defined in the file being analysed, of a model's modules."""
    return {type(m).__name__ for m in model.modules() if type(m).__module__ in module_names}


def build_instances(session: Session, step: Callable[[str], Any], over_budget: tuple[type[BaseException], ...]
                    | type[BaseException] = (), timed_out: Callable[[str], str] | None = None) -> BuildResult:
    """The instances :mod:`hooklint.graph.plan` describes, in its order."""
    if isinstance(over_budget, type):
        over_budget = (over_budget,)
    steps = _Steps(session, step, over_budget, timed_out)
    result = BuildResult()
    namespace = session.namespace
    own_module_names = {session.module.__name__}
    built_classes: set[str] = set()  # built on their own
    covered: set[str] = set()  # part of some built model

    def add(value: Any, source: str, line: int | None, class_name: str) -> bool:
        if not isinstance(value, nn.Module):
            return False
        if session.plan.data_hint is not None:
            # what the script's data code feeds (inputs.py reads it after the model's own sizes)
            object.__setattr__(value, INPUT_HINT, session.plan.data_hint)
        result.built.append(Built(value, source, line))
        built_classes.add(class_name)
        covered.update(_own_classes(value, own_module_names) | {class_name})
        result.failures.pop(class_name, None)
        return True

    # 1. constructor calls with literal arguments
    for call in session.plan.calls:
        expression = compile(ast.Expression(call.node), str(session.path), "eval")
        value, error, kind = steps.run(f"building {call.text} (line {call.line})",
                                       lambda: eval(expression, namespace))  # noqa: S307
        if error is not None:
            if call.class_name not in built_classes:
                result.failures.setdefault(call.class_name, Unanalysed(
                    call.class_name, call.line, f"{call.text} failed: {error}" if kind != "timeout" else error,
                    kind))
            continue
        add(value, call.text, call.line, call.class_name)
    # 1b. models the script builds from its command line (entry points), and their variants
    from hooklint.graph.entry_run import SKIPPED_WEIGHTS, run_entry

    for entry in session.plan.entries:
        if entry.open_options or entry.variants_capped:
            # the models built are not every configuration the script has: rules must not
            # conclude anything about "all the modules the project hooks" from them
            key = f"`{entry.binding}` (line {entry.line}): other configurations"
            why = (f"only the default of {', '.join('--' + o for o in entry.open_options)} is built (its other "
                   f"values select the architecture and hooklint cannot list them)" if entry.open_options else
                   f"only {len(entry.variants) + 1} of its configurations are built")
            result.failures[key] = Unanalysed(key, entry.line, why, "partial")
        for variant in (None, *entry.variants):
            label = entry.describe(variant)
            value, error, kind = steps.run(f"building {label}",
                                           lambda: run_entry(namespace, entry, str(session.path), variant))
            if error is not None:
                key = f"`{entry.binding}` (line {entry.line})" + (
                    " with " + " ".join(f"--{k}={v!r}" for k, v in variant[0]) if variant is not None else "")
                result.failures.setdefault(key, Unanalysed(key, entry.line, error if kind == "timeout" else
                                                           f"building {label} failed: {error}", kind))
                continue
            if SKIPPED_WEIGHTS:
                label += f", pretrained weights not downloaded ({os.path.basename(SKIPPED_WEIGHTS[0])})"
            add(value, label, entry.line, type(value).__name__)
    # 2. no-argument constructors
    classes = {}
    for candidate in session.plan.classes:
        cls = namespace.get(candidate.name)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            continue  # its base, from another file, is not a module after all
        classes[candidate.name] = (candidate, cls)
    needing_arguments: list[tuple[Any, type, str]] = []
    for name, (candidate, cls) in classes.items():
        if name in built_classes:
            continue
        if getattr(cls, "forward", None) is getattr(nn.Module, "forward", None):
            result.failures[name] = Unanalysed(name, candidate.line, "defines no forward (a base class)")
            continue
        if _required_parameters(cls):
            needing_arguments.append((candidate, cls, ""))
            continue
        value, error, kind = steps.run(f"building {name}() (no-argument constructor)", cls)
        if error is not None:
            earlier = result.failures.get(name)
            reason = error if kind == "timeout" else f"{name}() failed: {error}"
            if earlier is None and kind != "timeout":
                reason = f"no constructor call with literal arguments in the file; {reason}"
            elif earlier is not None and kind != "timeout":
                reason = f"{earlier.reason}; {reason}"
            result.failures[name] = Unanalysed(name, candidate.line, reason, kind)
            continue
        add(value, "a no-argument constructor", None, name)
    # 3. factories and fixtures, for classes that need arguments
    for factory in session.plan.factories:
        if factory.returns in covered or (not factory.fixture and factory.returns not in classes):
            continue
        function = _undecorated(session, factory.name, factory.line)
        if function is None:
            continue
        label = "fixture" if factory.fixture else "factory"
        value, error, kind = steps.run(f"calling the {label} {factory.name}() (line {factory.line})",
                                       lambda: _first_value(function()))
        returns = factory.returns or factory.name
        if error is not None:
            if returns in classes and returns not in covered:
                result.failures.setdefault(returns, Unanalysed(
                    returns, factory.line, error if kind == "timeout" else f"{factory.name}() failed: {error}",
                    kind))
            continue
        add(value, f"{label} {factory.name}()", factory.line, type(value).__name__ if isinstance(
            value, nn.Module) else returns)
    # 4. constructors whose required arguments are configuration objects with defaults
    for candidate, cls, _ in needing_arguments:
        if candidate.name in covered:
            continue
        arguments = _annotated_arguments(cls)
        if arguments is None:
            if candidate.name not in result.failures:
                result.failures[candidate.name] = Unanalysed(candidate.name, candidate.line, _needs_arguments(cls))
            continue
        text = f"{candidate.name}({', '.join(f'{k}={v.__name__}()' for k, v in arguments.items())})"
        value, error, kind = steps.run(f"building {text}", lambda: cls(**{k: v() for k, v in arguments.items()}))
        if error is not None:
            result.failures[candidate.name] = Unanalysed(
                candidate.name, candidate.line, error if kind == "timeout" else f"{text} failed: {error}", kind)
            continue
        add(value, text, None, candidate.name)
    for name in list(result.failures):
        if name in covered and result.failures[name].kind != "timeout":
            del result.failures[name]
    return result


def _required_parameters(cls: type) -> list[inspect.Parameter]:
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        return []
    return [p for p in signature.parameters.values() if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _needs_arguments(cls: type) -> str:
    names = ", ".join(p.name for p in _required_parameters(cls))
    return (f"its constructor needs arguments ({names}) and the project shows none with literal values (a call, "
            f"a factory, a fixture); add a factory to `models` in [tool.hooklint]")


def _annotated_arguments(cls: type) -> dict[str, type] | None:
    """Required constructor arguments annotated with a class that needs no
    argument itself (a configuration dataclass), or None."""
    import typing

    required = _required_parameters(cls)
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # noqa: BLE001 - unresolvable annotations: no guess
        hints = {}
    out: dict[str, type] = {}
    for param in required:
        hint = hints.get(param.name, param.annotation)
        if hint is param.empty or not isinstance(hint, type) or issubclass(hint, (nn.Module, torch.Tensor)) or hint.__module__ in (
                "builtins", "typing") or _required_parameters(hint):
            return None
        out[param.name] = hint
    return out or None


def _undecorated(session: Session, name: str, line: int) -> Callable[[], Any] | None:
    """The function ``name`` of the file without its decorators (a pytest fixture
    cannot be called directly), with the module's globals."""
    return undecorated_function(session.namespace, session.plan.sanitized.tree, str(session.path), name, line)


def undecorated_function(namespace: dict[str, Any], tree: ast.Module, filename: str, name: str,
                         line: int | None = None) -> Callable[[], Any] | None:
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == name and (line is None or stmt.lineno == line):
            bare = copy.copy(stmt)
            bare.decorator_list = []
            module = ast.fix_missing_locations(ast.Module(body=[bare], type_ignores=[]))
            scratch: dict[str, Any] = {}
            exec(compile(module, filename, "exec"), namespace, scratch)  # noqa: S102 - the file's own function
            return scratch.get(name)
    return None


def _first_value(value: Any) -> Any:
    """A fixture that yields gives its first value."""
    if inspect.isgenerator(value):
        return next(value)
    return value


def run_factory(spec: str, guard=None) -> Built:
    """``pkg.mod:build`` -> the module it returns (and example inputs, if it returns them).
    ``guard``: run it under that guard (callers that are not a worker step)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"`{spec}` is not of the form `package.module:function`")
    with guard.running_user_code() if guard is not None else contextlib.nullcontext():
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


def rebuild_model(namespace: dict[str, Any], plan: Plan, model: dict[str, Any], filename: str) -> nn.Module:
    """A new instance of a model the graph layer analysed, from its facts
    (``ModelFacts.to_dict()``: ``source``, ``class_name``, ``call_line``), in
    the file's executed definitions ``namespace`` (``plan`` is the file's plan).
    For code that runs the model again (``--fix --verify``): every way
    :func:`build_instances` builds one.  Raises LookupError when the way it was
    built is not in the file any more; the model's own errors propagate."""
    source = model["source"]
    class_name = model["class_name"]
    if source.startswith("factory ") and ":" in source:  # [tool.hooklint] models
        return run_factory(source[len("factory "):]).model
    if source.startswith(("factory ", "fixture ")) and source.endswith("()"):  # the file's own function
        name = source.split(" ", 1)[1][:-2]
        function = undecorated_function(namespace, plan.sanitized.tree, filename, name)
        if function is None:
            raise LookupError(f"`{name}` is not defined in the file any more")
        return _first_value(function())
    entry = next((e for e in plan.entries if model.get("call_line") == e.line and source.startswith(
        f"`{e.binding} = ")), None)
    if entry is not None:
        from hooklint.graph.entry_run import run_entry

        variant = next((v for v in entry.variants if entry.describe(v) == source), None)
        return run_entry(namespace, entry, filename, variant)
    call = next((c for c in plan.calls if c.text == source), None) or next(
        (c for c in plan.calls if model.get("call_line") is not None and c.line == model["call_line"]
         and c.class_name == class_name), None)
    if call is not None:
        return eval(compile(ast.Expression(call.node), filename, "eval"), namespace)  # noqa: S307
    cls = namespace.get(class_name)
    if not isinstance(cls, type):
        raise LookupError(f"class {class_name} is not defined in the file any more")
    if source == "a no-argument constructor":
        return cls()
    arguments = _annotated_arguments(cls) if source.startswith(f"{class_name}(") else None
    if arguments is None:
        raise LookupError(f"the constructor call `{source}` is not in the file any more")
    return cls(**{k: v() for k, v in arguments.items()})


@lru_cache(maxsize=256)
def _class_lines(path: str) -> dict[str, int]:
    try:
        tree = ast.parse(analysis_text(path), path)
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
