"""Hooks linked to models across files (parent process: no torch, no user code).

An optimizer, a pruner or an explainer registers hooks on the model its
caller passes (``KFACOptimizer(net)``, ``GradCAM(model, model.layer4[-1])``,
``save_grad_data(qnn, module)``), and the caller, a script of the project,
builds that model.  :class:`ProjectHooks` answers, from the syntax of the
project's files (:mod:`hooklint.static.hooked_params`), which parameters of
which callables end up hooked, following parameters handed from callable to
callable across files.  :func:`link_across_files` then reads the call sites
in the checked files whose models the graph layer built, and gives the file
that registers each hook a :class:`~hooklint.graph.facts.LinkedHook`: the
modules of the caller's concrete model it lands on, and through which calls.

A link is *exact* when every module the path reaches is hooked (no
``if`` about the module that hooklint cannot read, no unknown part), and
*complete* when every call site of the hooking callable in the checked files
was linked (so the modules are all the modules the project hooks there).
Rules claim something about one module only from exact links, and something
about all of them ("no in-place op follows any hooked module") only from
complete links.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from hooklint.graph.facts import FileFacts, LinkedHook, ModelFacts
from hooklint.graph.project import ProjectIndex, parse_file
from hooklint.graph.roots import FileRoots, file_roots
from hooklint.static.hooked_params import (
    Callee,
    HookedParams,
    ParamHook,
    ParamPass,
    ParamRef,
    Step,
    summarize_hooked_params,
)

_CLOSURE_DEPTH = 5
_MAX_SITE_FILES = 64
Key = tuple[str, str]  # (real path, local qualname)


@dataclass(frozen=True)
class DerivedHook:
    """A registration reached from a parameter of ``key``'s callable."""

    key: Key
    ref: ParamRef
    steps: tuple[Step, ...]
    classes: tuple[str, ...] | None
    exact: bool
    hook: ParamHook
    hook_file: str
    via: tuple[str, ...]  # the calls handing the module on, outermost first ("layer_recon.py:69 `save_grad_data(...)`")


@dataclass
class _FileInfo:
    path: str
    tree: ast.Module
    model: object  # SemanticModel
    summary: HookedParams
    roots: FileRoots


class ProjectHooks:
    """Hooked parameters of the project's callables, read on demand."""

    def __init__(self, config_root: Path, pythonpath: Iterable[str] = (), index: ProjectIndex | None = None):
        self.config_root = Path(config_root)
        self.pythonpath = tuple(pythonpath)
        self.index = index or ProjectIndex()
        self._files: dict[str, _FileInfo | None] = {}
        self._derived: dict[Key, list[DerivedHook]] = {}

    def info(self, path: str) -> _FileInfo | None:
        real = os.path.realpath(path)
        if real not in self._files:
            self._files[real] = self._read(real)
        return self._files[real]

    def _read(self, path: str) -> _FileInfo | None:
        text = _file_text(path)
        tree = parse_file(path)
        if tree is None:
            return None
        from hooklint.static.hooks import HookIndex
        from hooklint.static.semantic import SemanticModel
        from hooklint.static.values import Inference

        model = SemanticModel(tree)
        registrations = []
        if "register_" in text and "hook" in text:
            inference = Inference(model)
            registrations = HookIndex(model, inference).registrations
        else:
            inference = Inference(model)
        summary = summarize_hooked_params(model, inference, registrations)
        relative = any(isinstance(n, ast.ImportFrom) and n.level for n in tree.body)
        roots = file_roots(path, self.config_root, self.pythonpath, relative)
        return _FileInfo(path, tree, model, summary, roots)

    # ------------------------------------------------------------ callees

    def resolve(self, info: _FileInfo, call: ast.Call) -> Key | None:
        """The project callable a call names: a class or function of this file
        (module level, or nested in a function), or of another file of the
        project through its imports."""
        model = info.model
        func = call.func
        if isinstance(func, ast.Name) and hasattr(func, "_hl_scope"):
            bindings = model.bindings_at(func)  # type: ignore[attr-defined]
            if len(bindings) == 1 and bindings[0].kind in ("def", "class"):
                callee = _local_callee(info, bindings[0].node)
                return (info.path, callee.qualname) if callee is not None else None
        qual = model.qualify(func) if hasattr(func, "_hl_scope") else None  # type: ignore[attr-defined]
        candidates = [qual] if qual else []
        if qual is None and isinstance(func, ast.Name) and not model.bindings_at(func):  # type: ignore[attr-defined]
            from hooklint.static.hooked_params import star_imports

            candidates = [f"{m}.{func.id}" for m in star_imports(info.tree)]
        return self._resolve_names(info, candidates)

    def _resolve_names(self, info: _FileInfo, candidates: list[str]) -> Key | None:
        for qual in candidates:
            if qual.startswith(("<local>.", "builtins.", "torch.")):
                continue
            target = self.index.target(qual, info.roots, Path(info.path))
            if target is not None:
                return os.path.realpath(target.path), target.name
        return None

    def resolve_pass(self, info: _FileInfo, passed: ParamPass) -> Key | None:
        if passed.target_node is not None:
            callee = _local_callee(info, passed.target_node)
            return (info.path, callee.qualname) if callee is not None else None
        if passed.star_modules:
            return self._resolve_names(info, [f"{m}.{passed.target}" for m in passed.star_modules])
        return self._resolve_names(info, [passed.target])

    def registers_hooks(self, key: Key, depth: int = 0) -> bool:
        """The callable's file, the file of one of its class's bases (through its
        imports), or a callable it hands its parameters to, registers module hooks
        somewhere."""
        info = self.info(key[0])
        if info is None or depth > 2:
            return False
        if self.index.registers_hooks(info.path):
            return True
        for passed in info.summary.passes:
            if passed.ref.callee.qualname == key[1]:
                target = self.resolve_pass(info, passed)
                if target is not None and target != key and self.registers_hooks(target, depth + 1):
                    return True
        for stmt in info.tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == key[1]:
                for base in stmt.bases:
                    qual = info.model.qualify(base) if hasattr(base, "_hl_scope") else None  # type: ignore[attr-defined]
                    names = [qual] if qual else []
                    if not names and isinstance(base, ast.Name):
                        from hooklint.static.hooked_params import star_imports

                        names = [f"{m}.{base.id}" for m in star_imports(info.tree)]
                    target = self._resolve_names(info, names) if names else None
                    if target is not None and target != key and self.index.registers_hooks(target[0]):
                        return True
        return False

    # ------------------------------------------------------------ closure

    def hooks_of(self, key: Key, depth: int = 0) -> list[DerivedHook]:
        """Every registration a call of ``key`` reaches through its parameters."""
        if key in self._derived:
            return self._derived[key]
        self._derived[key] = []  # a cycle (a recursive helper) adds nothing more
        info = self.info(key[0])
        if info is None or depth > _CLOSURE_DEPTH:
            return []
        out: list[DerivedHook] = []
        for hook in info.summary.hooks:
            if hook.ref.callee.qualname == key[1]:
                out.append(DerivedHook(key, hook.ref, hook.steps, hook.classes, hook.exact, hook, info.path, ()))
        recursive = False
        for passed in info.summary.passes:
            if passed.ref.callee.qualname != key[1]:
                continue
            target = self.resolve_pass(info, passed)
            if target == key:
                # `recon(model)` calling `recon(child)` for each child: any descendant can be reached
                recursive = recursive or all(step.kind in ("children", "each", "attr", "index") for step in passed.steps)
                continue
            if target is None:
                continue
            for inner in self.hooks_of(target, depth + 1):
                if not _same_param(inner.ref, passed):
                    continue
                where = f"{os.path.basename(info.path)}:{passed.line} `{passed.text}`"
                out.append(DerivedHook(
                    key, passed.ref, passed.steps + inner.steps, _intersect(passed.classes, inner.classes),
                    passed.exact and inner.exact, inner.hook, inner.hook_file, (where,) + inner.via))
        if recursive:
            from dataclasses import replace

            out += [replace(d, steps=(Step("each"),) + d.steps, exact=False) for d in out]
        self._derived[key] = out
        return out


def project_hooks(context) -> ProjectHooks:
    """The run's :class:`ProjectHooks` (kept on its ProjectIndex: one per run)."""
    index = context.index
    hooks = getattr(index, "_hooked_params", None)
    if hooks is None:
        hooks = ProjectHooks(context.config_root, context.pythonpath, index)
        index._hooked_params = hooks
    return hooks


def _same_param(ref: ParamRef, passed: ParamPass) -> bool:
    """The pass hands its value to the parameter ``ref`` names."""
    if passed.keyword is not None:
        return passed.keyword == ref.param
    return passed.position is not None and passed.position == ref.position


def _intersect(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if a is None:
        return b
    if b is None:
        return a
    return tuple(x for x in a if x in b)


def _local_callee(info: _FileInfo, node: ast.AST) -> Callee | None:
    found = info.summary.callees.get(id(node))
    if found is not None:
        return found
    if isinstance(node, ast.ClassDef):
        return Callee(node.name, True, node.lineno)
    return None


@lru_cache(maxsize=2048)
def _text(path: str, mtime: int) -> str:
    from hooklint.static.source import SourceError, read_source

    try:
        return read_source(path)
    except SourceError:
        return ""


def _file_text(path: str) -> str:
    try:
        return _text(path, os.stat(path).st_mtime_ns)
    except OSError:
        return ""


# ---------------------------------------------------------------- linking

# Methods that return the module itself, and wrappers whose `.module` is the model.
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "eval", "train", "float", "double", "half", "bfloat16",
                           "requires_grad_", "share_memory"})
_WRAPPERS = frozenset({"DataParallel", "DistributedDataParallel"})


@dataclass
class _Models:
    """The built models a name can hold at a call site."""

    models: list[ModelFacts]
    prefix: tuple[Step, ...] = ()  # steps from the name to the built model's root (none, or through `.module`)
    exact: bool = True  # the name certainly holds these (no other binding can reach the call)
    all_built: bool = True  # every configuration the statement was planned with was built


def models_of(info_model, facts: FileFacts, expr: ast.AST, depth: int = 0) -> tuple[_Models, list[Step]] | None:
    """(the models ``expr``'s base name holds, the steps from it to ``expr``):
    ``net.layer4[-1]`` with ``net = get_network(...)`` built by the graph layer."""
    steps: list[Step] = []
    cur = expr
    while True:
        if isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute) and cur.func.attr in _RETURNS_SELF:
            cur = cur.func.value  # `model.cuda()` is the model
        elif isinstance(cur, ast.Attribute):
            steps.insert(0, Step("attr", cur.attr))
            cur = cur.value
        elif isinstance(cur, ast.Subscript):
            key = cur.slice
            if isinstance(key, ast.UnaryOp) and isinstance(key.op, ast.USub) and isinstance(key.operand, ast.Constant) \
                    and isinstance(key.operand.value, int):
                steps.insert(0, Step("index", -key.operand.value))
            elif isinstance(key, ast.Constant) and isinstance(key.value, int) and not isinstance(key.value, bool):
                steps.insert(0, Step("index", key.value))
            elif isinstance(key, ast.Constant) and isinstance(key.value, str):
                steps.insert(0, Step("key", key.value))
            else:
                return None
            cur = cur.value
        else:
            break
    if not isinstance(cur, ast.Name) or not hasattr(cur, "_hl_scope"):
        return None
    found = _models_of_name(info_model, facts, cur, depth)
    return (found, steps) if found is not None else None


def _models_of_name(model, facts: FileFacts, name: ast.Name, depth: int) -> _Models | None:
    if depth > 6:
        return None
    bindings = model.bindings_at(name)
    if len(bindings) != 1:
        return None
    binding = bindings[0]
    if binding.kind != "assign" or not isinstance(binding.value, ast.AST):
        return None
    line = binding.lineno
    here = os.path.realpath(facts.origin) if facts.origin else None
    built = [m for m in facts.models if m.call_line == line and m.origin_file is not None
             and (here is None or os.path.realpath(m.origin_file) == here)]
    if built:
        failed = any(u.line == line and u.class_name.startswith(f"`{name.id}`") for u in facts.unanalysed)
        return _Models(built, (), not _conditional(binding.node), not failed)
    value = binding.value
    if binding.path:
        return None  # a part of a tuple that was not built as such
    # `net = net.to(device)`, `model = nn.DataParallel(model)`: the model built before
    inner: ast.AST | None = None
    prefix: tuple[Step, ...] = ()
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _RETURNS_SELF:
        inner = value.func.value
    elif isinstance(value, ast.Call) and value.args and _callee_name(value.func) in _WRAPPERS:
        inner, prefix = value.args[0], (Step("attr", "module"),)
    elif isinstance(value, ast.Name):
        inner = value
    if isinstance(inner, ast.Name) and hasattr(inner, "_hl_scope"):
        found = _models_of_name(model, facts, inner, depth + 1)
        if found is None:
            return None
        return _Models(found.models, prefix + found.prefix, found.exact and not _conditional(binding.node),
                       found.all_built)
    return None


def _conditional(node: ast.AST) -> bool:
    """The binding is in an ``if`` (another binding may reach the use)."""
    parent = getattr(node, "_hl_parent", None)
    while parent is not None and not isinstance(parent, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)):
        if isinstance(parent, ast.If) and any(isinstance(n, ast.Name) and n.id == "__name__"
                                              for n in ast.walk(parent.test)):
            pass  # the `__main__` block: what running the script does
        elif isinstance(parent, (ast.If, ast.For, ast.While, ast.Try)):
            return True
        parent = getattr(parent, "_hl_parent", None)
    return False


def _callee_name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def module_paths(model: ModelFacts, steps: Iterable[Step], classes: tuple[str, ...] | None
                 ) -> tuple[list[str], bool]:
    """The paths of ``model``'s modules that ``steps`` reach from its root, kept
    by ``classes`` (compared with each module's class and its bases); and
    whether that set is exact (no step it could not follow)."""
    paths = {m.path for m in model.modules}
    children = _children_index(model)
    current = [""]
    exact = True
    for step in steps:
        nxt: list[str] = []
        for base in current:
            prefix = base + "." if base else ""
            if step.kind in ("attr", "key"):
                candidate = prefix + str(step.value)
                if candidate in paths:
                    nxt.append(candidate)
                elif step.kind == "attr" and step.value == "module" and not base:
                    nxt.append(base)  # `.module` of a DataParallel wrapper the facts do not hold
                else:
                    exact = False
            elif step.kind == "index":
                kids = children.get(base, [])
                index = int(step.value)  # type: ignore[arg-type]
                if -len(kids) <= index < len(kids) and all(c.rsplit(".", 1)[-1].isdigit() for c in kids):
                    ordered = sorted(kids, key=lambda c: int(c.rsplit(".", 1)[-1]))
                    nxt.append(ordered[index])
                else:
                    exact = False
            elif step.kind == "pick":
                continue  # handled below, on the whole list
            elif step.kind == "each":
                nxt += [p for p in paths if p == base or p.startswith(prefix) or not base]
            elif step.kind == "children":
                nxt += children.get(base, [])
            else:  # "part": some submodule, which one is not known
                nxt += [p for p in paths if p.startswith(prefix) or not base]
                exact = False
        if step.kind == "pick":  # the i-th of the modules listed so far, in the model's order
            order = {m.path: i for i, m in enumerate(model.modules)}
            listed = sorted(current, key=lambda p: order.get(p, 0))
            index = int(step.value)  # type: ignore[arg-type]
            nxt = [listed[index]] if -len(listed) <= index < len(listed) else []
            exact = exact and bool(nxt)
        current = list(dict.fromkeys(nxt))
    if classes is not None:
        by_path = {m.path: m for m in model.modules}
        current = [p for p in current if _class_matches(by_path[p], classes)]
    return current, exact


_CHILDREN: dict[int, tuple[ModelFacts, dict[str, list[str]]]] = {}


def _children_index(model: ModelFacts) -> dict[str, list[str]]:
    """Each module path's direct children, in the model's order (computed once per model)."""
    found = _CHILDREN.get(id(model))
    if found is not None and found[0] is model:
        return found[1]
    index: dict[str, list[str]] = {}
    for module in model.modules:
        if module.path:
            parent = module.path.rpartition(".")[0]
            index.setdefault(parent, []).append(module.path)
    if len(_CHILDREN) > 256:
        _CHILDREN.clear()
    _CHILDREN[id(model)] = (model, index)
    return index


def _class_matches(module, classes: tuple[str, ...]) -> bool:
    names = (module.class_name,) + tuple(module.bases)
    return any(c in names for c in classes)


@dataclass
class _Site:
    key: Key  # the callable called
    file: str
    call: ast.Call
    linked: bool


@dataclass
class Linker:
    hooks: ProjectHooks
    facts: dict[str, FileFacts]
    checked: list[str]
    sites: dict[Key, list[_Site]] = field(default_factory=dict)
    _complete: dict[Key, bool] = field(default_factory=dict)
    _site_cache: dict[Key, list[_Site]] = field(default_factory=dict)
    _calls: dict[str, dict[str, list[ast.Call]]] = field(default_factory=dict)

    def calls_named(self, info: _FileInfo, name: str) -> list[ast.Call]:
        """The calls of a file whose callee's last name is ``name`` (one walk per file)."""
        index = self._calls.get(info.path)
        if index is None:
            index = {}
            for node in ast.walk(info.tree):
                if isinstance(node, ast.Call):
                    index.setdefault(_callee_name(node.func), []).append(node)
            self._calls[info.path] = index
        return index.get(name, [])

    def run(self) -> None:
        entry_files = [(p, f) for p, f in list(self.facts.items()) if _built_from_calls(f)]
        for path, found in entry_files:
            found.origin = path
            self._link_file(path, found)
        for found in self.facts.values():
            for i, linked in enumerate(found.linked):
                found.linked[i] = linked.with_complete(linked.all_built and self.complete(linked.callee_key))

    def _link_file(self, path: str, facts: FileFacts) -> None:
        info = self.hooks.info(path)
        if info is None:
            return
        for node in ast.walk(info.tree):
            if not isinstance(node, ast.Call):
                continue
            key = self.hooks.resolve(info, node)
            if key is None:
                continue
            derived = self.hooks.hooks_of(key)
            if not derived:
                continue
            text = ast.unparse(node)
            text = text if len(text) <= 70 else text[:67] + "..."
            linked_any = False
            for hook in derived:
                argument = _argument(node, hook.ref)
                if argument is None:
                    continue
                found = models_of(info.model, facts, argument)
                if found is None:
                    continue
                models, steps = found
                for model in models.models:
                    paths, exact = module_paths(model, models.prefix + tuple(steps) + hook.steps, hook.classes)
                    if not paths:
                        continue
                    linked_any = True
                    self._add(hook, model, paths, exact and hook.exact and models.exact,
                              (f"{os.path.basename(path)}:{node.lineno} `{text}`",) + hook.via, key,
                              models.all_built)
            self.sites.setdefault(key, []).append(_Site(key, path, node, linked_any))

    def _add(self, hook: DerivedHook, model: ModelFacts, paths: list[str], exact: bool, via: tuple[str, ...],
             key: Key, all_built: bool) -> None:
        target = hook.hook_file
        found = next((f for p, f in self.facts.items() if os.path.realpath(p) == target), None)
        if found is None:
            from hooklint.engine import display_path

            display = next((p for p in self.checked if os.path.realpath(p) == target), target)
            found = FileFacts(display_path(display))
            found.linked_only = True
            self.facts[next((p for p in self.checked if os.path.realpath(p) == target), target)] = found
        found.linked.append(LinkedHook(
            line=hook.hook.line, col=hook.hook.col, kind=hook.hook.kind, method=hook.hook.method,
            model=model, paths=tuple(sorted(paths, key=_path_order(model))), exact=exact, complete=False,
            via=via, callee=f"{key[1]}", callee_key=(hook.hook_file, hook.hook.ref.callee.qualname),
            all_built=all_built))

    # ------------------------------------------------------------ completeness

    def complete(self, key: Key, seen: frozenset[Key] = frozenset()) -> bool:
        """Every call of ``key`` in the checked files hands it a model the graph
        layer built, directly or through a callable whose own calls all do (a
        chain such as layer_reconstruction -> save_grad_data -> GetLayerGrad)."""
        if key in self._complete:
            return self._complete[key]
        if key in seen or len(seen) > _CLOSURE_DEPTH:
            return False
        sites = self._all_sites(key)
        answer = bool(sites) and all(site.linked or self._passed_on(site, key, seen | {key}) for site in sites)
        if not seen:
            self._complete[key] = answer  # (an answer under a cycle guard is not the whole answer)
        return answer

    def _all_sites(self, key: Key) -> list[_Site]:
        """Calls of ``key`` in the checked files, linked or not."""
        if key not in self._site_cache:
            self._site_cache[key] = self._find_sites(key)
        return self._site_cache[key]

    def _find_sites(self, key: Key) -> list[_Site]:
        out = list(self.sites.get(key, []))
        known = {(s.file, s.call.lineno, s.call.col_offset) for s in out}
        name = key[1].rsplit(".", 1)[-1]
        pattern = re.compile(rf"\b{re.escape(name)}\s*\(")
        scanned = 0
        candidates = list(self.checked)
        if key[0] not in {os.path.realpath(p) for p in candidates}:
            candidates.append(key[0])  # its own file calls it too (a recursive helper), checked or not
        for path in candidates:
            text = _file_text(path)
            if not pattern.search(text):
                continue
            scanned += 1
            if scanned > _MAX_SITE_FILES:
                return []  # too many files name it to be sure
            info = self.hooks.info(path)
            if info is None:
                continue
            for node in self.calls_named(info, name):
                if (info.path, node.lineno, node.col_offset) not in known \
                        and (path, node.lineno, node.col_offset) not in known:
                    if self.hooks.resolve(info, node) == key:
                        known.add((info.path, node.lineno, node.col_offset))
                        out.append(_Site(key, info.path, node, False))
        return out

    def _passed_on(self, site: _Site, key: Key, seen: frozenset[Key]) -> bool:
        """A call inside a callable that hands it that callable's own parameter:
        linked when the outer callable's calls all are."""
        info = self.hooks.info(site.file)
        if info is None:
            return False
        for passed in info.summary.passes:
            if passed.line == site.call.lineno and self.hooks.resolve_pass(info, passed) == key:
                outer = (info.path, passed.ref.callee.qualname)
                return self.complete(outer, seen)
        return False


def _built_from_calls(found: FileFacts) -> bool:
    return any(m.call_line is not None and m.origin_file for m in found.models)


def _path_order(model: ModelFacts):
    order = {m.path: i for i, m in enumerate(model.modules)}
    return lambda p: order.get(p, len(order))


def _argument(call: ast.Call, ref: ParamRef) -> ast.expr | None:
    found = next((k.value for k in call.keywords if k.arg == ref.param), None)
    if found is None and ref.position is not None and ref.position < len(call.args) \
            and not any(isinstance(a, ast.Starred) for a in call.args[:ref.position + 1]):
        found = call.args[ref.position]
    return found


def link_across_files(facts: dict[str, FileFacts], checked: list[str], config_root: Path,
                      pythonpath: Iterable[str] = ()) -> None:
    """Add :class:`LinkedHook` records to the files that register hooks on
    models built by other checked files (creating facts for files the graph
    layer did not import)."""
    if not any(_built_from_calls(f) for f in facts.values()):
        return
    Linker(ProjectHooks(config_root, pythonpath), facts, checked).run()


__all__ = ["ProjectHooks", "DerivedHook", "link_across_files", "module_paths", "models_of"]
