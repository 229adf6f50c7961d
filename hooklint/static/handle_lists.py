"""Containers of hook handles kept on ``self``: are they ever emptied?

A class that appends each new handle to ``self.handles`` in one method and
removes them in another (``register`` / ``remove``, ``__enter__`` /
``__exit__``) must also empty the container when it removes them.  Otherwise
the container keeps every handle of every earlier cycle: it grows with each
use of the object, and each removal walks (and calls ``remove()`` on) all of
them again.  This module says how a class fills such a container and whether
any code of the class empties, rebinds or hands it elsewhere.  It never
imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from hooklint.static.core import Core
from hooklint.static.core import places as P
from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import walk_tree

# Methods that add to a list or a set (a dict keyed by name replaces its entries instead).
_ADDING = frozenset({"append", "extend", "insert", "add", "appendleft"})
# Methods that take entries out.
_TAKING = frozenset({"clear", "pop", "popitem", "remove", "popleft", "discard"})
# Reads that neither empty the container nor let it go elsewhere.
_NEUTRAL_CALLS = frozenset({"len", "bool", "list", "tuple", "iter", "reversed", "enumerate", "zip", "sorted"})
_CONSTRUCTION = frozenset({"__init__", "__post_init__", "__new__", "setup_method"})


@dataclass(frozen=True)
class Growth:
    attr: str
    adds: list[ast.Call | ast.AugAssign | ast.Assign]  # where handles are added (outside construction)
    methods: list[str]  # the methods that add them


def growing_handle_lists(core: Core, cls: Any) -> list[Growth]:
    """Attributes of ``cls`` that receive handles of hooks registered outside
    construction, added with ``append`` / ``extend`` / ``+=`` (not keyed)."""
    classes = core.related_classes(cls)
    found: dict[str, tuple[list, list[str]]] = {}
    kept: list[tuple[str, ast.AST, str]] = []  # (method name, method, attribute) of handles kept in an element
    for info in classes:
        for name, method in info.methods.items():
            if name in _CONSTRUCTION:
                continue  # construction, whatever else calls it
            for reg in core.facts(method).regs:
                handle = reg.handle
                if not handle.startswith("at:"):
                    continue
                place = handle[3:]
                if not place.startswith(P.ELEMENT + "s.") or "." in place[len(P.ELEMENT) + 2:]:
                    continue
                kept.append((name, method, place[len(P.ELEMENT) + 2:]))
    if not kept:
        return []
    # (walks every method of the classes: only for the classes that keep handles, a few of a file's)
    constructing = construction_methods(classes)
    for name, method, attr in kept:
        if name in constructing:
            continue
        adds = _adding_sites(method, attr)
        if not adds:
            continue
        entry = found.setdefault(attr, ([], []))
        entry[0].extend(a for a in adds if a not in entry[0])
        if name not in entry[1]:
            entry[1].append(name)
    return [Growth(attr, adds, methods) for attr, (adds, methods) in found.items()]


def _self_attr(node: ast.AST, attr: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name) \
        and node.value.id == "self"


def _adding_sites(method: ast.AST, attr: str) -> list[ast.Call | ast.AugAssign | ast.Assign]:
    out: list[ast.Call | ast.AugAssign | ast.Assign] = []
    for node in ast.walk(method):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _ADDING \
                and _self_attr(node.func.value, attr):
            out.append(node)
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and _self_attr(node.target, attr):
            out.append(node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and _self_attr(node.targets[0], attr) \
                and _concatenated(node.value, attr):
            out.append(node)  # `self.hooks = self.hooks + [...]`
    return out


def _concatenated(value: ast.AST | None, attr: str) -> bool:
    """``self.<attr> + [...]`` (or ``[...] + self.<attr>``): the old entries kept, new ones added."""
    return isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add) \
        and (_self_attr(value.left, attr) or _self_attr(value.right, attr))


def emptied(core: Core, cls: Any, attr: str) -> ast.AST | None:
    """Code of the class that empties, rebinds or takes entries out of
    ``self.<attr>`` outside construction, or hands it to code that may (an
    argument of a call, a return, an alias): the node, else None."""
    for info in _with_bases(cls):  # a subclass that empties it does not help the class's own objects
        for name, method in info.methods.items():
            for removal_place in core.facts(method).forgets:
                if removal_place == f"s.{attr}":
                    return method
            for node in ast.walk(method):
                if isinstance(node, FunctionNode) and node is not method:
                    continue
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                        and _self_attr(node.value, attr):
                    return node  # an alias, which may be emptied under another name
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    for target in targets:
                        if _self_attr(target, attr) and name not in _CONSTRUCTION \
                                and not _concatenated(node.value, attr):
                            return node
                        if isinstance(target, ast.Subscript) and _self_attr(target.value, attr) \
                                and isinstance(target.slice, ast.Slice):
                            return node
                elif isinstance(node, ast.Delete):
                    for target in node.targets:
                        if _self_attr(target, attr) or isinstance(target, ast.Subscript) \
                                and _self_attr(target.value, attr):
                            return node
                elif isinstance(node, ast.Call):
                    if isinstance(node.func, ast.Attribute) and node.func.attr in _TAKING \
                            and _self_attr(node.func.value, attr):
                        return node
                    if isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr") and \
                            len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) \
                            and node.args[1].value == attr:
                        return node
                    called = node.func.id if isinstance(node.func, ast.Name) else ""
                    if called not in _NEUTRAL_CALLS and any(_self_attr(a, attr) for a in node.args) \
                            or any(_self_attr(k.value, attr) for k in node.keywords):
                        return node  # handed to code that may empty it
                elif isinstance(node, (ast.Return, ast.Yield)) and node.value is not None \
                        and _self_attr(node.value, attr):
                    return node
    return None


def removal_sites(core: Core, cls: Any, attr: str) -> list[tuple[ast.AST, Any]]:
    """(method, Removal) of the handles in ``self.<attr>``, outside ``__del__``
    (a finalizer runs once, at the end)."""
    return [(m, r) for m, r in core.removals_of(cls, attr)
            if getattr(m, "name", "") != "__del__" and r.place in (f"e:s.{attr}", f"s.{attr}")]


def construction_methods(classes: list[Any]) -> set[str]:
    """``__init__`` and the methods only construction calls (``self.setup()``
    from ``__init__``, and what that calls): they run once per object."""
    methods: dict[str, ast.AST] = {}
    for info in classes:
        for name, method in info.methods.items():
            methods.setdefault(name, method)
    callers: dict[str, set[str]] = {name: set() for name in methods}
    for name, method in methods.items():
        for node in ast.walk(method):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self" \
                    and node.func.attr in callers and node.func.attr != name:  # recursion adds no caller
                callers[node.func.attr].add(name)
    out = {name for name in methods if name in _CONSTRUCTION}
    changed = True
    while changed:
        changed = False
        for name, by in callers.items():
            if name not in out and by and by <= out:
                out.add(name)
                changed = True
    return out


def one_shot_instances(model: Any, cls: Any) -> bool:
    """Every construction of ``cls`` in its file is used for one call and
    dropped (``with Cls(...):``, ``Cls(...)(x)``, ``Cls(...).run()``), and
    there is at least one: no object of the class is used twice here."""
    sites = []
    for call in model.name_calls.get(cls.name, ()):
        if not hasattr(call.func, "_hl_scope"):
            continue
        bindings = model.bindings_at(call.func)
        if len(bindings) == 1 and bindings[0].kind == "class" and bindings[0].node is cls.node:
            sites.append(call)
    if not sites:
        return False
    for call in sites:
        parent = getattr(call, "_hl_parent", None)
        if isinstance(parent, ast.withitem) and parent.context_expr is call:
            continue
        if isinstance(parent, ast.Call) and parent.func is call:
            continue
        if isinstance(parent, ast.Attribute) and isinstance(getattr(parent, "_hl_parent", None), ast.Call) \
                and parent._hl_parent.func is parent:  # type: ignore[attr-defined]
            continue
        if isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name) \
                and _used_once(parent.targets[0].id, parent):
            continue
        return False
    return True


def _used_once(name: str, assign: ast.Assign) -> bool:
    """``tracker = Tracker(model); out = tracker(x)``: the object bound here is
    called (or has a method called) at most once after, outside any loop."""
    scope: ast.AST | None = getattr(assign, "_hl_parent", None)
    while scope is not None and not isinstance(scope, FunctionNode + (ast.Module,)):
        scope = getattr(scope, "_hl_parent", None)
    if scope is None:
        return False
    calls = 0
    for node in walk_tree(scope):
        if not (isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load)):
            continue
        parent = getattr(node, "_hl_parent", None)
        if isinstance(parent, ast.Call) and parent.func is node or isinstance(parent, ast.Attribute) \
                and isinstance(getattr(parent, "_hl_parent", None), ast.Call) \
                and parent._hl_parent.func is parent:  # type: ignore[attr-defined]
            calls += 1
            cur = getattr(node, "_hl_parent", None)
            while cur is not None and cur is not scope:
                if isinstance(cur, (ast.For, ast.AsyncFor, ast.While, ast.comprehension)):
                    return False
                cur = getattr(cur, "_hl_parent", None)
        elif isinstance(parent, ast.Attribute):
            continue  # reading a result (`tracker.name2module`)
        else:
            return False  # handed elsewhere, returned, stored: it may be used again
    return calls <= 1


def _with_bases(cls: Any) -> list[Any]:
    out = [cls]
    stack = list(cls.local_bases)
    while stack:
        base = stack.pop()
        if base not in out:
            out.append(base)
            stack.extend(base.local_bases)
    return out


def stale_guard(method: ast.AST, attr: str) -> ast.If | None:
    """An ``if self.<attr>: return`` (or ``if len(self.<attr>) ...: return``)
    in ``method`` before it adds handles: the "already installed" test that
    a list never emptied keeps true after the hooks were removed, so the
    method never registers them again (xformers' profiler)."""
    for node in ast.walk(method):
        if not isinstance(node, ast.If) or node.orelse or not node.body \
                or not isinstance(node.body[-1], ast.Return):
            continue
        test = node.test
        if isinstance(test, ast.Call) and isinstance(test.func, ast.Name) and test.func.id == "len" \
                and len(test.args) == 1:
            test = test.args[0]
        elif isinstance(test, ast.Compare) and isinstance(test.left, ast.Call) \
                and isinstance(test.left.func, ast.Name) and test.left.func.id == "len" and len(test.left.args) == 1:
            test = test.left.args[0]
        if _self_attr(test, attr):
            return node
    return None
