"""Objects that own a hook handle: is the method that removes it ever called on them?

A class whose constructor registers a hook and keeps the handle on the
object (``self.hook = module.register_forward_hook(self.fn)``), with a
method that removes it (``close()``), hands the removal to whoever makes the
object.  A function that makes such objects (``Hook(layer)``, appended to a
local list) and lets them go without calling that method leaves the hooks
on the modules for ever: nothing holds the handles any more.

:func:`owner_fate` follows the object made by one constructor call through
the function that makes it: a name, a local list (``for h in hooks:
h.close()``), a comprehension assigned to a name.  It answers
``"released"`` (a removing method is called on it), ``"escapes"`` (returned,
stored, handed to other code, a ``with`` block: someone else may remove it),
or ``"dropped"`` (nothing calls a removing method and nothing else can).

Nothing here imports torch.
"""

from __future__ import annotations

import ast

_CONTAINER_STORES = frozenset({"append", "add", "insert", "appendleft"})
# Calls that read a local list without letting its items go anywhere.
_READERS = frozenset({"len", "enumerate", "zip", "reversed", "iter", "list", "tuple", "sorted"})


def _parent(node: ast.AST) -> ast.AST | None:
    return getattr(node, "_hl_parent", None)


_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


def _loop_over(use: ast.expr) -> tuple[ast.expr, ast.AST] | None:
    """(loop target, scope of the loop's body) when ``use`` is what a ``for`` or a
    comprehension iterates over (the parent links skip ``ast.comprehension``)."""
    parent = _parent(use)
    if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is use:
        return parent.target, parent
    if isinstance(parent, _COMPREHENSIONS):
        for gen in parent.generators:
            if gen.iter is use:
                return gen.target, parent
    if isinstance(parent, ast.comprehension) and parent.iter is use:
        return parent.target, _parent(parent)
    return None


def _loads(func: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]


def _local(func: ast.AST, name: str) -> bool:
    """``name`` is a plain local of ``func``: not global, nonlocal, or a parameter."""
    for node in ast.walk(func):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and name in node.names:
            return False
    args = func.args
    params = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    if name in params:
        return False
    # a nested function that reads it may keep it
    for node in ast.walk(func):
        if node is not func and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)):
                return False
    return True


def owner_fate(call: ast.Call, func: ast.AST, removers: frozenset[str]) -> str:
    """What becomes of the object ``call`` makes, in ``func`` (see the module's docstring)."""
    node: ast.AST = call
    parent = _parent(node)
    if isinstance(parent, ast.Expr):
        return "dropped"
    if isinstance(parent, ast.ListComp) and parent.elt is node:
        outer = _parent(parent)
        if isinstance(outer, ast.Assign) and len(outer.targets) == 1 and isinstance(outer.targets[0], ast.Name):
            return _container_fate(outer.targets[0].id, func, removers)
        return "escapes"
    if isinstance(parent, ast.Assign) and parent.value is node and len(parent.targets) == 1 \
            and isinstance(parent.targets[0], ast.Name):
        return _name_fate(parent.targets[0].id, func, removers)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) \
            and parent.func.attr in _CONTAINER_STORES and node in parent.args \
            and isinstance(parent.func.value, ast.Name):
        return _container_fate(parent.func.value.id, func, removers)
    return "escapes"


def _name_fate(name: str, func: ast.AST, removers: frozenset[str]) -> str:
    if not _local(func, name):
        return "escapes"
    verdict = "dropped"
    for use in _loads(func, name):
        found = _object_use(use, func, removers)
        if found == "escapes":
            return "escapes"
        if found == "released":
            verdict = "released"
    return verdict


def _object_use(use: ast.expr, func: ast.AST, removers: frozenset[str]) -> str:
    """How one read of the object uses it."""
    parent = _parent(use)
    if isinstance(parent, ast.Attribute) and parent.value is use:
        call = _parent(parent)
        if isinstance(call, ast.Call) and call.func is parent and parent.attr in removers:
            return "released"
        return "neutral"  # reads what the hook stored, or calls another method
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) \
            and parent.func.attr in _CONTAINER_STORES and use in parent.args \
            and isinstance(parent.func.value, ast.Name):
        return _container_fate(parent.func.value.id, func, removers)
    return "escapes"


def _container_fate(name: str, func: ast.AST, removers: frozenset[str]) -> str:
    """A local list of such objects: is a removing method called on its items?"""
    if not _local(func, name):
        return "escapes"
    binds = [n for n in ast.walk(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
    if len(binds) != 1:
        return "escapes"
    verdict = "dropped"
    for use in _loads(func, name):
        parent = _parent(use)
        loop = _loop_over(use)
        if loop is not None:
            target, scope = loop
            if not isinstance(target, ast.Name):
                return "escapes"
            for item_use in _loads(scope, target.id):
                found = _object_use(item_use, func, removers)
                if found == "escapes":
                    return "escapes"
                if found == "released":
                    verdict = "released"
            continue
        if isinstance(parent, ast.Attribute) and parent.value is use:
            continue  # hooks.append(...), hooks.clear(): the list's own methods
        if isinstance(parent, ast.Subscript) and parent.value is use:
            found = _object_use(parent, func, removers)
            if found == "escapes":
                return "escapes"
            if found == "released":
                verdict = "released"
            continue
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id in _READERS:
            outer = _parent(parent)
            if isinstance(outer, ast.Call) and isinstance(outer.func, ast.Name) and outer.func.id == "len":
                continue
            if parent.func.id == "len":
                continue
            loop = _loop_over(parent)
            if loop is not None:
                target, scope = loop
                names = [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
                for item in names:
                    for item_use in _loads(scope, item):
                        found = _object_use(item_use, func, removers)
                        if found == "escapes":
                            # an index from enumerate, say: only the objects matter
                            if isinstance(_parent(item_use), ast.Subscript):
                                continue
                            return "escapes"
                        if found == "released":
                            verdict = "released"
                continue
        return "escapes"
    return verdict
