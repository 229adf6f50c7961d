"""Hooks taken off by editing a module's (or tensor's) hook dict directly.

A registration's handle is one way to remove a hook; the other is the dict
torch keeps the hooks in (``module._forward_hooks``, an ``OrderedDict`` keyed
by the handle's id): ``del layer._forward_hooks[key]``,
``layer._forward_hooks.pop(key)``, ``.clear()``.  Libraries that dropped the
handle sometimes clean up that way (a destructor that deletes its own hook
from each layer's ``_forward_hooks``).  A class that does so for the kind of
hook it registers is taken to remove it: its handle being discarded is then
no leak hooklint can prove.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.hooks import HookKind
from hooklint.static.semantic import ClassInfo
from hooklint.static.tree_walk import walk, walk_tree

# The dicts torch keeps each kind of hook in (torch 2.x: nn.Module and Tensor attributes).
HOOK_DICTS: dict[HookKind, frozenset[str]] = {
    HookKind.FORWARD: frozenset({"_forward_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called"}),
    HookKind.FORWARD_PRE: frozenset({"_forward_pre_hooks", "_forward_pre_hooks_with_kwargs"}),
    HookKind.BACKWARD_LEGACY: frozenset({"_backward_hooks"}),
    HookKind.FULL_BACKWARD: frozenset({"_backward_hooks"}),
    HookKind.FULL_BACKWARD_PRE: frozenset({"_backward_pre_hooks"}),
    HookKind.TENSOR: frozenset({"_backward_hooks"}),
    HookKind.POST_ACCUMULATE: frozenset({"_post_accumulate_grad_hooks"}),
}
_DROPPING_METHODS = frozenset({"pop", "popitem", "clear", "__delitem__"})


def removes_through_hook_dict(cls: ClassInfo | None, kind: HookKind) -> bool:
    """Does a method of ``cls`` delete entries from the dict hooks of ``kind``
    live in (``del m._forward_hooks[k]``, ``m._forward_hooks.pop(k)``,
    ``.clear()``), or rebind it?"""
    if cls is None:
        return False
    names = HOOK_DICTS.get(kind, frozenset())
    for method in cls.methods.values():
        # local names bound to a hook dict (`hooks = layer._forward_hooks`)
        aliases = {target.id for node in ast.walk(method) if isinstance(node, ast.Assign)
                   and _is_hook_dict(node.value, names, set())
                   for target in node.targets if isinstance(target, ast.Name)}
        for node in ast.walk(method):
            if isinstance(node, ast.Delete):
                if any(isinstance(t, ast.Subscript) and _is_hook_dict(t.value, names, aliases) for t in node.targets):
                    return True
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in _DROPPING_METHODS and _is_hook_dict(node.func.value, names, aliases):
                return True
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr in names:
                return True
    return False


def _is_hook_dict(expr: ast.AST, names: frozenset[str], aliases: set[str]) -> bool:
    if isinstance(expr, ast.Attribute):
        return expr.attr in names
    return isinstance(expr, ast.Name) and expr.id in aliases


# ---------------------------------------------------------------- walking a hook dict
# Every dict torch keeps hooks in, of any kind.
ALL_HOOK_DICTS: frozenset[str] = frozenset(name for names in HOOK_DICTS.values() for name in names)
# What a hook of any registrant answers: calling it, and what every Python callable has.
_SAFE_ATTRS = frozenset({"__call__", "__name__", "__qualname__", "__module__", "__doc__", "__class__", "__dict__"})


@dataclass(frozen=True)
class ForeignUse:
    """An attribute of each hook in a module's hook dict, read with no check
    that the hook is one of the reader's own."""

    use: ast.Attribute  # `hook._init`
    loop: ast.AST  # the `for` statement or the comprehension
    source: ast.AST  # the hook dict as written (`self._forward_hooks`)
    name: str  # the loop variable holding each hook


def unchecked_hook_uses(tree: ast.AST) -> list[ForeignUse]:
    """Reads of ``<hook>.<attr>`` (not a dunder every callable has) where
    ``<hook>`` runs over the values of a module's hook dict
    (``for h in m._forward_hooks.values()``, ``for k, h in
    m._forward_pre_hooks.items()``, ``for k in d: h = d[k]`` with ``d`` the
    dict or a local alias of it, comprehensions too), and no check of what
    the hook is guards the read: ``isinstance``/``type(...)``/``hasattr``/
    ``getattr(..., default)``/``is``/``==`` on it (in an ``if``, a
    comprehension's ``if``, a conditional expression, an ``and``), or a
    ``try`` catching ``AttributeError``/``Exception``."""
    out: list[ForeignUse] = []
    for node in walk_tree(tree):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            found = _hook_element(node.target, node.iter, node)
            if found is not None:
                name, source = found
                out += _uses(node.body, name, node, source, node)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            for gen in node.generators:
                found = _hook_element(gen.target, gen.iter, node)
                if found is None:
                    continue
                name, source = found
                if any(_checks(test, name) for test in gen.ifs):
                    continue
                parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
                out += _uses(parts, name, node, source, node)
    return out


def _hook_element(target: ast.AST, iterable: ast.AST, loop: ast.AST) -> tuple[str, ast.AST] | None:
    """(the name holding each hook, the dict) for a loop over a hook dict's hooks."""
    source = iterable
    method = None
    if isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute) and not iterable.args:
        method, source = iterable.func.attr, iterable.func.value
    if isinstance(source, ast.Call) and isinstance(source.func, ast.Name) and source.func.id in ("list", "tuple") \
            and len(source.args) == 1:
        inner = source.args[0]  # `list(m._forward_hooks.items())`
        if isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and not inner.args:
            method, source = inner.func.attr, inner.func.value
        else:
            source = inner
    if not _is_any_hook_dict(source, loop):
        return None
    if method == "values" and isinstance(target, ast.Name):
        return target.id, source
    if method == "items" and isinstance(target, ast.Tuple) and len(target.elts) == 2 \
            and isinstance(target.elts[1], ast.Name):
        return target.elts[1].id, source
    if method in (None, "keys") and isinstance(target, ast.Name) and isinstance(loop, (ast.For, ast.AsyncFor)):
        # `for key in m._forward_hooks: hook = m._forward_hooks[key]`
        for stmt in loop.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name) \
                    and isinstance(stmt.value, ast.Subscript) and isinstance(stmt.value.slice, ast.Name) \
                    and stmt.value.slice.id == target.id and ast.dump(stmt.value.value) == ast.dump(source):
                return stmt.targets[0].id, source
    return None


def _is_any_hook_dict(expr: ast.AST, loop: ast.AST) -> bool:
    if isinstance(expr, ast.Attribute):
        return expr.attr in ALL_HOOK_DICTS
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr" \
            and len(expr.args) >= 2 and isinstance(expr.args[1], ast.Constant):
        return expr.args[1].value in ALL_HOOK_DICTS
    if isinstance(expr, ast.Name):
        # a local alias bound once before the loop, in the same function: `hooks = m._forward_hooks`
        scope = loop
        while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            scope = getattr(scope, "_hl_parent", None)
        if scope is None:
            return False
        values = _name_assignments(scope).get(expr.id, [])
        return len(values) == 1 and isinstance(values[0], ast.Attribute) and values[0].attr in ALL_HOOK_DICTS
    return False


def _name_assignments(scope: ast.AST) -> dict[str, list[ast.AST]]:
    """name -> the values of the assignments to it in ``scope`` (nested scopes
    included), in ``ast.walk``'s order; once per scope (asked per loop)."""
    found = scope.__dict__.get("_hl_name_assignments")
    if found is None:
        found = {}
        for node in walk_tree(scope):
            if isinstance(node, ast.Assign):
                for name in dict.fromkeys(t.id for t in node.targets if isinstance(t, ast.Name)):
                    found.setdefault(name, []).append(node.value)
        scope._hl_name_assignments = found  # type: ignore[attr-defined]
    return found


def _uses(parts: list[ast.AST], name: str, loop: ast.AST, source: ast.AST, stop: ast.AST) -> list[ForeignUse]:
    out = []
    for part in parts:
        for node in walk(part):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) \
                    and isinstance(node.value, ast.Name) and node.value.id == name \
                    and node.attr not in _SAFE_ATTRS and not _guarded(node, name, stop) \
                    and not _rebound_between(name, loop, node):
                out.append(ForeignUse(node, loop, source, name))
    return out


def _guarded(node: ast.AST, name: str, stop: ast.AST) -> bool:
    child = node
    cur = getattr(node, "_hl_parent", None)
    while cur is not None and cur is not stop:
        if isinstance(cur, (ast.If, ast.While)) and _checks(cur.test, name):
            return True
        if isinstance(cur, ast.IfExp) and _checks(cur.test, name):
            return True
        if isinstance(cur, ast.BoolOp) and isinstance(cur.op, ast.And):
            before = cur.values[:cur.values.index(child)] if child in cur.values else []
            if any(_checks(v, name) for v in before):
                return True
        if isinstance(cur, ast.Try) and child in cur.body and any(_catches_attribute_error(h) for h in cur.handlers):
            return True
        child, cur = cur, getattr(cur, "_hl_parent", None)
    # an earlier `if not isinstance(h, Mine): continue` in the loop body
    body = getattr(stop, "body", None)
    if isinstance(body, list):
        for stmt in body:
            if stmt.lineno >= node.lineno:  # type: ignore[attr-defined]
                break
            if isinstance(stmt, ast.If) and _checks(stmt.test, name) and stmt.body \
                    and isinstance(stmt.body[-1], (ast.Continue, ast.Break, ast.Return, ast.Raise)):
                return True
    return False


def _checks(test: ast.AST, name: str) -> bool:
    """Does ``test`` ask what the hook ``name`` is?"""
    for node in ast.walk(test):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in ("isinstance", "hasattr", "getattr", "type", "callable", "issubclass") \
                and node.args and _mentions(node.args[0], name):
            return True
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq, ast.In,
                                                                  ast.NotIn)) for op in node.ops) \
                and (_mentions(node.left, name) or any(_mentions(c, name) for c in node.comparators)):
            return True
    return False


def _mentions(expr: ast.AST, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(expr))


def _catches_attribute_error(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    names = [handler.type] if not isinstance(handler.type, ast.Tuple) else list(handler.type.elts)
    return any(isinstance(n, ast.Name) and n.id in ("AttributeError", "Exception", "BaseException", "TypeError")
               for n in names)


def _rebound_between(name: str, loop: ast.AST, use: ast.AST) -> bool:
    """The loop variable assigned again in the body before the read (``h = unwrap(h)``)."""
    body = getattr(loop, "body", None)
    if not isinstance(body, list):
        return False
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store) \
                and node.lineno <= use.lineno and not _binds_hook(node):  # type: ignore[attr-defined]
            return True
    return False


def _binds_hook(target: ast.Name) -> bool:
    """The ``hook = d[key]`` that binds the loop's hook."""
    stmt = getattr(target, "_hl_parent", None)
    return isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Subscript)
