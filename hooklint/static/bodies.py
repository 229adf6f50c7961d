"""Questions about the body of one function (a hook, usually).

These walk only the function's own code: a nested ``def`` or ``lambda`` that
rebinds the same parameter name is a different variable and is skipped.
"""

from __future__ import annotations

import ast
from typing import Iterator

from hooklint.static.semantic import FunctionNode


def body_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """Every node of the function's body (for a lambda, its expression),
    not descending into nested functions or classes."""
    roots = [func.body] if isinstance(func, ast.Lambda) else list(func.body)  # type: ignore[attr-defined]
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, FunctionNode + (ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def name_uses(func: ast.AST, name: str) -> list[ast.Name]:
    """Loads of ``name`` in the function body, in source order."""
    out = [n for n in body_nodes(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    out.sort(key=lambda n: (n.lineno, n.col_offset))
    return out


def name_stores(func: ast.AST, name: str) -> list[ast.Name]:
    return [n for n in body_nodes(func) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]


def returns(func: ast.AST) -> list[ast.AST]:
    """The returned expressions (None for a bare ``return``); a lambda returns its body.
    A function that can fall off its end also "returns" None: see :func:`can_fall_through`."""
    if isinstance(func, ast.Lambda):
        return [func.body]
    return [r.value if r.value is not None else None for r in body_nodes(func) if isinstance(r, ast.Return)]


def return_statements(func: ast.AST) -> list[ast.Return]:
    if isinstance(func, ast.Lambda):
        return []
    return [r for r in body_nodes(func) if isinstance(r, ast.Return)]


def returns_nothing(func: ast.AST) -> bool:
    """True if every return is bare or ``return None`` (the hook changes nothing
    through its return value)."""
    if isinstance(func, ast.Lambda):
        body = func.body
        return isinstance(body, ast.Constant) and body.value is None or _is_none_returning_call(body)
    for value in returns(func):
        if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
            return False
    return True


def _is_none_returning_call(expr: ast.AST) -> bool:
    """``lambda *a: print(...)`` / ``lambda m, i, o: store.append(o)`` return None."""
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id == "print":
            return True
        if isinstance(func, ast.Attribute) and func.attr in ("append", "extend", "update", "add", "put", "write"):
            return True
    return False


def can_fall_through(func: ast.AST) -> bool:
    """Could the function end without a return statement on some path?"""
    if isinstance(func, ast.Lambda):
        return False
    return _block_falls_through(func.body)  # type: ignore[attr-defined]


def _block_falls_through(block: list[ast.stmt]) -> bool:
    for stmt in block:
        if isinstance(stmt, (ast.Return, ast.Raise)):
            return False
        if isinstance(stmt, ast.If) and not _block_falls_through(stmt.body) and stmt.orelse \
                and not _block_falls_through(stmt.orelse):
            return False
    return True


def param_names(func: ast.AST) -> list[str]:
    args: ast.arguments = func.args  # type: ignore[attr-defined]
    return [a.arg for a in list(args.posonlyargs) + list(args.args)]


def subscripts_of(func: ast.AST, name: str) -> list[ast.Subscript]:
    return [n for n in body_nodes(func) if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name)
            and n.value.id == name]


def attribute_chain(node: ast.AST) -> list[str] | None:
    """``module.weight.grad.data`` -> ["module", "weight", "grad", "data"]."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return None
