"""Where a hook's handle goes, and who removes it.

``register_*_hook`` returns a ``RemovableHandle``; calling its ``remove()``
is the only way to take that one hook off again.  The lifetime rules ask
where the handle of each registration ends up (dropped, a local name, an
attribute of ``self``, a list or dict held by ``self``), which class owns
that attribute, and which methods call ``remove()`` on it.  Answered on the
syntax of one file; anything less direct (a handle passed to another
function, stored through an alias) is "unknown" and the rules stay quiet.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from hooklint.static.flow import executed_nodes, function_of
from hooklint.static.semantic import ClassInfo, FunctionNode, positional_params
from hooklint.static.callgraph import is_self_param

if TYPE_CHECKING:  # pragma: no cover
    from hooklint.static.context import FileContext
    from hooklint.static.hooks import Registration

# Methods that put a handle into a container, and how they are called.
_STORE_METHODS = frozenset({"append", "extend", "add", "insert", "update", "setdefault"})
# Literals and calls that make a new mutable container.
_MUTABLE_CALLS = frozenset({"list", "dict", "set", "collections.OrderedDict", "collections.defaultdict",
                            "collections.deque"})


@dataclass(frozen=True)
class Destination:
    """Where a registration's handle is kept.

    ``kind``: "dropped" (an expression statement), "attribute" (``self.h =``),
    "container" (``self.handles.append(...)``, ``self.handles[k] = ...``, or
    an attribute assigned a list of registrations), or "other".  ``owner`` and
    ``attr`` name the attribute of ``self``; ``node`` is the storing node."""

    kind: str
    node: ast.AST
    owner: ClassInfo | None = None
    attr: str | None = None
    method: ast.AST | None = None


def self_attribute(ctx: "FileContext", expr: ast.AST) -> tuple[ClassInfo, str, ast.AST] | None:
    """``self.<attr>`` in a method: (class, attribute name, method)."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)):
        return None
    bindings = ctx.model.bindings_at(expr.value)
    if len(bindings) != 1 or bindings[0].kind != "param" or not is_self_param(ctx.model, bindings[0].value):  # type: ignore[arg-type]
        return None
    method = bindings[0].scope.node
    cls = ctx.model.enclosing_class(method)
    if cls is None or method not in cls.methods.values():
        return None
    return cls, expr.attr, method


def destination(ctx: "FileContext", reg: "Registration") -> Destination:
    """Where the handle of ``reg`` goes: followed through one local name."""
    node: ast.AST = reg.call
    parent = getattr(node, "_hl_parent", None)
    # a list or comprehension of registrations, as a whole
    while isinstance(parent, (ast.List, ast.Tuple, ast.ListComp)) or isinstance(parent, ast.comprehension):
        node, parent = parent, getattr(parent, "_hl_parent", None)
    if isinstance(parent, ast.Expr) and node is reg.call:
        return Destination("dropped", parent)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is node:
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        if len(targets) == 1:
            target = targets[0]
            found = self_attribute(ctx, target)
            if found is not None:
                kind = "attribute" if node is reg.call else "container"
                return Destination(kind, parent, found[0], found[1], found[2])
            if isinstance(target, ast.Subscript):
                found = self_attribute(ctx, target.value)
                if found is not None:
                    return Destination("container", parent, found[0], found[1], found[2])
            if isinstance(target, ast.Name) and node is reg.call:
                return _through_name(ctx, target, parent) or Destination("other", parent)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and parent.func.attr in _STORE_METHODS:
        found = self_attribute(ctx, parent.func.value)
        if found is not None:
            return Destination("container", parent, found[0], found[1], found[2])
    return Destination("other", parent if parent is not None else node)


def _through_name(ctx: "FileContext", target: ast.Name, stmt: ast.AST) -> Destination | None:
    """``h = m.register_...(); self.handles.append(h)``: where ``h`` goes,
    when that is its only use."""
    scope = ctx.model.scope_of(target)
    func = scope.node
    uses = [n for n in executed_nodes(func) if isinstance(n, ast.Name) and n.id == target.id
            and isinstance(n.ctx, ast.Load)] if isinstance(func, FunctionNode) else []
    if len(uses) != 1:
        return None
    use = uses[0]
    parent = getattr(use, "_hl_parent", None)
    if isinstance(parent, ast.Call) and use in parent.args and isinstance(parent.func, ast.Attribute) \
            and parent.func.attr in _STORE_METHODS:
        found = self_attribute(ctx, parent.func.value)
        if found is not None:
            return Destination("container", parent, found[0], found[1], found[2])
    if isinstance(parent, ast.Assign) and parent.value is use and len(parent.targets) == 1:
        target = parent.targets[0]
        found = self_attribute(ctx, target)
        if found is not None:
            return Destination("attribute", parent, found[0], found[1], found[2])
        if isinstance(target, ast.Subscript):
            found = self_attribute(ctx, target.value)
            if found is not None:
                return Destination("container", parent, found[0], found[1], found[2])
    return None


@dataclass(frozen=True)
class Removal:
    """A ``remove()`` of the handles kept in ``self.<attr>``."""

    call: ast.Call
    method: ast.AST
    conditional: bool  # under an `if` (or `try` handler) inside the method


def removals(ctx: "FileContext", cls: ClassInfo, attr: str) -> list[Removal]:
    """Calls that remove handles kept in ``self.<attr>`` in the methods of
    ``cls``: ``self.h.remove()``, ``for h in self.hs: h.remove()``,
    ``[h.remove() for h in self.hs]``, ``self.hs[k].remove()``,
    ``self.hs.pop(...).remove()``."""
    out = []
    for method in cls.methods.values():
        for node in executed_nodes(method):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "remove" and not node.args and not node.keywords):
                continue
            if _names_handles_of(ctx, node.func.value, cls, attr, method):
                out.append(Removal(node, method, _conditional(node, method)))
    return out


def _names_handles_of(ctx: "FileContext", expr: ast.AST, cls: ClassInfo, attr: str, method: ast.AST) -> bool:
    found = self_attribute(ctx, expr)
    if found is not None:
        return found[0] is cls and found[1] == attr
    if isinstance(expr, ast.Subscript):
        return _names_handles_of(ctx, expr.value, cls, attr, method)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in ("pop", "get"):
        return _names_handles_of(ctx, expr.func.value, cls, attr, method)
    if isinstance(expr, ast.Name):
        for b in ctx.model.bindings_at(expr):
            if b.kind == "for" and isinstance(b.value, ast.AST):
                iterable = b.value
                # `for h in self.hs`, `for h in self.hs.values()`, `for _, h in self.hs.items()`
                if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) \
                        and iterable.func.attr in ("values", "items", "copy") or \
                        isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Name) \
                        and iterable.func.id in ("list", "reversed", "tuple"):
                    iterable = iterable.func.value if isinstance(iterable.func, ast.Attribute) else \
                        (iterable.args[0] if iterable.args else iterable)
                found = self_attribute(ctx, iterable)
                if found is not None and found[0] is cls and found[1] == attr:
                    return True
    return False


def _conditional(node: ast.AST, method: ast.AST) -> bool:
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not method:
        if isinstance(cur, (ast.If, ast.IfExp, ast.ExceptHandler, ast.While)):
            return True
        cur = getattr(cur, "_hl_parent", None)
    return False


def assignments(cls: ClassInfo, attr: str) -> Iterator[tuple[ast.AST, ast.expr]]:
    """``self.<attr> = value`` in the methods of ``cls``: (method, value)."""
    for value, scope, _node in cls.attributes.get(attr, ()):
        yield scope.node, value


def class_body_value(cls: ClassInfo, attr: str) -> tuple[ast.stmt, ast.expr] | None:
    """``attr = value`` (or ``attr: T = value``) in the class body."""
    for stmt in cls.node.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                and stmt.targets[0].id == attr:
            return stmt, stmt.value
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr \
                and stmt.value is not None:
            return stmt, stmt.value
    return None


def is_mutable_container(ctx: "FileContext", expr: ast.expr) -> bool:
    if isinstance(expr, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)):
        return True
    if isinstance(expr, ast.Call) and not expr.args and not expr.keywords:
        qual = ctx.model.qualify(expr.func)
        return qual is not None and (qual.removeprefix("builtins.") in _MUTABLE_CALLS or qual in _MUTABLE_CALLS)
    return False


def method_of(node: ast.AST) -> ast.AST | None:
    """The function whose code ``node`` is part of (see flow.function_of)."""
    func = function_of(node)
    return func if isinstance(func, FunctionNode) else None


def self_name(func: ast.AST) -> str | None:
    params = positional_params(func)
    return params[0] if params else None
