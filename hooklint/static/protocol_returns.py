"""Overrides of a hook protocol's pass-through methods that drop the value.

Hook frameworks built on ``nn.Module`` (a ``ModelHook`` base with
``init_hook(module)``, ``pre_forward(module, *args, **kwargs)``,
``post_forward(module, output)``, ``detach_hook(module)``) define methods
whose base implementation hands back what it was given (``return module``,
``return output``, ``return args, kwargs``), because a chain of hooks, or
the framework, threads the value from one call to the next
(``module = hook.detach_hook(module)``).  An override that can end without
returning a value hands ``None`` to the next hook in the chain.  This module
finds such overrides within one file: the class hierarchy of the file, the
base method's returns, the override's paths, and the call sites that use
the method's value.  It never imports torch.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from hooklint.static.semantic import FunctionNode
from hooklint.static.tree_walk import walk_tree


@dataclass(frozen=True)
class DroppedReturn:
    override: ast.FunctionDef  # the method that can return None
    cls: ast.ClassDef
    base: ast.ClassDef
    base_method: ast.FunctionDef
    returned: str  # what the base returns: "`module`"
    user: ast.Call  # a call whose value is used
    how: str  # "the value ends" reason: "it falls off its end" / "`return` without a value at line 12"


def dropped_returns(tree: ast.Module) -> list[DroppedReturn]:
    classes = {node.name: node for node in walk_tree(tree) if isinstance(node, ast.ClassDef)}
    users: dict[str, ast.Call] | None = None  # the file's value uses, walked only once an override qualifies
    out: list[DroppedReturn] = []
    for cls in classes.values():
        for method in cls.body:
            if not isinstance(method, FunctionNode) or method.name.startswith("__"):
                continue
            found = _base_method(cls, method.name, classes, set())
            if found is None:
                continue
            base, base_method = found
            if "hook" not in (base.name + method.name).lower():
                continue  # a hook protocol, by its class or method name
            returned = _pass_through(base_method)
            if returned is None:
                continue
            how = _returns_none(method)
            if how is None:
                continue
            if users is None:
                users = _value_users(tree)
            if method.name not in users:
                continue
            out.append(DroppedReturn(method, cls, base, base_method, returned, users[method.name], how))
    return out


def _base_method(cls: ast.ClassDef, name: str, classes: dict[str, ast.ClassDef],
                 seen: set[str]) -> tuple[ast.ClassDef, ast.FunctionDef] | None:
    """The nearest base class of the file that defines ``name``."""
    for base in cls.bases:
        base_name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        if base_name is None or base_name in seen or base_name not in classes:
            continue
        seen.add(base_name)
        parent = classes[base_name]
        for node in parent.body:
            if isinstance(node, FunctionNode) and node.name == name:
                return parent, node
        deeper = _base_method(parent, name, classes, seen)
        if deeper is not None:
            return deeper
    return None


def _params(func: ast.AST) -> list[str]:
    args = func.args  # type: ignore[attr-defined]
    names = [a.arg for a in list(args.posonlyargs) + list(args.args) + list(args.kwonlyargs)]
    names += [a.arg for a in (args.vararg, args.kwarg) if a is not None]
    return names[1:] if names and names[0] in ("self", "cls") else names


def _pass_through(func: ast.AST) -> str | None:
    """What the base method hands back when it returns its own arguments on
    every path (``return module``, ``return args, kwargs``), else None."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body or _falls_through(body):
        return None
    params = set(_params(func))
    returns = [n for n in _own_nodes(func) if isinstance(n, ast.Return)]
    if not returns:
        return None
    texts = []
    for ret in returns:
        value = ret.value
        elts = value.elts if isinstance(value, ast.Tuple) else [value]
        if value is None or not elts or not all(isinstance(e, ast.Name) and e.id in params for e in elts):
            return None
        texts.append(ast.unparse(value))
    return f"`{texts[0]}`"


def _returns_none(func: ast.AST) -> str | None:
    """How the override can end without a value, or None when every path returns one."""
    body = [s for s in func.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body:
        return None
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in _own_nodes(func)):
        return None
    if len(body) == 1 and isinstance(body[0], (ast.Raise, ast.Pass)) or isinstance(body[-1], ast.Raise) \
            and len(body) == 1:
        return None  # abstract
    for node in _own_nodes(func):
        if isinstance(node, ast.Return) and node.value is None:
            return f"`return` without a value at line {node.lineno}"
    if _falls_through(body):
        return "it can reach its end without a `return`"
    return None


def _own_nodes(func: ast.AST) -> list[ast.AST]:
    """The nodes of ``func``'s body, not of the functions or classes nested in it."""
    out: list[ast.AST] = []
    stack = list(func.body)  # type: ignore[attr-defined]
    while stack:
        node = stack.pop()
        out.append(node)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (*FunctionNode, ast.Lambda, ast.ClassDef)):
                stack.append(child)
    return out


def _value_users(tree: ast.Module) -> dict[str, ast.Call]:
    """Method name -> a call ``x.name(...)`` of the file whose value is used
    (assigned, returned, passed on), not dropped as a statement."""
    parents: dict[int, ast.AST] = {}
    for node in walk_tree(tree):
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    users: dict[str, ast.Call] = {}
    for node in walk_tree(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        parent = parents.get(id(node))
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.Return)) and parent.value is node \
                or isinstance(parent, ast.Call) and node in parent.args:
            users.setdefault(node.func.attr, node)
    return users


def _falls_through(body: list[ast.stmt]) -> bool:
    """Can the block end without a return or raise?"""
    if not body:
        return True
    last = body[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return False
    if isinstance(last, ast.If):
        return _falls_through(last.body) or _falls_through(last.orelse)
    if isinstance(last, (ast.With, ast.AsyncWith)):
        return _falls_through(last.body)
    if isinstance(last, ast.Try):
        return _falls_through(last.body + last.orelse) or any(_falls_through(h.body) for h in last.handlers)
    if isinstance(last, ast.While) and isinstance(last.test, ast.Constant) and last.test.value is True:
        return False
    return True
