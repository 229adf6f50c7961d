"""Attributes of ``self`` that hold hooks, as a class's methods use them.

Two bookkeeping questions about one class, answered on the syntax of one
file (never importing anything):

- which attributes hold hook handles (or an object of hooks with a
  ``remove()``), and the kinds of container each is assigned (a dict in
  ``__init__``, a list where it is reset) against the operations its uses
  need (``.get(name)`` needs a dict);
- which of them a method reads without their being assigned on every way
  to that read: assigned only in a later lifecycle method, but read by
  ``remove()``, which ``__del__`` calls.

Evidence that an attribute holds hooks: a registration's handle is stored
into it (:func:`hooklint.static.handles.destination`), or it, its items or
its values are ``remove()``d without arguments (no list, dict or set has a
``remove()`` without an argument) in a file that registers hooks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Iterator

from hooklint.static.flow import contains, executed_nodes
from hooklint.static.handles import destination, self_attribute
from hooklint.static.semantic import ClassInfo, FunctionNode

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext

# Container kinds, and the calls and literals that make each.
DICT, LIST, SET = "dict", "list", "set"
_CONTAINER_CALLS = {
    "dict": DICT, "collections.OrderedDict": DICT, "collections.defaultdict": DICT, "OrderedDict": DICT,
    "defaultdict": DICT, "list": LIST, "collections.deque": LIST, "deque": LIST, "set": SET,
}
# Methods only some containers have (a use of one says which kinds the code expects).
_METHOD_KINDS = {
    "get": {DICT}, "items": {DICT}, "values": {DICT}, "keys": {DICT}, "setdefault": {DICT}, "popitem": {DICT, SET},
    "append": {LIST}, "extend": {LIST}, "insert": {LIST}, "sort": {LIST}, "reverse": {LIST}, "index": {LIST},
    "add": {SET}, "discard": {SET}, "update": {DICT, SET},
}
_ALL_KINDS = frozenset({DICT, LIST, SET})
# External base classes known not to give instances arbitrary attributes.
_PLAIN_BASES = frozenset({"object", "builtins.object", "abc.ABC", "typing.Generic", "torch.nn.Module",
                          "torch.nn.modules.module.Module"})
_MAX_DEPTH = 6


@dataclass(frozen=True)
class Use:
    """A use of ``self.<attr>`` that needs a kind of container."""

    node: ast.AST  # the call or subscript
    method: ast.AST
    kinds: frozenset[str]
    text: str  # "`.get(name)`"


@dataclass(frozen=True)
class Assignment:
    node: ast.AST  # the assignment statement (or class-body statement)
    method: ast.AST | None  # None in the class body
    kind: str | None  # DICT, LIST, SET, or None (not a container this module knows)


@dataclass(frozen=True)
class UnsetRead:
    """``self.<attr>`` read on a way that does not assign it first."""

    read: ast.Attribute
    method: ast.AST  # the method holding the read
    entry: str  # "__del__" or "__init__"
    chain: tuple[ast.AST, ...]  # methods from the entry to the read, the entry first
    assigned_in: tuple[ast.AST, ...]  # methods that assign it (none reached from __init__ before the read)


class HandleAttributes:
    """The hook-holding attributes of the classes of one file."""

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx

    # -- which attributes hold hooks ---------------------------------------------
    @cached_property
    def _by_class(self) -> dict[int, dict[str, str]]:
        """id(class node) -> {attr: how we know it holds hooks}."""
        ctx = self.ctx
        out: dict[int, dict[str, str]] = {}
        for reg in ctx.hooks.registrations:
            dest = destination(ctx, reg)
            if dest.owner is not None and dest.attr and dest.kind in ("attribute", "container"):
                out.setdefault(id(dest.owner.node), {}).setdefault(dest.attr, "the handles are stored there")
        if not ctx.hooks.registrations:
            return out
        for cls in ctx.model.classes.values():
            for method in cls.methods.values():
                for node in executed_nodes(method):
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                            and node.func.attr == "remove" and not node.args and not node.keywords:
                        attr = self._removed_attribute(cls, node.func.value)
                        if attr is not None:
                            out.setdefault(id(cls.node), {}).setdefault(attr, "it is `remove()`d")
        return out

    def _removed_attribute(self, cls: ClassInfo, expr: ast.AST) -> str | None:
        """``self.h``, ``self.hs[k]``, ``self.hs.pop(k)``, or a loop variable over
        ``self.hs`` / ``.values()`` / ``.items()``: the attribute of ``cls``."""
        found = self_attribute(self.ctx, expr)
        if found is not None:
            return found[1] if found[0] is cls else None
        if isinstance(expr, ast.Subscript):
            return self._removed_attribute(cls, expr.value)
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("pop", "get"):
            return self._removed_attribute(cls, expr.func.value)
        if isinstance(expr, ast.Name):
            for b in self.ctx.model.bindings_at(expr):
                if b.kind == "for" and isinstance(b.value, ast.AST):
                    iterable = b.value
                    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
                            and iterable.func.attr in ("values", "items", "copy"):
                        iterable = iterable.func.value
                    elif isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) \
                            and iterable.func.id in ("list", "reversed", "tuple") and iterable.args:
                        iterable = iterable.args[0]
                    found = self_attribute(self.ctx, iterable)
                    if found is not None and found[0] is cls:
                        return found[1]
        return None

    def holders(self, cls: ClassInfo) -> dict[str, str]:
        """{attr: evidence} for the attributes of ``cls`` (or its local bases) that hold hooks."""
        out: dict[str, str] = {}
        for info in _mro(cls):
            for attr, why in self._by_class.get(id(info.node), {}).items():
                out.setdefault(attr, why)
        return out

    # -- container kinds ------------------------------------------------------------
    def assignments(self, cls: ClassInfo, attr: str) -> list[Assignment]:
        out = []
        for info in _mro(cls):
            for value, scope, node in info.attributes.get(attr, ()):
                out.append(Assignment(node, scope.node, self.container_kind(value)))
            for stmt in info.node.body:
                value = _class_body_value(stmt, attr)
                if value is not None:
                    out.append(Assignment(stmt, None, self.container_kind(value)))
        return out

    def container_kind(self, expr: ast.AST | None) -> str | None:
        if isinstance(expr, (ast.Dict, ast.DictComp)):
            return DICT
        if isinstance(expr, (ast.List, ast.ListComp)):
            return LIST
        if isinstance(expr, (ast.Set, ast.SetComp)):
            return SET
        if isinstance(expr, ast.Call):
            qual = self.ctx.model.qualify(expr.func) or getattr(expr.func, "id", None)
            if qual is not None:
                kind = _CONTAINER_CALLS.get(qual.removeprefix("builtins."))
                if kind is not None:
                    return kind
            # `field(default_factory=dict)`, `PrivateAttr(default_factory=list)`
            for kw in expr.keywords:
                if kw.arg == "default_factory":
                    return self.container_kind(ast.Call(func=kw.value, args=[], keywords=[])) \
                        if isinstance(kw.value, (ast.Name, ast.Attribute)) else None
        return None

    def uses(self, cls: ClassInfo, attr: str) -> list[Use]:
        """Uses of ``self.<attr>`` in the methods of ``cls`` that need some kinds of container."""
        out = []
        for info in _mro(cls):
            for method in info.methods.values():
                for node in executed_nodes(method):
                    if not isinstance(node, ast.Attribute) or node.attr != attr or not isinstance(node.ctx, ast.Load):
                        continue
                    found = self_attribute(self.ctx, node)
                    if found is None or found[0] is not info:
                        continue
                    use = _use_of(node, method)
                    if use is not None:
                        out.append(use)
        return out

    # -- reads before assignment ------------------------------------------------------
    def unset_reads(self, cls: ClassInfo, attr: str) -> list[UnsetRead]:
        """Reads of ``self.<attr>`` reached from ``__del__`` (which runs for
        every object, whatever ran before) or from ``__init__`` before its
        assignment there, when nothing that surely runs first assigns it.
        An attribute the class (and its local bases) never assigns belongs to
        a base this file does not show: not judged."""
        if _defines(cls, "__getattr__") or _declared(cls, attr):
            return []
        assigned_in = tuple(a.method for a in self.assignments(cls, attr) if a.method is not None)
        if not assigned_in:
            return []
        init = cls.method("__init__")
        init_assigns = init is not None and self._assigns_before(init, attr, None, set())
        out: list[UnsetRead] = []
        finalizer = cls.method("__del__")
        if finalizer is not None and not init_assigns:
            for read, chain in self._reads_from(cls, finalizer, attr, (finalizer,), set()):
                out.append(UnsetRead(read, chain[-1], "__del__", chain, assigned_in))
        if init is not None:
            out += self._reads_in_init_before_assignment(cls, init, attr, assigned_in)
        return out

    def _reads_from(self, cls: ClassInfo, method: ast.AST, attr: str, chain: tuple[ast.AST, ...],
                    seen: set[int]) -> Iterator[tuple[ast.Attribute, tuple[ast.AST, ...]]]:
        """Unguarded reads of ``self.<attr>`` in ``method`` and the methods it
        calls on ``self``, up to the first assignment (after it, it is set)."""
        if id(method) in seen or len(chain) > _MAX_DEPTH:
            return
        seen.add(id(method))
        for node in executed_nodes(method):
            if _assigns(node, attr, method):
                return
            if isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, ast.Load) \
                    and _is_self(node.value, method) and not _guarded(node, method, attr):
                if _stored_by_statement(node, attr, method):
                    return  # `self.h = self.h or []`: the statement assigns it
                yield node, chain
                return  # one read per method is enough to say it
            callee = self._self_call(cls, node, method)
            if callee is not None and not _guarded(node, method, attr):
                found = list(self._reads_from(cls, callee, attr, chain + (callee,), seen))
                if found:
                    yield found[0]
                    return
                if self._assigns_before(callee, attr, None, set()):
                    return

    def _self_call(self, cls: ClassInfo, node: ast.AST, method: ast.AST) -> ast.AST | None:
        """The method of ``cls`` that ``node`` calls: ``self.m()``, ``super().__init__()``
        or ``Base.__init__(self)`` for a base the file shows."""
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            return None
        func = node.func
        if _is_self(func.value, method):
            callee = cls.method(func.attr)
            return callee if isinstance(callee, FunctionNode) else None
        if _is_super(func.value):
            owner = self.ctx.model.enclosing_class(method)
            for base in (owner.local_bases if owner is not None else ()):
                callee = base.method(func.attr)
                if isinstance(callee, FunctionNode):
                    return callee
            return None
        if node.args and _is_self(node.args[0], method):
            base = self.ctx.model.class_for_expr(func.value)
            callee = base.method(func.attr) if base is not None else None
            return callee if isinstance(callee, FunctionNode) else None
        return None

    def _assigns_before(self, method: ast.AST, attr: str, stop: ast.AST | None, seen: set[int]) -> bool:
        """Does ``method`` (or a method it calls on ``self``) assign ``self.<attr>``,
        before ``stop`` when given (in source order)?"""
        if id(method) in seen or len(seen) > _MAX_DEPTH * 4:
            return False
        seen.add(id(method))
        cls = self.ctx.model.enclosing_class(method)
        for node in executed_nodes(method):
            if stop is not None and _at_or_after(node, stop):
                return False
            if _assigns(node, attr, method):
                return True
            if cls is not None:
                callee = self._self_call(cls, node, method)
                if callee is not None and self._assigns_before(callee, attr, None, seen):
                    return True
        return False

    def _reads_in_init_before_assignment(self, cls: ClassInfo, init: ast.AST, attr: str,
                                         assigned_in: tuple[ast.AST, ...]) -> list[UnsetRead]:
        """``self.remove_hooks(); self.handles = []`` in ``__init__``: the call reads it first."""
        if self.ctx.model.enclosing_class(init) is not cls:
            return []  # an inherited __init__ is judged in its own class
        for stmt in init.body:  # type: ignore[attr-defined]
            if _assigns_any(stmt, attr, init):
                return []
            for node in executed_nodes(stmt):
                if isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, ast.Load) \
                        and _is_self(node.value, init) and not _guarded(node, init, attr):
                    return [UnsetRead(node, init, "__init__", (init,), assigned_in)]
                if _base_init_call(node, init) and self._self_call(cls, node, init) is None:
                    return []  # a base this file does not show may assign it
                callee = self._self_call(cls, node, init)
                if callee is not None and not _guarded(node, init, attr):
                    for read, chain in self._reads_from(cls, callee, attr, (init, callee), set()):
                        return [UnsetRead(read, chain[-1], "__init__", chain, assigned_in)]
                    if self._assigns_before(callee, attr, None, set()):
                        return []
            if not isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)):
                return []  # a branch or loop: the order is no longer plain
        return []

    def unseen_bases(self, cls: ClassInfo) -> list[str]:
        """Bases of ``cls`` (or of its local bases) that this file does not
        show and that may assign attributes in their own ``__init__``."""
        out: list[str] = []
        for info in _mro(cls):
            local = {b.name for b in info.local_bases}
            for base, node in zip(info.bases, info.node.bases):
                name = base or ast.unparse(node)
                if name in _PLAIN_BASES or name.rsplit(".", 1)[-1] in local:
                    continue
                if any(b.node is not None and name.endswith(b.name) for b in info.local_bases):
                    continue
                out.append(name)
        return out


# ---------------------------------------------------------------- helpers

def _mro(cls: ClassInfo, depth: int = 0) -> list[ClassInfo]:
    out = [cls]
    if depth < _MAX_DEPTH:
        for base in cls.local_bases:
            out += [b for b in _mro(base, depth + 1) if b not in out]
    return out


def _class_body_value(stmt: ast.stmt, attr: str) -> ast.expr | None:
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in stmt.targets):
        return stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr \
            and stmt.value is not None:
        return stmt.value
    return None


def _declared(cls: ClassInfo, attr: str) -> bool:
    """Assigned or annotated in the class body (a class default, a dataclass or
    pydantic field), or named in ``__slots__`` with a default elsewhere."""
    for info in _mro(cls):
        for stmt in info.node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr:
                return True
            if _class_body_value(stmt, attr) is not None:
                return True
    return False


def _defines(cls: ClassInfo, name: str) -> bool:
    return any(name in info.methods for info in _mro(cls))


def _is_self(expr: ast.AST, method: ast.AST) -> bool:
    if not isinstance(expr, ast.Name) or not isinstance(method, FunctionNode):
        return False
    params = method.args.posonlyargs + method.args.args
    return bool(params) and params[0].arg == expr.id


def _assigns(node: ast.AST, attr: str, method: ast.AST) -> bool:
    """``self.<attr> = ...`` (also annotated, augmented, unpacked, ``setattr(self, "<attr>", ...)``)."""
    if isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, ast.Store) \
            and _is_self(node.value, method):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" \
            and len(node.args) >= 2 and _is_self(node.args[0], method):
        name = node.args[1]
        return not isinstance(name, ast.Constant) or name.value == attr
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "__dict__":
        return True  # `self.__dict__.update(...)`: may set anything
    return False


def _base_init_call(node: ast.AST, method: ast.AST) -> bool:
    """``super().__init__(...)`` or ``Base.__init__(self, ...)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "__init__"):
        return False
    return _is_super(node.func.value) or bool(node.args) and _is_self(node.args[0], method)


def _is_super(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "super"


def _stored_by_statement(read: ast.AST, attr: str, method: ast.AST) -> bool:
    """The read is part of a statement that also assigns the attribute."""
    cur = getattr(read, "_hl_parent", None)
    while cur is not None and not isinstance(cur, ast.stmt):
        cur = getattr(cur, "_hl_parent", None)
    return cur is not None and isinstance(cur, (ast.Assign, ast.AnnAssign, ast.AugAssign)) \
        and _assigns_any(cur, attr, method)


def _assigns_any(stmt: ast.AST, attr: str, method: ast.AST) -> bool:
    return any(_assigns(node, attr, method) for node in executed_nodes(stmt))


def _at_or_after(node: ast.AST, stop: ast.AST) -> bool:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0)) >= \
        (getattr(stop, "lineno", 0), getattr(stop, "col_offset", 0))


_CATCHES = frozenset({"AttributeError", "Exception", "BaseException"})


def _guarded(node: ast.AST, method: ast.AST, attr: str) -> bool:
    """Inside ``try`` with a handler that catches AttributeError, under a test
    that mentions the attribute by name (``hasattr(self, "h")``, ``"h" in
    self.__dict__``), or after an early return on such a test."""
    cur = getattr(node, "_hl_parent", None)
    child = node
    while cur is not None and cur is not method:
        if isinstance(cur, ast.Try) and child in cur.body:
            for handler in cur.handlers:
                if handler.type is None or any(_caught(t) in _CATCHES for t in _handler_types(handler.type)):
                    return True
        if isinstance(cur, (ast.If, ast.IfExp, ast.While)) and child is not cur.test and _names_attr(cur.test, attr):
            return True
        if isinstance(cur, ast.BoolOp) and child is not cur.values[0] and \
                any(_names_attr(v, attr) for v in cur.values[:cur.values.index(child)] if child in cur.values):
            return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    # `if not hasattr(self, "h"): return` earlier in the method
    if isinstance(method, FunctionNode):
        for stmt in method.body:
            if contains(stmt, node):
                break
            if isinstance(stmt, ast.If) and _names_attr(stmt.test, attr) and stmt.body \
                    and isinstance(stmt.body[-1], (ast.Return, ast.Raise)):
                return True
    return False


def _handler_types(expr: ast.AST) -> list[ast.AST]:
    return list(expr.elts) if isinstance(expr, ast.Tuple) else [expr]


def _caught(expr: ast.AST) -> str:
    return expr.id if isinstance(expr, ast.Name) else getattr(expr, "attr", "")


def _names_attr(test: ast.AST, attr: str) -> bool:
    """The test names the attribute as a string (``hasattr``, ``getattr``, ``in self.__dict__``)."""
    return any(isinstance(n, ast.Constant) and n.value == attr for n in ast.walk(test))


def _use_of(node: ast.Attribute, method: ast.AST) -> Use | None:
    parent = getattr(node, "_hl_parent", None)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        call = getattr(parent, "_hl_parent", None)
        if not (isinstance(call, ast.Call) and call.func is parent):
            return None
        kinds = _METHOD_KINDS.get(parent.attr)
        if parent.attr == "pop" and call.args and _is_str(call.args[0]):
            kinds = {DICT}
        if kinds is None:
            return None
        first = ast.unparse(call.args[0]) if call.args else ""
        return Use(call, method, frozenset(kinds), f"`.{parent.attr}({first})`")
    if isinstance(parent, ast.Subscript) and parent.value is node and _is_str(parent.slice):
        return Use(parent, method, frozenset({DICT}), f"`[{ast.unparse(parent.slice)}]`")
    return None


def _is_str(expr: ast.AST) -> bool:
    """A string key: a literal, an f-string, or a concatenation with one."""
    if isinstance(expr, ast.Constant):
        return isinstance(expr.value, str)
    if isinstance(expr, ast.JoinedStr):
        return True
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _is_str(expr.left) or _is_str(expr.right)
    return False
