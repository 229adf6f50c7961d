"""Places: where a value comes from, in the terms of the function that holds it.

A summary says "registers a hook on its parameter ``model``" or "keeps the
handle in ``self.handles``"; a call site turns that into its own terms by
putting its arguments in for the parameters.  Places are short strings, so
that summaries can be stored with a file's results and read by other files:

=================  ==========================================================
``p:<name>``       the function's parameter ``name``
``s``              the method's own object (``self``)
``<place>.<attr>`` an attribute of a place (``s.handles``, ``p:model.layer4``)
``e:<place>``      an element or part of a place: an item of a list or dict,
                   a submodule (``for m in model.modules()`` gives
                   ``e:p:model``), an element a generator yields
``g:<name>``       a module-level name of the function's file
``c:<json>``       a constant (``c:"bwd"``, ``c:true``)
``l:<n>``          a local name of the function (never leaves the file)
``n``              an object the function makes
``?``              unknown
=================  ==========================================================

:class:`Places` computes them from the syntax of one file; :func:`substitute`
maps a callee's place to the caller's through a call's arguments.
"""

from __future__ import annotations

import ast
import json
from typing import Callable

from hooklint.static.semantic import FunctionNode, SemanticModel, is_classmethod, is_staticmethod

UNKNOWN = "?"
NEW = "n"
SELF = "s"
ELEMENT = "e:"

# Methods of a module (or a dict, a list) whose result's elements are parts of it.
_PART_ITERATORS: dict[str, tuple[int, ...]] = {
    "modules": (), "children": (), "parameters": (), "buffers": (), "values": (), "keys": (),
    "named_modules": (1,), "named_children": (1,), "named_parameters": (1,), "named_buffers": (1,), "items": (1,),
}
# Calls whose result is a part of their receiver (or first argument).
_PART_ACCESSORS = frozenset({"get_submodule", "get_parameter", "get_buffer", "get", "pop", "__getitem__"})
# Module methods that return the module itself.
_RETURNS_SELF = frozenset({"to", "cuda", "cpu", "eval", "train", "float", "double", "half", "bfloat16",
                           "requires_grad_", "type", "share_memory"})
# Builtins whose iteration gives the elements of their (first) argument.
_ELEMENT_KEEPING = frozenset({"list", "tuple", "reversed", "sorted", "iter", "set", "frozenset"})

MAX_DEPTH = 8
# Steps one outermost question may take.  Answers inside a chain of bindings are
# not remembered (they may be partial), and a call's receiver asks again from the
# start, so long chains of `x = f(y)` blow up exponentially (transformer-lens's
# architecture_adapter.py did not finish); past the budget a place is UNKNOWN,
# which only makes rules quieter.
MAX_STEPS = 20_000


def constant(value: object) -> str:
    return "c:" + json.dumps(value, sort_keys=True)


def constant_value(place: str) -> tuple[bool, object]:
    """(True, value) for a ``c:`` place, else (False, None)."""
    if place.startswith("c:"):
        try:
            return True, json.loads(place[2:])
        except ValueError:
            return False, None
    return False, None


def element(place: str) -> str:
    if place in (UNKNOWN, NEW) or place.startswith("c:"):
        return UNKNOWN if place.startswith("c:") else place
    return place if place.startswith(ELEMENT) else ELEMENT + place


def attribute(place: str, attr: str) -> str:
    if place in (UNKNOWN, NEW) or place.startswith("c:"):
        return UNKNOWN if place.startswith("c:") else place
    return f"{place}.{attr}"


def root(place: str) -> str:
    """``e:p:model.layer4`` -> ``p:model``; ``s.model.fc`` -> ``s.model``."""
    while place.startswith(ELEMENT):
        place = place[len(ELEMENT):]
    if place.startswith("s."):
        return "s." + place[2:].split(".", 1)[0]
    return place.split(".", 1)[0]


def _is_callers_part(place: str) -> bool:
    return place.startswith(ELEMENT) and is_callers(place)


def is_callers(place: str) -> bool:
    """Does the place name (a part of) something the caller handed over: a
    parameter, or an attribute of the object (set from outside)?"""
    base = root(place)
    return base.startswith("p:") or base.startswith("s.")


def substitute(place: str, argument: Callable[[str], str | None], receiver: str) -> str:
    """A callee's place in the caller's terms: ``argument(name)`` gives the
    caller's place for the callee's parameter ``name`` (None: not passed and
    no default), ``receiver`` the caller's place for the callee's ``self``."""
    if place.startswith(ELEMENT):
        return element(substitute(place[len(ELEMENT):], argument, receiver))
    if place.startswith("p:"):
        name, dot, rest = place[2:].partition(".")
        found = argument(name)
        if found is None:
            return UNKNOWN
        return _extend(found, rest) if dot else found
    if place == SELF or place.startswith("s."):
        rest = place[2:] if place.startswith("s.") else ""
        return _extend(receiver, rest) if rest else receiver
    if place.startswith("c:") or place in (NEW, UNKNOWN):
        return place
    if place.startswith("l:"):
        return place  # a local of an enclosing function, captured by a closure: the same in the caller
    return UNKNOWN  # another file's globals mean nothing here


def _extend(place: str, rest: str) -> str:
    out = place
    for attr in rest.split("."):
        out = attribute(out, attr)
    return out


class Places:
    """Places of expressions in the functions of one file."""

    def __init__(self, model: SemanticModel, elements_of_call: Callable[[ast.Call, ast.AST], str | None] | None = None,
                 returned_by_call: Callable[[ast.Call, ast.AST], str | None] | None = None):
        self.model = model
        # what a call of a function of the project returns the elements of (a generator of submodules)
        self.elements_of_call = elements_of_call or (lambda call, func: None)
        # what a call of a function of the project returns (an argument it hands back, a part of one)
        self.returned_by_call = returned_by_call or (lambda call, func: None)
        self._active: set[int] = set()
        self._steps = 0
        self._nesting = 0
        self._memo: dict[tuple[int, int], str] = {}

    def owner(self, node: ast.AST) -> ast.AST | None:
        """The function (def) whose code ``node`` is; None at module level or in a lambda."""
        scope = getattr(node, "_hl_scope", None)
        while scope is not None and scope.kind == "comprehension":
            scope = scope.parent
        if scope is None or scope.kind not in ("function", "lambda"):
            return None
        return scope.node

    def of(self, expr: ast.AST | None, func: ast.AST | None, depth: int = 0) -> str:
        """The place of ``expr`` as the function ``func`` sees it (remembered:
        every question about a name follows its bindings once)."""
        if expr is None or depth > MAX_DEPTH:
            return UNKNOWN
        key = (id(expr), id(func))
        found = self._memo.get(key)
        if found is None:
            if not self._nesting:
                self._steps = 0
            self._steps += 1
            if self._steps > MAX_STEPS:
                return UNKNOWN
            self._nesting += 1
            try:
                found = self._of(expr, func, depth)
            finally:
                self._nesting -= 1
            if not self._active:  # not inside a cycle of bindings, where the answer is partial
                self._memo[key] = found
        return found

    def _of(self, expr: ast.AST, func: ast.AST | None, depth: int) -> str:
        if isinstance(expr, ast.Constant):
            try:
                return constant(expr.value)
            except (TypeError, ValueError):
                return UNKNOWN
        if isinstance(expr, ast.Name):
            return self._name(expr, func, depth)
        if isinstance(expr, ast.Attribute):
            return attribute(self.of(expr.value, func, depth + 1), expr.attr)
        if isinstance(expr, ast.Subscript):
            inner = self._copied_by_name(expr.value)
            if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and len(inner.args) == 1 \
                    and not inner.keywords and inner.func.id in ("dict", "list", "tuple") and self._builtin(inner.func):
                # `dict(model.named_modules())[name]`, `list(model.children())[-1]`: an item of what it copied
                return self.element_of(inner.args[0], func, (1,) if inner.func.id == "dict" else (), depth + 1)
            return element(self.of(expr.value, func, depth + 1))
        if isinstance(expr, ast.Starred):
            return UNKNOWN
        if isinstance(expr, (ast.List, ast.Tuple, ast.ListComp, ast.GeneratorExp, ast.Dict, ast.DictComp,
                             ast.Set, ast.SetComp)):
            return NEW
        if isinstance(expr, ast.Call):
            return self._call(expr, func, depth)
        if isinstance(expr, ast.NamedExpr):
            return self.of(expr.value, func, depth + 1)
        return UNKNOWN

    def _call(self, call: ast.Call, func: ast.AST | None, depth: int) -> str:
        f = call.func
        if isinstance(f, ast.Attribute):
            if f.attr in _RETURNS_SELF:
                return self.of(f.value, func, depth + 1)
            if f.attr in _PART_ACCESSORS:
                return element(self.of(f.value, func, depth + 1))
            if f.attr in _PART_ITERATORS and not self._is_class_ref(f.value):
                # `self.layers.values()`, `model.modules()` handed on as a value (an argument a helper
                # iterates): a view of the receiver's parts, as iterating it in place gives
                return element(self.of(f.value, func, depth + 1))
        if isinstance(f, ast.Name) and f.id == "getattr" and call.args and self._builtin(f):
            return element(self.of(call.args[0], func, depth + 1))
        if isinstance(f, ast.Name) and f.id in _ELEMENT_KEEPING and len(call.args) == 1 and self._builtin(f):
            # `list(model.modules())`, `tuple(self.layers.values())` handed on: a copy of the parts
            found = self.element_of(call.args[0], func, (), depth + 1)
            return element(found) if _is_callers_part(found) else UNKNOWN
        if isinstance(f, ast.Name) and self._is_class(f):
            return NEW
        found = self.returned_by_call(call, func)
        return found if found is not None else UNKNOWN

    def _is_class_ref(self, value: ast.AST) -> bool:
        return isinstance(value, ast.Name) and self._is_class(value)

    def _copied_by_name(self, value: ast.AST) -> ast.AST:
        """``table`` bound once to ``dict(model.named_modules())`` (or a ``list`` /
        ``tuple`` copy) stands for that call when subscripted, as the inline
        spelling does."""
        if isinstance(value, ast.Name) and hasattr(value, "_hl_scope"):
            bindings = self.model.bindings_at(value)
            if len(bindings) == 1 and bindings[0].kind == "assign" and not bindings[0].path \
                    and isinstance(bindings[0].value, ast.Call) and isinstance(bindings[0].value.func, ast.Name) \
                    and bindings[0].value.func.id in ("dict", "list", "tuple"):
                return bindings[0].value
        return value

    def _builtin(self, name: ast.Name) -> bool:
        return not hasattr(name, "_hl_scope") or self.model.qualify(name) == f"builtins.{name.id}"

    def _is_class(self, name: ast.Name) -> bool:
        if not hasattr(name, "_hl_scope"):
            return False
        bindings = self.model.bindings_at(name)
        return len(bindings) == 1 and bindings[0].kind == "class"

    def _name(self, name: ast.Name, func: ast.AST | None, depth: int) -> str:
        if not hasattr(name, "_hl_scope"):
            return UNKNOWN
        bindings = self.model.bindings_at(name)
        if len(bindings) != 1:
            return UNKNOWN
        b = bindings[0]
        scope_node = b.scope.node
        if b.scope is self.model.module_scope:
            return f"g:{name.id}" if b.kind in ("assign", "augassign", "other") else UNKNOWN
        if b.kind == "param":
            if scope_node is not func:
                return UNKNOWN  # a parameter of an enclosing function (a closure)
            if is_self_param(b.value):  # type: ignore[arg-type]
                return SELF
            return f"p:{name.id}"
        key = id(b)
        if key in self._active:
            return UNKNOWN
        self._active.add(key)
        try:
            if b.kind == "for" and isinstance(b.value, ast.AST):
                return self.element_of(b.value, func, b.path, depth + 1)
            if b.kind == "assign" and isinstance(b.value, ast.AST):
                if b.path:
                    inner = self.of(b.value, func, depth + 1)  # type: ignore[arg-type]
                    return UNKNOWN if inner == NEW else element(inner) if inner != UNKNOWN else UNKNOWN
                found = self.of(b.value, func, depth + 1)  # type: ignore[arg-type]
                if found == NEW:
                    return f"l:{b.lineno}:{name.id}"
                return found
            if b.kind == "with":
                return UNKNOWN
        finally:
            self._active.discard(key)
        return UNKNOWN

    def element_of(self, iterable: ast.AST, func: ast.AST | None, path: tuple[int, ...] = (),
                   depth: int = 0) -> str:
        """The place of one element that iterating ``iterable`` gives (its
        ``path`` item, for ``for name, m in model.named_modules()``)."""
        if depth > MAX_DEPTH:
            return UNKNOWN
        if isinstance(iterable, ast.Call):
            f = iterable.func
            if isinstance(f, ast.Attribute) and f.attr in _PART_ITERATORS:
                wanted = _PART_ITERATORS[f.attr]
                if path[:len(wanted)] == wanted:  # (an element of an element is still a part)
                    return element(self.of(f.value, func, depth + 1))
                return UNKNOWN
            if isinstance(f, ast.Name) and self._builtin(f) and iterable.args:
                if f.id in _ELEMENT_KEEPING and not path:
                    return self.element_of(iterable.args[0], func, path, depth + 1)
                if f.id == "enumerate" and path[:1] == (1,):
                    return self.element_of(iterable.args[0], func, path[1:], depth + 1)
                if f.id == "filter" and len(iterable.args) == 2 and not path:
                    return self.element_of(iterable.args[1], func, path, depth + 1)
                if f.id == "zip" and path and 0 <= path[0] < len(iterable.args):
                    return self.element_of(iterable.args[path[0]], func, path[1:], depth + 1)
            if path:
                return UNKNOWN
            found = self.elements_of_call(iterable, func)
            return found if found is not None else UNKNOWN
        if isinstance(iterable, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) and not path:
            return self.of(iterable.elt, func, depth + 1)
        if isinstance(iterable, (ast.List, ast.Tuple)) and not path:
            places = {self.of(e, func, depth + 1) for e in iterable.elts}
            return places.pop() if len(places) == 1 else UNKNOWN
        if isinstance(iterable, ast.Name) and not path:
            # `convs = [m for m in model.modules() if ...]; for conv in convs:` is a part of the
            # caller's model (a local container of anything else stays the local it is)
            item = self._comprehension_item(iterable)
            if item is not None:
                found = self.of(item, func, depth + 1)
                if is_callers(found):
                    return found
        base = self.of(iterable, func, depth + 1)
        if base in (UNKNOWN, NEW) or base.startswith("c:"):
            return UNKNOWN
        return element(base)  # `for a, b in pairs`: parts of the elements are parts too

    def _comprehension_item(self, name: ast.Name) -> ast.expr | None:
        """The element (a dict comprehension's key) of the comprehension
        ``name`` is bound to, once and for all."""
        if not hasattr(name, "_hl_scope"):
            return None
        bindings = self.model.bindings_at(name)
        if len(bindings) != 1 or bindings[0].kind != "assign" or bindings[0].path:
            return None
        value = bindings[0].value
        if isinstance(value, (ast.ListComp, ast.SetComp, ast.GeneratorExp)):
            return value.elt
        if isinstance(value, ast.DictComp):
            return value.key
        return None


def is_self_param(arg: ast.arg) -> bool:
    """Is ``arg`` the ``self`` of a method (not of a static or class method)?"""
    func = getattr(arg, "_hl_parent", None)
    if not isinstance(func, FunctionNode) or is_staticmethod(func) or is_classmethod(func):
        return False
    params = func.args.posonlyargs + func.args.args
    return bool(params) and params[0] is arg and isinstance(getattr(func, "_hl_parent", None), ast.ClassDef)
