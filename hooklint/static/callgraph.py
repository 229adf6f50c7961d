"""What one file contributes to the project's call graph, and the questions
about repetition that the lifetime rules ask of every function.

A hook registered in a function leaks when the function runs again with the
same target.  Whether it runs again is decided by its call sites, which may
be in other files: a Grad-CAM class registers in its constructor, a training
script in another folder builds one per batch.  This module answers, for one
file and without importing anything:

- :class:`Dependence`: on which of a function's parameters the object an
  expression names depends ("the same object on every call as long as
  ``model`` is the same").
- :class:`Guards`: is a statement under a condition that can make it run
  once (``if self._handle is None``, an early ``return`` on a flag).
- :func:`summarize`: the file's *summary*, a small JSON-able dict: its
  functions (parameters, kind, whether torch runs them on every step), its
  classes (bases), its module-level imports (for re-exports), and its call
  sites of functions, constructors and methods that can be named from another
  file, each with the context that repeats it (a loop, a comprehension, a
  per-step method) and, per argument, whether it is the same object each
  time.  ``hooklint.static.project`` merges the summaries of all checked
  files into a project index.

Everything is answered on the syntax, conservatively: where the answer is not
clear, the dependence is "unknown" (None) and nothing downstream reports.
"""

from __future__ import annotations

import ast
import os
from functools import lru_cache
from typing import Any, Iterable

from hooklint.static.flow import (
    LoopNode,
    block_of,
    contains,
    enclosing_comprehension,
    enclosing_loops,
    executed_nodes,
    function_of,
    later_statements,
    names_stored_in,
    statement_of,
)
from hooklint.static.semantic import (
    ClassInfo,
    class_base_expr,
    FunctionNode,
    SemanticModel,
    is_classmethod,
    is_staticmethod,
    positional_params,
)
from hooklint.static.values import Inference

SUMMARY_FORMAT = 8  # 8: "bypass_call" (a class whose own __call__ skips nn.Module.__call__: HKL303)
EMPTY: frozenset[str] = frozenset()

# Methods that torch or Lightning call once per step on the same module.
PER_STEP_METHODS = frozenset({"forward", "training_step", "validation_step", "test_step", "predict_step"})
# Calls that return the same objects each time they are made on the same module.
STABLE_ACCESSORS = frozenset({
    "modules", "children", "named_modules", "named_children", "parameters", "named_parameters", "buffers",
    "named_buffers", "get_submodule", "get_parameter", "get_buffer", "items", "values", "keys",
})
# Module methods that return the module itself (`model.to(device)`).
RETURNS_SELF = frozenset({"to", "cuda", "cpu", "eval", "train", "float", "double", "half", "bfloat16",
                          "requires_grad_", "type", "share_memory"})
# A method's own object, and its attributes, in dependence sets.
SELF = "self"
# Builtins whose result holds the same objects as their arguments, or is a pure function of them
# (`range(self.num_groups)`, `len(groups)`: the same indices when the arguments are the same).
_PASS_THROUGH_BUILTINS = frozenset({"getattr", "enumerate", "list", "tuple", "reversed", "sorted", "zip", "iter",
                                    "dict", "range", "len"})
# Callees that are never part of a user's call graph.
_FOREIGN_ROOTS = frozenset({
    "torch", "builtins", "numpy", "typing", "math", "os", "sys", "re", "json", "logging", "warnings",
    "functools", "itertools", "collections", "contextlib", "dataclasses", "copy", "inspect", "abc", "enum",
    "pathlib", "time", "threading", "types", "operator", "weakref", "random", "pickle", "shutil", "subprocess",
    "tempfile", "io", "string", "textwrap", "unittest", "pytest", "argparse", "gc", "traceback",
})


# ------------------------------------------------------------------ modules

@lru_cache(maxsize=4096)
def _is_package_dir(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "__init__.py")) or os.path.isfile(os.path.join(folder, "__init__.pyi"))


def module_name(path: str) -> str:
    """The dotted name Python imports the file as: its folders up to the first
    one without ``__init__.py``, then its stem (``pkg/sub/mod.py`` -> ``pkg.sub.mod``)."""
    full = os.path.abspath(path)
    folder, filename = os.path.split(full)
    stem = filename.split(".", 1)[0]
    parts = [] if stem == "__init__" else [stem]
    while _is_package_dir(folder):
        folder, name = os.path.split(folder)
        if not name:
            break
        parts.insert(0, name)
    return ".".join(parts) or stem


def _is_package_file(path: str) -> bool:
    return os.path.basename(path).split(".", 1)[0] == "__init__"


def absolute_import(module: str, is_package: bool, level: int, target: str | None) -> str | None:
    """``from ..x import y`` in ``module`` -> the absolute ``pkg.x`` (None when it climbs too far)."""
    parts = module.split(".") if module else []
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        if level - 1 > len(parts):
            return None
        parts = parts[:len(parts) - (level - 1)]
    if target:
        parts = parts + target.split(".")
    return ".".join(parts) or None


# --------------------------------------------------------------- dependence

class UnitFacts:
    """Names and attributes stored in a loop or a function (every call site
    and every registration asks about its units).  Functions get theirs from
    one pass over the nodes the semantic model visited; loops, fewer and
    smaller, are walked when asked."""

    def __init__(self, model: SemanticModel) -> None:
        self.model = model
        self._facts: dict[int, tuple[set[str], set[str], set[str]]] = {}
        self._functions_done = False
        self._scratch: dict[int, set[str]] = {}

    def _of(self, unit: ast.AST) -> tuple[set[str], set[str], set[str]]:
        if not self._functions_done:
            self._functions_done = True
            self._build_functions()
        found = self._facts.get(id(unit))
        if found is None:
            found = self._facts[id(unit)] = _stored_in(unit)
        return found

    def names(self, unit: ast.AST) -> set[str]:
        """As :func:`hooklint.static.flow.names_stored_in`."""
        return self._of(unit)[0]

    def attributes(self, unit: ast.AST) -> set[str]:
        """As :func:`hooklint.static.flow.attributes_stored_in`."""
        return self._of(unit)[1]

    def scratch_attributes(self, unit: ast.AST) -> set[str]:
        """Attributes the unit stores only on its own scratch objects
        (``cfg.model = ...`` where ``cfg`` is bound in the unit only to an
        object it builds: ``cfg = Namespace(**load(path))``, a dict or list
        display) and no other function of the file stores: new on every run,
        so reading them back cannot make a later run skip anything.  A
        constructor is told by its CapWords name (PEP 8): a guess that keeps a
        getter's persistent object a flag holder."""
        key = id(unit)
        found = self._scratch.get(key)
        if found is None:
            found = set()
            by_function = self.function_attributes()
            stores: dict[str, list[ast.Attribute]] = {}
            for node in ast.walk(unit):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    stores.setdefault(node.attr, []).append(node)
            for attr, nodes in stores.items():
                if any(attr in attrs for fid, attrs in by_function.items() if fid != key):
                    continue
                if all(self._fresh_local(node.value, unit) for node in nodes):
                    found.add(attr)
            self._scratch[key] = found
        return found

    def _fresh_local(self, base: ast.AST, unit: ast.AST) -> bool:
        if not isinstance(base, ast.Name):
            return False
        bindings = [b for b in self.model.lookup(base.id, self.model.scope_of(base)) if contains(unit, b.node)]
        if not bindings:
            return False
        for binding in bindings:
            if binding.kind != "assign" or binding.path or binding.scope.node is not unit:
                return False
            value = binding.value
            if isinstance(value, (ast.Dict, ast.List)):
                continue
            if not isinstance(value, ast.Call):
                return False
            callee = value.func.attr if isinstance(value.func, ast.Attribute) else \
                value.func.id if isinstance(value.func, ast.Name) else ""
            if not (callee[:1].isupper() and not callee.isupper()):
                return False
        return True

    def inner_loop_targets(self, unit: ast.AST) -> set[str]:
        """Names bound as targets of the loops and comprehensions inside the unit."""
        return self._of(unit)[2]

    def function_attributes(self) -> dict[int, set[str]]:
        """Attributes stored by each function and lambda, by id of its node."""
        if not self._functions_done:
            self._functions_done = True
            self._build_functions()
        return {key: facts[1] for key, facts in self._facts.items() if key in self._function_ids}

    def _build_functions(self) -> None:
        """Every node belongs to the function whose code runs it: the nearest
        function, lambda, class or module scope, looking through comprehensions."""
        owners: dict[int, tuple[set[str], set[str], set[str]]] = {}
        self._function_ids: set[int] = set()
        tree = self.model.tree
        for node in getattr(self.model, "_visited", ()):
            kind = type(node)
            if kind is ast.Name:
                if isinstance(node.ctx, ast.Load):
                    continue
                slot = 0
            elif kind is ast.Attribute:
                if not isinstance(node.ctx, ast.Store):
                    continue
                slot = 1
            elif kind in _FACT_NODES:
                slot = 2
            else:
                continue
            scope = getattr(node, "_hl_scope", None)
            while scope is not None and scope.kind == "comprehension":
                scope = scope.parent
            if scope is None or scope.kind == "class":
                continue
            owner = scope.node if scope.kind in ("function", "lambda") else tree
            facts = owners.get(id(owner))
            if facts is None:
                facts = owners[id(owner)] = (set(), set(), set())
                if owner is not tree:
                    self._function_ids.add(id(owner))
            if slot == 0:
                facts[0].add(node.id)
            elif slot == 1:
                facts[1].add(node.attr)
            elif kind in (ast.For, ast.AsyncFor, ast.comprehension):
                facts[2].update(names_stored_in(node.target))
            elif kind in (ast.Import, ast.ImportFrom):
                facts[0].update((a.asname or a.name).split(".")[0] for a in node.names)
            elif kind is ast.ExceptHandler:
                if node.name:
                    facts[0].add(node.name)
            else:  # a def or class statement binds its name where it stands
                facts[0].add(node.name)
        for func in self.model.functions:
            self._facts[id(func)] = owners.get(id(func), (set(), set(), set()))
            self._function_ids.add(id(func))
        self._facts[id(tree)] = owners.get(id(tree), (set(), set(), set()))


_FACT_NODES = frozenset({ast.For, ast.AsyncFor, ast.comprehension, ast.Import, ast.ImportFrom, ast.ExceptHandler,
                         ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef})
_NAMED_DEFS = FunctionNode + (ast.ClassDef,)


def _stored_in(unit: ast.AST) -> tuple[set[str], set[str], set[str]]:
    names: set[str] = set()
    attributes: set[str] = set()
    loop_targets: set[str] = set()
    for node in executed_nodes(unit):
        kind = type(node)
        if kind is ast.Name:
            if not isinstance(node.ctx, ast.Load):
                names.add(node.id)
        elif kind is ast.Attribute:
            if isinstance(node.ctx, ast.Store):
                attributes.add(node.attr)
        elif kind in (ast.For, ast.AsyncFor, ast.comprehension):
            if node is not unit:
                loop_targets |= names_stored_in(node.target)
        elif kind in (ast.Import, ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif kind in _NAMED_DEFS:
            names.add(node.name)  # type: ignore[attr-defined]
        elif kind is ast.ExceptHandler and node.name:
            names.add(node.name)
    return names, attributes, loop_targets


def _union(parts: Iterable[frozenset[str] | None]) -> frozenset[str] | None:
    out: set[str] = set()
    for part in parts:
        if part is None:
            return None
        out |= part
    return frozenset(out)


class Dependence:
    """Which parameters of the enclosing function an object depends on.

    ``of(expr, unit)`` is ``frozenset()`` when ``expr`` names the same object
    every time ``unit`` (a loop or a function) runs, a set of parameter names
    of ``unit`` when it is the same object as long as those arguments are,
    and None when it may be a new object each time or cannot be told.  A
    method's own object is ``"self"``, and its attributes ``"self.<attr>"``
    (whatever the first parameter is called): the same while the instance's
    attribute is.  Inside ``__init__``, ``self.model`` assigned from the
    parameter ``model`` depends on ``model``.
    """

    MAX_DEPTH = 10

    def __init__(self, model: SemanticModel, units: UnitFacts | None = None):
        self.model = model
        self.units = units or UnitFacts(model)
        self._active: set[int] = set()  # bindings being followed (`a = a.child` in a loop)
        self._returns: dict[int, frozenset[str] | None] = {}
        self._fills: dict[tuple[int, str, str], list[ast.AST]] = {}

    def fills(self, owner: ast.AST | None, name: str, unit: ast.AST, before: int | None) -> list[ast.AST]:
        """:func:`container_fills`, walked once per unit and container."""
        key = (id(unit), owner.id if isinstance(owner, ast.Name) else "", name)
        found = self._fills.get(key)
        if found is None:
            found = self._fills[key] = container_fills(owner, name, unit, None)
        return found if before is None else [v for v in found if _fill_line(v) < before]

    def of(self, expr: ast.AST, unit: ast.AST, depth: int = 0, self_free: bool = False) -> frozenset[str] | None:
        """``self_free``: the method's ``self`` counts as the same object
        (what a hook callable such as ``self.save`` does is the same on every
        instance; what a target such as ``self.layer`` is depends on the instance)."""
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(expr, ast.Constant) or \
                (isinstance(expr, ast.UnaryOp) and isinstance(expr.operand, ast.Constant)):
            return EMPTY  # `-1` in `model.layers[-1]` is a constant index: the same element each time
        if isinstance(expr, ast.Name):
            return self._name(expr, unit, depth, self_free)
        if isinstance(expr, ast.Attribute):
            if expr.attr in self.units.attributes(unit) and expr.attr not in self.units.scratch_attributes(unit):
                values = self._own_attribute_values(expr, unit)
                if values is None:
                    return None
                if self_free and len(values) > 1:
                    # a hook made in each branch (`self.hook = Saver()` or `DetachingSaver()`): what it does
                    return _union(self.behaviour(value, unit, depth + 1) for value in values)
                found = _union(self.of(value, unit, depth + 1, self_free) for value in values)
                if found is not None and len(values) == 1 and is_empty_container(values[0]):
                    # `self.groups = dict()`, then `self.groups[i] = params`: what it holds
                    found = _union([found] + [self.of(v, unit, depth + 1, self_free)
                                              for v in self.fills(expr.value, expr.attr, unit, expr.lineno)])
                return found
            if not self_free and isinstance(expr.value, ast.Name) and self._is_own_self(expr.value, unit):
                derived = self._derived_attribute(expr, unit, depth)
                return derived if derived is not None else frozenset({f"{SELF}.{expr.attr}"})
            return self.of(expr.value, unit, depth + 1, self_free)
        if isinstance(expr, ast.Subscript):
            return _union((self.of(expr.value, unit, depth + 1, self_free),
                           self.of(expr.slice, unit, depth + 1, self_free)))
        if isinstance(expr, (ast.Tuple, ast.List)):
            return _union(self.of(e, unit, depth + 1, self_free) for e in expr.elts)
        if isinstance(expr, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            # `[p for p in group["params"] if ...]`: its elements, followed to the loops that bind them
            return self.of(expr.elt, unit, depth + 1, self_free)
        if isinstance(expr, ast.Call) and is_empty_container(expr):
            return EMPTY  # `defaultdict(list)` as `dict()`: what it holds is followed where it is filled
        if isinstance(expr, ast.Call):
            func = expr.func
            args = list(expr.args) + [k.value for k in expr.keywords]
            if any(isinstance(a, ast.Starred) for a in expr.args):
                return None
            if isinstance(func, ast.Attribute) and func.attr in STABLE_ACCESSORS:
                return _union([self.of(func.value, unit, depth + 1, self_free)]
                              + [self.of(a, unit, depth + 1, self_free) for a in args])
            if isinstance(func, ast.Attribute) and func.attr in RETURNS_SELF:
                return self.of(func.value, unit, depth + 1, self_free)
            if isinstance(func, ast.Name) and func.id in _PASS_THROUGH_BUILTINS and \
                    self.model.qualify(func) == f"builtins.{func.id}":
                return _union(self.of(a, unit, depth + 1, self_free) for a in args)
            if isinstance(func, ast.Name):
                return self._local_call(expr, unit, depth, self_free)
        return None

    def behaviour(self, expr: ast.AST, unit: ast.AST, depth: int = 0) -> frozenset[str] | None:
        """Like :meth:`of` for a hook callable: a lambda or a factory call
        behaves the same each time when what it uses does."""
        if depth > self.MAX_DEPTH:
            return None
        if isinstance(expr, ast.Lambda):
            params = {a.arg for a in expr.args.posonlyargs + expr.args.args + expr.args.kwonlyargs}
            if expr.args.vararg:
                params.add(expr.args.vararg.arg)
            if expr.args.kwarg:
                params.add(expr.args.kwarg.arg)
            defaults = list(expr.args.defaults) + [d for d in expr.args.kw_defaults if d is not None]
            used = [node for node in executed_nodes(expr.body)
                    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in params]
            return _union([self.behaviour(d, unit, depth + 1) for d in defaults]
                          + [self.of(node, unit, depth + 1, True) for node in used])
        if isinstance(expr, ast.Call):
            if any(isinstance(a, ast.Starred) for a in expr.args):
                return None
            return _union([self.behaviour(expr.func, unit, depth + 1)]
                          + [self.behaviour(a, unit, depth + 1) for a in list(expr.args)
                             + [k.value for k in expr.keywords]])
        return self.of(expr, unit, depth, True)

    def _name(self, name: ast.Name, unit: ast.AST, depth: int, self_free: bool) -> frozenset[str] | None:
        model = self.model
        found = model.lookup(name.id, model.scope_of(name))
        inside = [b for b in found if (contains(unit, b.node) or (b.kind == "param" and b.scope.node is unit))
                  and _may_reach(b, name)]
        if not inside:
            return EMPTY  # bound before the loop, or outside the function
        deps: set[str] = set()
        for b in inside:
            if id(b) in self._active:
                continue  # a rebinding from itself (`a = a._modules[key]`) adds nothing new
            if b.kind == "param":
                if b.scope.node is not unit:
                    return None  # a parameter of a function nested in the unit
                if is_self_param(self.model, b.value):  # type: ignore[arg-type]
                    if not self_free:
                        deps.add(SELF)
                else:
                    deps.add(b.name)
            elif b.kind == "def" and self_free and isinstance(b.node, FunctionNode):
                sub = self._closure(b.node, unit, depth)  # a nested hook function: what it uses
                if sub is None:
                    return None
                deps |= sub
            elif b.kind == "assign" and not b.path:
                sub = self._following(b, unit, depth, self_free)
                if sub is None:
                    return None
                deps |= sub
            elif b.kind == "for":
                if b.node is unit or (isinstance(b.node, ast.comprehension)
                                      and getattr(b.node, "_hl_parent", None) is unit):
                    return None  # the loop's (or comprehension's) own variable: another object each iteration
                sub = self._following(b, unit, depth, self_free)
                if sub is None:
                    return None
                deps |= sub
            else:
                return None
        return frozenset(deps)

    def _following(self, binding: Any, unit: ast.AST, depth: int, self_free: bool) -> frozenset[str] | None:
        self._active.add(id(binding))
        try:
            found = self.of(binding.value, unit, depth + 1, self_free)
            if found is not None and binding.kind == "assign" and is_empty_container(binding.value) \
                    and binding.scope.node is unit:
                # `params = []`, then `params.append(p)` in the loop: the list holds what is put in it
                found = _union([found] + [self.of(v, unit, depth + 1, self_free)
                                          for v in self.fills(None, binding.name, unit, None)])
            return found
        finally:
            self._active.discard(id(binding))

    def _derived_attribute(self, expr: ast.Attribute, unit: ast.AST, depth: int) -> frozenset[str] | None:
        """``self.<attr>`` that the method does not store, when the class says
        what it is: a property returning an expression of the object's state
        (``return len(self._groups)``), or, inside ``__init__`` after a call
        of the base class's constructor with arguments, an attribute no code
        of the class (or its bases in this file) stores, so that constructor
        (of another file) set it: taken to hold what was passed to it (a
        guess from the shape of the code; it only widens what the object
        depends on)."""
        cls = self.model.enclosing_class(unit)
        if cls is None or depth >= self.MAX_DEPTH:
            return None
        method = cls.methods.get(expr.attr)
        if method is not None:
            if not any(isinstance(d, ast.Name) and d.id == "property" for d in method.decorator_list):
                return None
            body = [stmt for stmt in method.body if not (isinstance(stmt, ast.Expr)
                                                         and isinstance(stmt.value, ast.Constant))]
            if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
                return None
            key = id(method)
            if key in self._active:
                return None
            self._active.add(key)
            try:
                found = self.of(body[0].value, method, depth + 1)
            finally:
                self._active.discard(key)
            # the property's `self.<attr>` is this object's, read here: what it is at this point of `unit`
            if found is None or not all(d.startswith(SELF + ".") for d in found):
                return None
            return _union(self.of(ast.Attribute(value=expr.value, attr=d[len(SELF) + 1:], ctx=ast.Load(),
                                                lineno=expr.lineno, col_offset=expr.col_offset), unit, depth + 1)
                          for d in found)
        if getattr(unit, "name", "") != "__init__" or cls.attribute(expr.attr) or not self._foreign_base(cls):
            return None
        passed = self._base_init_arguments(unit, expr.lineno)
        if not passed:
            return None
        return _union(self.of(arg, unit, depth + 1) for arg in passed)

    def _foreign_base(self, cls: ClassInfo) -> bool:
        """A base of another file of the project (not torch's, not a builtin)."""
        return any(qual is not None and not qual.startswith(("torch.", "builtins.", "typing.", "abc.", "<local>."))
                   for qual in cls.bases)

    def _base_init_arguments(self, init: ast.AST, line: int) -> list[ast.AST]:
        """The arguments of ``super().__init__(...)`` (or ``Base.__init__(self, ...)``)
        run in ``init`` before ``line``."""
        out: list[ast.AST] = []
        for node in executed_nodes(init):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "__init__" and node.lineno < line):
                continue
            receiver = node.func.value
            args = list(node.args)
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
                pass
            elif isinstance(receiver, (ast.Name, ast.Attribute)) and args and isinstance(args[0], ast.Name) \
                    and self._is_own_self(args[0], init):
                args = args[1:]
            else:
                continue
            out += [a for a in args if not isinstance(a, ast.Starred)] + [k.value for k in node.keywords]
        return out

    def _local_call(self, call: ast.Call, unit: ast.AST, depth: int, self_free: bool) -> frozenset[str] | None:
        """``get_layer(model, names)`` of a function of this file whose every
        return depends only on its parameters: what the arguments depend on."""
        bindings = self.model.bindings_at(call.func)  # type: ignore[arg-type]
        if len(bindings) != 1 or bindings[0].kind != "def" or not isinstance(bindings[0].node, FunctionNode):
            return None
        func = bindings[0].node
        if isinstance(getattr(func, "_hl_parent", None), ast.ClassDef):
            return None
        returned = self.returns(func)
        if returned is None:
            return None
        args = func.args
        positional = [a.arg for a in args.posonlyargs + args.args]
        parts: list[frozenset[str] | None] = []
        for name in returned:
            if name in positional and positional.index(name) < len(call.args):
                parts.append(self.of(call.args[positional.index(name)], unit, depth + 1, self_free))
                continue
            keyword = next((k for k in call.keywords if k.arg == name), None)
            if keyword is not None:
                parts.append(self.of(keyword.value, unit, depth + 1, self_free))
            elif any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                return None
            # else the default: the same object on every call
        return _union(parts)

    def returns(self, func: ast.AST) -> frozenset[str] | None:
        """The parameters a function's returned object depends on (None: a new
        or unknown object, e.g. a module it builds)."""
        key = id(func)
        if key not in self._returns:
            self._returns[key] = None  # recursion guard
            nodes = list(executed_nodes(func))
            yields = [node for node in nodes if isinstance(node, (ast.Yield, ast.YieldFrom))]
            found = [node for node in nodes if isinstance(node, ast.Return)]
            if yields:
                # a generator: what it yields (each element the same object on every call as long as these are)
                values = [y.value for y in yields]
                self._returns[key] = None if any(v is None for v in values) else \
                    _union(self.of(v, func, 1) for v in values)  # type: ignore[arg-type]
            elif not found or any(r.value is None for r in found):
                self._returns[key] = None
            else:
                self._returns[key] = _union(self.of(r.value, func, 1) for r in found)  # type: ignore[arg-type]
        return self._returns[key]

    def _closure(self, func: ast.AST, unit: ast.AST, depth: int) -> frozenset[str] | None:
        """What a function defined inside ``unit`` uses from it (its free names)."""
        own = self.model.scopes.get(func)
        parts: list[frozenset[str] | None] = []
        for node in executed_nodes(func):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                found = self.model.lookup(node.id, self.model.scope_of(node))
                if found and (found[0].scope is own or
                              (found[0].scope.node is not func and contains(func, found[0].scope.node))):
                    continue  # a local of the nested function (or of a comprehension or lambda in it)
                parts.append(self.of(node, unit, depth + 1, True))
        defaults = list(func.args.defaults) + [d for d in func.args.kw_defaults if d is not None]  # type: ignore[attr-defined]
        parts += [self.behaviour(d, unit, depth + 1) for d in defaults]
        return _union(parts)

    def _is_own_self(self, name: ast.Name, unit: ast.AST) -> bool:
        """Is ``name`` the ``self`` of the method ``unit``?"""
        if not isinstance(unit, FunctionNode):
            return False
        bindings = self.model.bindings_at(name)
        return len(bindings) == 1 and bindings[0].kind == "param" and bindings[0].scope.node is unit \
            and is_self_param(self.model, bindings[0].value)  # type: ignore[arg-type]

    def _own_attribute_value(self, expr: ast.Attribute, unit: ast.AST) -> ast.AST | None:
        """``self.<attr>`` assigned exactly once in the method ``unit``, before
        ``expr``: the assigned value (``self.model = model``)."""
        if not isinstance(unit, FunctionNode) or not isinstance(expr.value, ast.Name):
            return None
        params = positional_params(unit)
        if not params or params[0] != expr.value.id or is_staticmethod(unit):
            return None
        values = []
        for node in executed_nodes(unit):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr == expr.attr:
                parent = getattr(node, "_hl_parent", None)
                if not (isinstance(node.value, ast.Name) and node.value.id == expr.value.id) \
                        or not isinstance(parent, (ast.Assign, ast.AnnAssign)) or parent.value is None:
                    return None
                if isinstance(parent, ast.Assign) and (len(parent.targets) != 1 or parent.targets[0] is not node):
                    return None
                values.append(parent)
        if len(values) != 1 or values[0].lineno > expr.lineno:
            return None
        return values[0].value

    def _own_attribute_values(self, expr: ast.Attribute, unit: ast.AST) -> list[ast.AST] | None:
        """As :meth:`_own_attribute_value`, also for an attribute assigned in
        each branch of an ``if`` before ``expr`` (``if detach: self.hook =
        A() else: self.hook = B()``): the values it may hold."""
        value = self._own_attribute_value(expr, unit)
        if value is not None:
            return [value]
        if not isinstance(unit, FunctionNode) or not isinstance(expr.value, ast.Name):
            return None
        params = positional_params(unit)
        if not params or params[0] != expr.value.id or is_staticmethod(unit):
            return None
        stores = [node for node in executed_nodes(unit) if isinstance(node, ast.Attribute)
                  and isinstance(node.ctx, ast.Store) and node.attr == expr.attr]
        branches: list[ast.If] = []
        values: list[ast.AST] = []
        for node in stores:
            parent = getattr(node, "_hl_parent", None)
            branch = getattr(parent, "_hl_parent", None)
            if not (isinstance(node.value, ast.Name) and node.value.id == expr.value.id) \
                    or not isinstance(parent, ast.Assign) or len(parent.targets) != 1 \
                    or not isinstance(branch, ast.If) or parent.end_lineno >= expr.lineno:
                return None
            branches.append(branch)
            values.append(parent.value)
        if len(values) < 2 or any(b is not branches[0] for b in branches):
            return None
        # one assignment in the `if` body and one in its `else`: one of them always ran
        first = branches[0]
        in_body = [v for v in values if getattr(v, "_hl_parent", None) in first.body]
        in_else = [v for v in values if getattr(v, "_hl_parent", None) in first.orelse]
        return values if len(in_body) == 1 and len(in_else) == 1 else None


def _may_reach(binding: Any, use: ast.Name) -> bool:
    """Can ``binding`` be the value ``use`` reads?  A binding of the same
    function placed after the use reaches it only through a loop around
    both (a closure may run later: other scopes are not judged)."""
    node = binding.node
    if binding.kind == "param" or getattr(use, "_hl_scope", None) is not binding.scope \
            or not hasattr(node, "lineno"):
        return True
    if (node.lineno, node.col_offset) <= (use.lineno, use.col_offset):
        return True
    cur = getattr(use, "_hl_parent", None)
    while cur is not None and cur is not binding.scope.node:
        if isinstance(cur, (ast.For, ast.AsyncFor, ast.While)) and contains(cur, node):
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


_EMPTY_CONTAINER_CALLS = frozenset({"list", "dict", "set", "OrderedDict", "defaultdict", "deque"})
_FILLING_METHODS = frozenset({"append", "add", "insert", "extend", "appendleft", "update", "setdefault"})


def is_empty_container(value: ast.AST) -> bool:
    """``[]``, ``{}``, ``list()``, ``dict()``, ``defaultdict(list)``...: a new
    container that holds only what is put in it later."""
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)) and not value.elts:
        return True
    if isinstance(value, ast.Dict) and not value.keys:
        return True
    if isinstance(value, ast.Call) and not value.keywords:
        name = value.func.attr if isinstance(value.func, ast.Attribute) else \
            value.func.id if isinstance(value.func, ast.Name) else ""
        return name in _EMPTY_CONTAINER_CALLS and (not value.args or name == "defaultdict")
    return False


def container_fills(owner: ast.AST | None, name: str, unit: ast.AST, before: int | None) -> list[ast.AST]:
    """What ``unit`` puts into the container ``<owner>.<name>`` (a local
    ``name`` when ``owner`` is None) before line ``before``: the value of
    ``c[k] = v`` and ``c[k] += v``, the argument of ``c.append(v)``,
    ``c.extend(vs)``, ``c.update(...)``, also on an item (``c[k].append(v)``)."""
    def same(node: ast.AST) -> bool:
        while isinstance(node, ast.Subscript):
            node = node.value
        if owner is None:
            return isinstance(node, ast.Name) and node.id == name
        return isinstance(node, ast.Attribute) and node.attr == name and isinstance(node.value, ast.Name) \
            and isinstance(owner, ast.Name) and node.value.id == owner.id

    out: list[ast.AST] = []
    for node in executed_nodes(unit):
        if before is not None and getattr(node, "lineno", 0) >= before:
            continue
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Subscript) and same(t) for t in targets):
                out.append(node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _FILLING_METHODS and same(node.func.value):
            out += [a for a in node.args if not isinstance(a, ast.Starred)] + [k.value for k in node.keywords]
    return out


def _fill_line(value: ast.AST) -> int:
    """The line of the statement that put ``value`` in its container."""
    cur: ast.AST | None = value
    while cur is not None and not isinstance(cur, ast.stmt):
        cur = getattr(cur, "_hl_parent", None)
    return getattr(cur if cur is not None else value, "lineno", 0)


def is_self_param(model: SemanticModel, arg: ast.arg) -> bool:
    """Is ``arg`` the ``self`` of a method (not of a static or class method)?"""
    func = getattr(arg, "_hl_parent", None)
    if not isinstance(func, FunctionNode) or is_staticmethod(func) or is_classmethod(func):
        return False
    params = func.args.posonlyargs + func.args.args
    return bool(params) and params[0] is arg and isinstance(getattr(func, "_hl_parent", None), ast.ClassDef)


# ------------------------------------------------------------------- guards

class Guards:
    """Conditions that can make a statement run only once: a flag set
    elsewhere (``if self._handle is None``, ``if step == 0``), ``hasattr`` /
    ``getattr`` checks, and an earlier ``if ...: return`` on such a flag."""

    def __init__(self, model: SemanticModel, units: UnitFacts | None = None):
        self.model = model
        self.units = units or UnitFacts(model)
        self._set_outside_init: set[str] | None = None
        self._set_anywhere: set[str] | None = None
        self._exits: dict[int, bool] = {}
        self._guard_like: dict[tuple[int, int], bool] = {}

    def guarded(self, node: ast.AST, unit: ast.AST) -> bool:
        child: ast.AST = node
        cur = getattr(node, "_hl_parent", None)
        while cur is not None and cur is not unit:
            if isinstance(cur, (ast.If, ast.While, ast.IfExp)) and child is not cur.test \
                    and self.guard_like(cur.test, unit):
                return True
            if isinstance(cur, ast.stmt):
                pos = block_of(cur)
                if pos is not None:
                    for earlier in pos[0][:pos[1]]:
                        if isinstance(earlier, ast.If) and self.exits(earlier) and self.guard_like(earlier.test, unit) \
                                and not _off_by_default(earlier.test, unit):
                            return True
            child, cur = cur, getattr(cur, "_hl_parent", None)
        return False

    def guard_like(self, test: ast.AST, unit: ast.AST) -> bool:
        """Does the condition read a flag the unit (or a method other than
        ``__init__``) sets, or ask ``hasattr``/``getattr``?"""
        key = (id(test), id(unit))
        found = self._guard_like.get(key)
        if found is None:
            units = self.units
            guard_names = units.names(unit) - units.inner_loop_targets(unit)
            if isinstance(unit, (ast.For, ast.AsyncFor)):
                guard_names = guard_names | names_stored_in(unit.target)
            guard_attrs = units.attributes(unit) | self.attributes_set_outside_init()
            found = False
            for sub in _flag_reads(test):
                if isinstance(sub, ast.Attribute) and self._constructor_setting(sub, unit):
                    continue  # set by this constructor on its new object: a switch, the same in every object
                if isinstance(sub, ast.Name) and sub.id in guard_names \
                        or isinstance(sub, ast.Attribute) and sub.attr in guard_attrs \
                        and sub.attr not in self.units.scratch_attributes(unit) \
                        or isinstance(sub, ast.Call) and not self._capability_check(sub):
                    found = True
                    break
            self._guard_like[key] = found
        return found

    def _constructor_setting(self, attribute: ast.Attribute, unit: ast.AST) -> bool:
        """``self.<attr>`` read in ``__init__``, which no other method stores
        and the constructor stores only before the test (a switch set from its
        arguments, ``self._overlap = overlap``): each object starts without it,
        so it is the same switch in every object, not a flag that makes the
        code run once (a singleton's ``self._initialized``, stored after its
        test, stays a flag)."""
        if not (isinstance(unit, FunctionNode) and unit.name == "__init__" and isinstance(attribute.value, ast.Name)):
            return False
        bindings = self.model.bindings_at(attribute.value) if hasattr(attribute.value, "_hl_scope") else []
        if len(bindings) != 1 or bindings[0].kind != "param" or bindings[0].scope.node is not unit \
                or not is_self_param(self.model, bindings[0].value):  # type: ignore[arg-type]
            return False
        if attribute.attr in self.attributes_set_outside_init():
            return False
        stores = [node for node in executed_nodes(unit) if isinstance(node, ast.Attribute)
                  and isinstance(node.ctx, ast.Store) and node.attr == attribute.attr]
        return bool(stores) and all(node.lineno < attribute.lineno for node in stores)

    def _capability_check(self, call: ast.Call) -> bool:
        """``hasattr(net, "_modules")``: a test of what an object is, not a
        flag, when no code of the file sets an attribute of that name (a
        flag is one the code sets: ``hasattr(m, "__flops_handle__")``)."""
        if not (isinstance(call.func, ast.Name) and call.func.id == "hasattr" and len(call.args) == 2):
            return False
        name = call.args[1]
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return False
        stored = self.attributes_set_anywhere()
        return "*" not in stored and name.value not in stored

    def attributes_set_anywhere(self) -> set[str]:
        """Attribute names the file stores (``x.name = ...``, ``setattr(x, "name", ...)``)."""
        if self._set_anywhere is None:
            found: set[str] = set()
            for node in getattr(self.model, "_visited", ()):
                if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                    found.add(node.attr)
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
                        and len(node.args) >= 2:
                    name = node.args[1]
                    found.add(name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else "*")
            self._set_anywhere = found
        return self._set_anywhere

    def exits(self, stmt: ast.If) -> bool:
        found = self._exits.get(id(stmt))
        if found is None:
            found = self._exits[id(stmt)] = _exits(stmt)
        return found

    def attributes_set_outside_init(self) -> set[str]:
        if self._set_outside_init is None:
            found: set[str] = set()
            by_function = self.units.function_attributes()
            for func in self.model.functions:
                if getattr(func, "name", "") != "__init__":
                    found |= by_function.get(id(func), set())
            self._set_outside_init = found
        return self._set_outside_init


def _off_by_default(test: ast.AST, unit: ast.AST) -> bool:
    """``if hasattr(obj, "trackers") and persist: return``: an exit that
    needs a parameter whose default is false (``persist=False``) never
    runs on a call that leaves it out, so it does not make what follows
    run once."""
    if not (isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)) or not isinstance(unit, FunctionNode):
        return False
    args = unit.args
    positional = args.posonlyargs + args.args
    defaults: dict[str, ast.AST] = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]],
                                            args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return any(isinstance(value, ast.Name) and isinstance(defaults.get(value.id), ast.Constant)
               and not defaults[value.id].value for value in test.values)  # type: ignore[attr-defined]


def _flag_reads(test: ast.AST) -> list[ast.AST]:
    """What a condition tests as a flag: the names and attributes it reads as
    a whole (``self._handle is None``, ``not self.hooked``, ``step == 0``,
    ``name in self._hooks``) and its ``hasattr``/``getattr`` calls; not what
    it computes with (``"inception" in self.model.__class__.__name__.lower()``
    is a check of the input, not a flag)."""
    if isinstance(test, ast.BoolOp):
        return [r for value in test.values for r in _flag_reads(value)]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _flag_reads(test.operand)
    if isinstance(test, ast.Compare):
        return [r for operand in [test.left] + list(test.comparators) for r in _flag_reads(operand)]
    if isinstance(test, (ast.Name, ast.Attribute, ast.Subscript)):
        return [test.value if isinstance(test, ast.Subscript) else test]
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id in ("hasattr", "getattr"):
        return [test]
    if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id in ("len", "bool", "any", "all"):
        return [r for arg in test.args for r in _flag_reads(arg)]
    return []


def _inner_loop_targets(unit: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in executed_nodes(unit):
        if node is not unit and isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            out |= names_stored_in(node.target)
    return out


def _exits(stmt: ast.If) -> bool:
    return any(isinstance(n, (ast.Return, ast.Break, ast.Continue, ast.Raise)) for n in executed_nodes(stmt))


def leaves_loop_after(node: ast.AST, loop: ast.AST) -> bool:
    """A ``break``/``return``/``raise`` right after ``node`` in the loop: it runs once."""
    cur: ast.AST | None = statement_of(node)
    while cur is not None and cur is not loop:
        if isinstance(cur, ast.stmt):
            for later in later_statements(cur):
                if isinstance(later, (ast.Break, ast.Return, ast.Raise)):
                    return True
        cur = getattr(cur, "_hl_parent", None)
    return False


# -------------------------------------------------------------- functions

def local_qualname(node: ast.AST) -> str | None:
    """``Cls.method``, ``func``, ``outer.inner`` for a def in the file; None for lambdas."""
    if not isinstance(node, FunctionNode + (ast.ClassDef,)):
        return None
    parts = [node.name]
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and not isinstance(cur, ast.Module):
        if isinstance(cur, FunctionNode + (ast.ClassDef,)):
            parts.append(cur.name)
        elif isinstance(cur, ast.Lambda):
            return None
        cur = getattr(cur, "_hl_parent", None)
    return ".".join(reversed(parts))


def function_kind(func: ast.AST) -> str:
    """"f" plain function, "m" method, "s" staticmethod, "c" classmethod."""
    parent = getattr(func, "_hl_parent", None)
    if not isinstance(parent, ast.ClassDef):
        return "f"
    if is_staticmethod(func):
        return "s"
    if is_classmethod(func):
        return "c"
    return "m"


def is_step_method(model: SemanticModel, func: ast.AST) -> bool:
    """A module's ``forward`` (or Lightning's ``training_step``...): torch runs it on every step."""
    if getattr(func, "name", "") not in PER_STEP_METHODS:
        return False
    cls = model.enclosing_class(func)
    return cls is not None and func in cls.methods.values() and bool(model.is_module_class(cls))


# ------------------------------------------------------------------ summary

class Summarizer:
    """Builds the summary of one file (see the module docstring).

    A call site is ``[callee, bound, caller, line, column, facts, via]``
    (``via`` is "apply" for the function ``module.apply(fn)`` calls on every
    submodule), its facts ``[loop, fn, step, guarded, receiver_key, attrs]``
    (None until computed):

    - ``callee``: the qualified name called: a function or class
      (``pkg.mod.func``, ``pkg.mod.Cls``: a constructor), a method of a class
      (``pkg.mod.Cls.method``, resolved through the class's bases by the
      index), or ``super:pkg.mod.Cls.method`` for ``super().method(...)``.
    - ``bound``: 1 when the callee's first parameter is supplied by the call
      (a method called on an instance, a constructor), else 0.
    - ``caller``: the local qualified name of the function holding the site
      (None at module level or in a lambda).
    - ``loop``: ``[line, kind, receiver, args, kwargs]`` when a loop or a
      comprehension around the site (in the same function) repeats it with
      the same receiver; each argument is True when it is the same object on
      every iteration.
    - ``fn``: ``[receiver, args, kwargs, dispatch]``: per argument, the
      caller's parameters it depends on (a list; ``"self"`` and
      ``"self.<attr>"`` for the caller's own object), or None for "another
      object each time"; ``dispatch``: what the branches around the call
      compare with constants (``if name == "lrp":``), which must be the same
      too.
    - ``step``: the caller is a per-step method (a module's ``forward``).
    - ``guarded``: a condition in the caller can make the site run once.
    - ``receiver_key``: equal for two sites that call on the same object.
    - ``attrs``: when the call is on the caller's own ``self``, the
      dependence of the ``self.<attr>`` the caller assigned before it.
    """

    def __init__(self, model: SemanticModel, inference: Inference, path: str, display_path: str,
                 module: str | None = None):
        self.model = model
        self.inference = inference
        self.path = path
        self.display_path = display_path
        self.module = module if module is not None else module_name(path)
        self.is_package = _is_package_file(path)
        units = UnitFacts(model)
        self.dependence = Dependence(model, units)
        self.guards = Guards(model, units)
        self._qualnames: dict[int, str | None] = {}
        self._calls: dict[tuple[int, int], ast.Call] | None = None
        self._roots: dict[tuple[int, str], str | None] = {}
        self._callers: dict[int, str | None] = {}
        self._callee_of: dict[int, tuple[str, int, ast.AST | None] | None] = {}  # by id of the call
        self._core: Any = None

    @property
    def core(self) -> Any:
        """The program-analysis core of this file (hooklint.static.core), for
        the edges of call sites; the file's checker hands its own."""
        if self._core is None:
            from hooklint.static.core import Core

            self._core = Core(self.model, self.inference, summarizer=self)
        return self._core

    @core.setter
    def core(self, value: Any) -> None:
        self._core = value

    # ------------------------------------------------------------- names
    def qualname(self, node: ast.AST) -> str | None:
        key = id(node)
        if key not in self._qualnames:
            local = local_qualname(node)
            self._qualnames[key] = f"{self.module}.{local}" if local else None
        return self._qualnames[key]

    def absolute(self, expr: ast.AST) -> str | None:
        """The qualified name of a dotted expression, with relative imports
        made absolute and local definitions prefixed with this module."""
        parts: list[str] = []
        cur = expr
        while isinstance(cur, ast.Attribute):
            parts.append(cur.attr)
            cur = cur.value
        if not isinstance(cur, ast.Name) or not hasattr(cur, "_hl_scope"):
            return None
        # a name bound once where it is defined (an import, a def, a class) means
        # the same thing wherever it is read: resolved once per scope
        key = (id(cur._hl_scope), cur.id)  # type: ignore[attr-defined]
        cached = self._roots.get(key, False)
        if cached is not False:
            return None if cached is None else ".".join([cached] + parts[::-1])
        found = self.model.lookup(cur.id, cur._hl_scope)  # type: ignore[attr-defined]
        stable = len(found) == 1 and found[0].kind in ("import", "def", "class")
        bindings = found if stable else self.model.bindings_at(cur)
        if not bindings:
            return None
        b = bindings[-1]
        if b.kind == "import":
            node = b.node
            if isinstance(node, ast.ImportFrom) and node.level:
                alias = next((a for a in node.names if (a.asname or a.name) == cur.id), None)
                base = absolute_import(self.module, self.is_package, node.level, node.module)
                if alias is None or base is None:
                    return None
                head = f"{base}.{alias.name}"
            else:
                head = b.value  # type: ignore[assignment]
        elif b.kind in ("def", "class"):
            head = self.qualname(b.node)
            if head is None:
                return None
        elif b.kind == "assign" and isinstance(b.value, (ast.Name, ast.Attribute)) and not b.path \
                and b.value is not cur:
            head = self.absolute(b.value)  # an alias: Cam = GradCAM
            if head is None:
                return None
        else:
            return None
        if stable:
            self._roots[key] = head
        return ".".join([head] + parts[::-1])

    # ----------------------------------------------------------- summary
    def summary(self, facts: bool = False, hooks: bool = True) -> dict[str, Any]:
        """``facts``: compute every site's facts now (otherwise they are left
        None, for :meth:`site_facts` to fill in when a question needs them)."""
        functions: dict[str, list[Any]] = {}
        for func in self.model.functions:
            if not isinstance(func, FunctionNode):
                continue
            local = local_qualname(func)
            if local is None:
                continue
            args = func.args
            kind = function_kind(func)
            # the parameters a public module-level function hands back (`return module`: a
            # function that modifies a module and returns it installs its hooks on purpose)
            returned = sorted({stmt.value.id for stmt in func.body if isinstance(stmt, ast.Return)
                               and isinstance(stmt.value, ast.Name)}) \
                if kind == "f" and "." not in local and not local.startswith("_") else None
            functions[local] = [positional_params(func), [a.arg for a in args.kwonlyargs], len(args.defaults),
                                kind, bool(args.vararg or args.kwarg), func.lineno, returned]
        classes: dict[str, list[str | None]] = {}
        for info in self.model.classes.values():
            local = local_qualname(info.node)
            if local is None:
                continue
            classes[local] = [self.absolute(class_base_expr(base)) for base in info.node.bases]
        imports: dict[str, str] = {}
        for name, bindings in self.model.module_scope.bindings.items():
            b = bindings[-1]
            if b.kind == "import":
                node = b.node
                if isinstance(node, ast.ImportFrom) and node.level:
                    alias = next((a for a in node.names if (a.asname or a.name) == name), None)
                    base = absolute_import(self.module, self.is_package, node.level, node.module)
                    if alias is not None and base is not None:
                        imports[name] = f"{base}.{alias.name}"
                elif isinstance(b.value, str):
                    imports[name] = b.value
        summary = {"v": SUMMARY_FORMAT, "module": self.module, "path": self.display_path, "functions": functions,
                   "classes": classes, "imports": imports, "sites": self.sites(facts, eager_hooks=hooks),
                   "hooks": self.core.export() if hooks else {}}
        from hooklint.static.compile_regions import hook_summary

        module_hooks = hook_summary(self.model, self.inference)
        if module_hooks:  # module hooks registered on parameters, for callers in other files (HKL7xx)
            summary["module_hooks"] = module_hooks
        from hooklint.static.module_classes import bypassing_calls

        bypass_call = bypassing_calls(self.model)
        if bypass_call:  # classes whose `__call__` never reaches torch's: no module hook runs (HKL303)
            summary["bypass_call"] = bypass_call
        self_removing = self.core.export_self_removing()
        if self_removing:  # one-shot hook callables, for registrations in other files (HKL304, HKL306)
            summary["self_removing"] = self_removing
        return summary

    def sites(self, facts: bool = False, eager_hooks: bool = False) -> list[list[Any]]:
        """``eager_hooks``: compute now the facts of the sites that call a
        function of this file with a hook summary (the project index composes
        summaries through them; computing them later would parse the file again)."""
        out = []
        hooked: set[int] = set()
        if eager_hooks and not facts:
            exported = self.core.export()
            if exported:
                names = {local.rpartition(".")[2] for local in exported}
                for name in names:
                    for call in list(self.model.name_calls.get(name, ())) + list(self.model.method_calls.get(name, ())):
                        local = self.core.local_callee(call)
                        if local is not None and local_qualname(local[0]) in exported:
                            hooked.add(id(call))
                for call in self.model.method_calls.get("apply", ()):
                    hooked.add(id(call))
        for calls in (self.model.name_calls, self.model.method_calls):
            for group in calls.values():
                for call in group:
                    callees = self._callees(call)
                    if not callees:
                        continue
                    func = function_of(call)
                    caller = self._callers.get(id(func), False)
                    if caller is False:
                        caller = self._callers[id(func)] = local_qualname(func) if isinstance(func, FunctionNode) else None
                    for via, found in callees:
                        out.append([found[0], found[1], caller, call.lineno, call.col_offset,
                                    self.facts(call, found[2], via) if facts or id(call) in hooked else None, via])
        out.sort(key=lambda s: (s[3], s[4], s[6], s[0]))
        return out

    def _callees(self, call: ast.Call) -> list[tuple[str, tuple[str, int, ast.AST | None]]]:
        """(via, callee) for a call: the call itself, and for ``module.apply(fn)``
        the function it calls on every submodule."""
        out = []
        found = self.callee(call)
        if found is not None:
            out.append(("", found))
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "apply" and len(call.args) == 1 and not call.keywords:
            target = self.function_reference(call.args[0])
            if target is not None:
                out.append(("apply", target))
        return out

    def function_reference(self, expr: ast.AST) -> tuple[str, int, ast.AST | None] | None:
        """A function passed as a value (``self._hook_all``, ``register``): (callee, bound, None)."""
        if isinstance(expr, ast.Attribute):
            owner = self.instance_class(expr.value)
            if owner is not None:
                return f"{owner}.{expr.attr}", 1, None
        name = self.absolute(expr) if isinstance(expr, (ast.Name, ast.Attribute)) else None
        if name is None or name.split(".", 1)[0] in _FOREIGN_ROOTS:
            return None
        return name, 0, None

    def site_facts(self, line: int, col: int, via: str = "") -> list[Any] | None:
        """The facts of the site at ``line``:``col`` (see :meth:`facts`)."""
        if self._calls is None:
            self._calls = {(c.lineno, c.col_offset): c for calls in (self.model.name_calls, self.model.method_calls)
                           for group in calls.values() for c in group}
        call = self._calls.get((line, col))
        if call is None:
            return None
        for kind, found in self._callees(call):
            if kind == via:
                return self.facts(call, found[2], via)
        return None

    def callee(self, call: ast.Call) -> tuple[str, int, ast.AST | None] | None:
        """(callee, bound, receiver expression) of a call that a function,
        constructor or method of the project can answer, or None.  Read from
        the names alone (the project index resolves them): cheaper than
        inferring values, and it must run on every call of every file (the
        summary's sites, and analyses that ask before it: worked out once)."""
        key = id(call)
        if key in self._callee_of:
            return self._callee_of[key]
        found = self._callee_of[key] = self._resolve_callee(call)
        return found

    def _resolve_callee(self, call: ast.Call) -> tuple[str, int, ast.AST | None] | None:
        func = call.func
        if isinstance(func, ast.Attribute):
            receiver = func.value
            if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
                cls = self.model.enclosing_class(call)
                name = self.qualname(cls.node) if cls is not None else None
                return (f"super:{name}.{func.attr}", 1, None) if name else None
            owner = self.instance_class(receiver)
            if owner is not None:
                return f"{owner}.{func.attr}", 1, receiver
        elif isinstance(func, ast.Name):
            owner = self.instance_class(func)
            if owner is not None:
                return f"{owner}.__call__", 1, func
        else:
            return None
        name = self.absolute(func)
        if name is None or name.split(".", 1)[0] in _FOREIGN_ROOTS:
            return None
        return name, 0, None

    def instance_class(self, expr: ast.AST, depth: int = 0) -> str | None:
        """The qualified class of the instance ``expr`` names, when the file
        shows it: ``x = Cls(...)``, ``def f(x: Cls)``, ``self.x = Cls(...)``."""
        if depth > 3:
            return None
        value: ast.AST | None = None
        if isinstance(expr, ast.Call):
            name = self.absolute(expr.func)
            return name if name and name.split(".", 1)[0] not in _FOREIGN_ROOTS else None
        if isinstance(expr, ast.Name):
            bindings = self.model.bindings_at(expr)
            if len(bindings) != 1:
                return None
            b = bindings[0]
            if b.kind == "param" and is_self_param(self.model, b.value):  # type: ignore[arg-type]
                cls = self.model.enclosing_class(b.value)
                return self.qualname(cls.node) if cls is not None else None
            if b.kind == "assign" and not b.path:
                value = b.value  # type: ignore[assignment]
            elif b.kind == "param" and isinstance(b.value, ast.arg) and b.value.annotation is not None:
                name = self.absolute(b.value.annotation)
                return name if name and name.split(".", 1)[0] not in _FOREIGN_ROOTS else None
        elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
            cls = self._self_class(expr.value)
            if cls is not None:
                assigned = cls.attribute(expr.attr)
                if len(assigned) == 1:
                    value = assigned[0][0]
        if isinstance(value, ast.Call):
            return self.instance_class(value, depth + 1)
        return None

    def _self_class(self, name: ast.Name) -> ClassInfo | None:
        bindings = self.model.bindings_at(name)
        if len(bindings) != 1 or bindings[0].kind != "param":
            return None
        func = bindings[0].scope.node
        params = positional_params(func) if isinstance(func, FunctionNode) else []
        if not params or params[0] != name.id or is_staticmethod(func):
            return None
        return self.model.enclosing_class(func)

    def facts(self, call: ast.Call, receiver: ast.AST | None, via: str = "") -> list[Any]:
        """``[loop, fn, step, guarded, receiver_key, attrs]`` of a call site
        (see the class docstring).  For ``module.apply(fn)`` (``via="apply"``)
        the arguments are those ``fn`` gets: each submodule of ``module``."""
        if via == "apply":
            args: list[ast.AST] = [call.func.value]  # type: ignore[attr-defined]
            keywords: list[ast.keyword] = []
            spread = False
        else:
            args, keywords = list(call.args), list(call.keywords)
            spread = any(isinstance(a, ast.Starred) for a in args) or any(k.arg is None for k in keywords)
        func = function_of(call)
        dep = self.dependence
        loop_facts = None
        for loop in self._repeating_units(call):
            if receiver is not None and dep.of(receiver, loop) != EMPTY:
                continue  # `for m in models: Probe(m).attach()`: another object each time
            if self.guards.guarded(call, loop) or (isinstance(loop, LoopNode) and leaves_loop_after(call, loop)):
                continue
            if self.dispatch(call, loop) != EMPTY:
                continue  # `for name in names: if name == "lrp": ...`: another branch each time
            kind = "loop" if isinstance(loop, LoopNode) else "comprehension"
            loop_facts = [loop.lineno, kind, True,
                          [None if spread else dep.of(a, loop) == EMPTY for a in args],
                          {k.arg: dep.of(k.value, loop) == EMPTY for k in keywords if k.arg}]
            break
        fn_facts = None
        step = guarded = False
        attrs: dict[str, list[str] | None] = {}
        unit = func if isinstance(func, FunctionNode) else self.model.tree if func is None else None
        if unit is not None:
            receiver_dep = _fact(dep.of(receiver, unit)) if receiver is not None else []
            fn_facts = [receiver_dep,
                        [None if spread else _fact(dep.of(a, unit)) for a in args],
                        {k.arg: _fact(dep.of(k.value, unit)) for k in keywords if k.arg},
                        _fact(self.dispatch(call, unit))]
            step = unit is not self.model.tree and is_step_method(self.model, unit)
            guarded = self.guards.guarded(call, unit)
            if receiver_dep == [SELF] and unit is not self.model.tree:
                attrs = self.attribute_dependences(unit, call.lineno)
        return [loop_facts, fn_facts, step, guarded, _receiver_key(self.model, receiver), attrs,
                self._edge(call, via)]

    def _edge(self, call: ast.Call, via: str) -> list[Any] | None:
        """How the callee's summary applies at this call (hooklint.static.core.summary.Edge)."""
        from hooklint.static.core import places as P
        from hooklint.static.core.summary import Edge

        core = self.core
        func = core.places.owner(call)
        if via == "apply":
            module = call.func.value  # type: ignore[attr-defined]
            return Edge(P.UNKNOWN, [P.element(core.places.of(module, func))], {}, "drop",
                        core.guarded(call, func), call.lineno).to_json()
        return core.facts_of.edge(call, func, 0).to_json()

    def dispatch(self, node: ast.AST, unit: ast.AST) -> frozenset[str] | None:
        """What the branches around ``node`` (inside ``unit``) dispatch on:
        ``if name == "lrp":`` runs only for one value of ``name``, so the
        call repeats only when ``name`` is the same each time."""
        parts: list[frozenset[str] | None] = []
        child: ast.AST = node
        cur = getattr(node, "_hl_parent", None)
        while cur is not None and cur is not unit:
            if isinstance(cur, (ast.If, ast.IfExp)) and child is not cur.test:
                parts += [self.dependence.of(subject, unit) for subject in _dispatch_subjects(cur.test)]
            child, cur = cur, getattr(cur, "_hl_parent", None)
        return _union(parts)

    def attribute_dependences(self, func: ast.AST, line: int) -> dict[str, list[str] | None]:
        """``self.<attr>`` assigned in the method before ``line``: its
        dependence (``self.model = model`` in ``__init__``: ``["model"]``);
        None for an attribute assigned more than once, or otherwise than by
        a plain assignment, before it.  Assignments after ``line`` do not
        change what the call at ``line`` sees."""
        out: dict[str, list[str] | None] = {}
        stores: dict[str, list[ast.AST]] = {}
        for node in executed_nodes(func):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.lineno < line \
                    and isinstance(node.value, ast.Name) and self.dependence._is_own_self(node.value, func):
                stores.setdefault(node.attr, []).append(node)
        for attr, nodes in stores.items():
            parent = getattr(nodes[0], "_hl_parent", None)
            if len(nodes) == 1 and isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is not None \
                    and (not isinstance(parent, ast.Assign) or len(parent.targets) == 1):
                values = [parent.value]
                if is_empty_container(parent.value):
                    # `self.groups = dict()`, filled before the call: it holds what was put in it
                    values += self.dependence.fills(nodes[0].value, attr, func, line)
                out[attr] = _fact(_union(self.dependence.of(value, func) for value in values))
            else:
                out[attr] = None
        return out

    def _repeating_units(self, call: ast.Call) -> list[ast.AST]:
        units: list[ast.AST] = list(enclosing_loops(call))
        comprehension = enclosing_comprehension(call)
        if comprehension is not None:
            units.append(comprehension)
        units.sort(key=lambda u: -_depth(u))
        return units


def _dispatch_subjects(test: ast.AST) -> list[ast.AST]:
    """The values a condition compares with constants: ``name == "lrp"``,
    ``mode in ("a", "b")``, ``kind is None`` (and of ``and``/``or``/``not``)."""
    if isinstance(test, ast.BoolOp):
        return [s for value in test.values for s in _dispatch_subjects(value)]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _dispatch_subjects(test.operand)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and \
            isinstance(test.ops[0], (ast.Eq, ast.NotEq, ast.Is, ast.IsNot, ast.In, ast.NotIn)):
        left, right = test.left, test.comparators[0]
        if _constant_like(right):
            return [left]
        if _constant_like(left):
            return [right]
    return []


def _constant_like(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return all(isinstance(e, ast.Constant) for e in node.elts)
    return False


def _depth(node: ast.AST) -> int:
    depth = 0
    cur = getattr(node, "_hl_parent", None)
    while cur is not None:
        depth += 1
        cur = getattr(cur, "_hl_parent", None)
    return depth


def _fact(dep: frozenset[str] | None) -> list[str] | None:
    return None if dep is None else sorted(dep)


def _receiver_key(model: SemanticModel, receiver: ast.AST | None) -> str | None:
    """Equal for sites that call on the same object (the same binding of the
    same name, or the same ``self.<attr>`` path); None when unknown."""
    if receiver is None:
        return None
    parts: list[str] = []
    cur = receiver
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name):
        return None
    bindings = model.bindings_at(cur)
    if len(bindings) != 1:
        return None
    b = bindings[0]
    if b.kind == "param":
        func = b.scope.node
        params = positional_params(func) if isinstance(func, FunctionNode) else []
        cls = model.enclosing_class(func)
        if params and params[0] == cur.id and cls is not None and not is_staticmethod(func):
            return ".".join(["self", str(cls.node.lineno)] + parts[::-1])
    return ".".join([cur.id, str(b.lineno), str(getattr(b.node, "col_offset", 0))] + parts[::-1])


def summarize(model: SemanticModel, inference: Inference, path: str, display_path: str,
              module: str | None = None, facts: bool = False) -> dict[str, Any]:
    return Summarizer(model, inference, path, display_path, module).summary(facts)
