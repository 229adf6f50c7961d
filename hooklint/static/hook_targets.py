"""Which object a registration hooks, and the words for its kind.

Shared by the hook-lifetime rules (HKL301-HKL304): registrations grouped by
the object they hook (the same access path from the same binding, or from
`self` in any method of one class), and the handle a registration is bound to.
"""

from __future__ import annotations

import ast
from typing import Iterable

from hooklint.static.context import FileContext
from hooklint.static.describe import KIND_WORDS
from hooklint.static.flow import access_path, root_name
from hooklint.static.hooks import Registration
from hooklint.static.semantic import Binding, is_staticmethod, positional_params


def hook_words(reg: Registration) -> str:
    name = f" `{reg.hook.name}`" if reg.hook is not None else ""
    return f"{KIND_WORDS[reg.kind]}{name}"


def single_name_target(stmt: ast.AST, value: ast.AST) -> ast.Name | None:
    """``h = <value>``: the ``h``."""
    if isinstance(stmt, ast.Assign) and stmt.value is value and len(stmt.targets) == 1 \
            and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0]
    if isinstance(stmt, ast.AnnAssign) and stmt.value is value and isinstance(stmt.target, ast.Name):
        return stmt.target
    return None


def binding_of(ctx: FileContext, target: ast.Name, stmt: ast.AST) -> Binding | None:
    scope = ctx.model.scope_of(target)
    for b in scope.bindings.get(target.id, ()):
        if b.node is stmt:
            return b
    return None


def object_key(ctx: FileContext, expr: ast.AST) -> object:
    """Equal keys for expressions that name the same object: the same access
    path (``net.fc``, ``seq[0]``) from the same binding of its root name, or
    from ``self`` in any method of the same class."""
    path = access_path(expr)
    root = root_name(expr)
    if path is None or root is None:
        return id(expr)
    model = ctx.model
    bindings = model.bindings_at(root)
    if len(bindings) == 1 and bindings[0].kind == "param":
        func = bindings[0].scope.node
        params = positional_params(func)
        cls = model.enclosing_class(func)
        if params and params[0] == root.id and cls is not None and func in cls.methods.values() \
                and not is_staticmethod(func):
            return ("self", id(cls.node), path[1:])
    return (path, tuple(id(b.node) for b in bindings))


def registrations_by_target(ctx: FileContext, registrations: Iterable[Registration]) -> dict[object, list[Registration]]:
    """Registrations grouped by the object they hook."""
    out: dict[object, list[Registration]] = {}
    for reg in registrations:
        if reg.receiver is not None:
            out.setdefault(object_key(ctx, reg.receiver), []).append(reg)
    return out
