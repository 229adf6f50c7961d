"""A hook that captured its owner's container, and a method that later rebinds
the attribute (HKL345).

A hook that writes into ``self.feats`` looks the attribute up each time it
runs.  A hook that was handed the container itself (a closure over a local
alias, ``store = self.feats``; a default argument, ``store=self.feats``; a
``functools.partial(fn, self.feats)``) keeps writing into that object for as
long as it stays registered.  When a method of the class then rebinds
``self.feats = []``, the hook fills the old list and the class reads the new,
empty one.  This module finds those pairs in a class.  Nothing here imports
torch or runs code.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.bodies import body_nodes, param_names
from hooklint.static.replica_state import Rebind, rebinds
from hooklint.static.semantic import ClassInfo, SemanticModel

_FILLS = frozenset({"append", "extend", "add", "update", "insert", "setdefault", "__setitem__", "appendleft"})


@dataclass
class Capture:
    attr: str  # the attribute whose object the hook holds
    how: str  # "the closure's `store = self.feats` (line 12)"
    write: ast.AST  # where the hook writes into it


def _self_attr(expr: ast.AST) -> str | None:
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return expr.attr
    return None


def _writes_into(func: ast.AST, name: str) -> ast.AST | None:
    """Where ``func`` fills the container it knows as ``name``."""
    for node in body_nodes(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _FILLS \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == name:
            return node
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                        and target.value.id == name:
                    return node
    return None


def _defaults(func: ast.AST) -> dict[str, ast.AST]:
    args = func.args  # type: ignore[attr-defined]
    positional = [*args.posonlyargs, *args.args]
    out = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults):]], args.defaults))
    out.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return out


def captures(model: SemanticModel, hook: ast.AST, hook_expr: ast.AST | None, method: ast.AST) -> list[Capture]:
    """The containers of ``self`` that the hook holds itself rather than looks up."""
    out: list[Capture] = []
    if isinstance(hook, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        for name, default in _defaults(hook).items():
            attr = _self_attr(default)
            write = _writes_into(hook, name) if attr else None
            if attr and write is not None:
                out.append(Capture(attr, f"its default argument `{name}={ast.unparse(default)}` "
                                         f"(line {default.lineno})", write))
        own = set(param_names(hook))
        if any(sub is hook for sub in ast.walk(method)) and hook is not method:
            aliases: dict[str, ast.Assign] = {}
            for node in body_nodes(method):
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                        and _self_attr(node.value) is not None:
                    aliases[node.targets[0].id] = node
            for name, assign in aliases.items():
                if name in own:
                    continue
                write = _writes_into(hook, name)
                if write is not None:
                    attr = _self_attr(assign.value) or ""
                    out.append(Capture(attr, f"the closure's `{name} = self.{attr}` (line {assign.lineno})", write))
    if isinstance(hook_expr, ast.Call):
        name = model.qualify(hook_expr.func)
        if name in ("functools.partial", "partial") and hook_expr.args:
            for arg in [*hook_expr.args[1:], *(k.value for k in hook_expr.keywords)]:
                attr = _self_attr(arg)
                if attr is not None:
                    out.append(Capture(attr, f"`{ast.unparse(hook_expr)}` (line {hook_expr.lineno})", hook_expr))
    return out


def _registers(method: ast.AST, registering: str) -> bool:
    """The method registers hooks itself, or calls the method that does: it
    hands the new container to new hooks."""
    for node in body_nodes(method):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr.startswith("register_") and node.func.attr.endswith("hook") \
                    or node.func.attr == registering:
                return True
    return False


def stale_rebinds(owner: ClassInfo, capture: Capture, registering: str) -> list[Rebind]:
    """Methods other than ``__init__`` and the registering one that rebind the
    captured attribute without registering hooks again."""
    return [r for r in rebinds(owner, capture.attr)
            if r.method != registering and not _registers(owner.methods[r.method], registering)]
